"""Container logs as the kubelet keeps them (CRI format files, one per container start) and
serves them on its ``/containerLogs`` endpoint, which the real API server calls for
``pods/log`` (follow, timestamps, sinceTime, sinceSeconds, tailLines, limitBytes, previous)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any


class LogError(Exception):
    """The kubelet's answer to a log request it cannot serve (HTTP 400, plain text)."""


def now_nano() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e9):09d}Z"


def _parse_ts(ts: str) -> float:
    base, _, frac = ts.rstrip("Z").partition(".")
    secs = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=None)
    epoch = (secs - datetime(1970, 1, 1)).total_seconds()
    return epoch + (float("0." + frac) if frac else 0.0)


class Logs:
    """Writes ``<ts> <stream> F <line>`` records and serves them with the kubelet's options."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cond = threading.Condition()
        self.open: set[Path] = set()
        self.closing = False

    def path(self, uid: str, container: str, restart: int) -> Path:
        return self.root / uid / container / f"{restart}.log"

    def opened(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
        with self.cond:
            self.open.add(path)

    def closed(self, path: Path) -> None:
        with self.cond:
            self.open.discard(path)
            self.cond.notify_all()

    def write(self, path: Path, stream: str, line: bytes) -> None:
        text = line.decode(errors="replace").rstrip("\n")
        with self.cond:
            with path.open("a") as fh:
                fh.write(f"{now_nano()} {stream} F {text}\n")
            self.cond.notify_all()

    # -- serving ----------------------------------------------------------------------------

    def serve(self, pod: dict[str, Any], container: str, query: dict[str, str]) -> Iterator[bytes]:
        """Checks eagerly (400 with the kubelet's words), then returns the line stream."""
        name = pod["metadata"]["name"]
        spec = pod.get("spec", {})
        names = [c["name"] for c in spec.get("containers", [])]
        init_names = [c["name"] for c in spec.get("initContainers") or []]
        if not container:
            if len(names) != 1:
                raise LogError(
                    f"a container name must be specified for pod {name}, choose one of: "
                    f"[{' '.join(names)}]"
                    + (
                        f" or one of the init containers: [{' '.join(init_names)}]"
                        if init_names
                        else ""
                    )
                )
            container = names[0]
        if container not in names + init_names:
            raise LogError(f"container {container} is not valid for pod {name}")
        statuses = (pod.get("status") or {}).get("containerStatuses", []) + (
            (pod.get("status") or {}).get("initContainerStatuses") or []
        )
        st = next((s for s in statuses if s["name"] == container), None)
        restart = st.get("restartCount", 0) if st else 0
        previous = query.get("previous") in ("true", "1")
        if previous:
            restart -= 1
            if restart < 0:
                raise LogError(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
        path = self.path(pod["metadata"]["uid"], container, restart)
        if not path.exists():
            waiting = ((st or {}).get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") or "ContainerCreating"
            raise LogError(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        follow = query.get("follow") in ("true", "1") and not previous
        return self._lines(path, query, follow)

    def _lines(self, path: Path, query: dict[str, str], follow: bool) -> Iterator[bytes]:
        stamps = query.get("timestamps") in ("true", "1")
        since = None
        if query.get("sinceSeconds"):
            since = time.time() - int(query["sinceSeconds"])
        elif query.get("sinceTime"):
            since = _parse_ts(query["sinceTime"])
        budget = int(query["limitBytes"]) if query.get("limitBytes") else None
        tail = int(query["tailLines"]) if query.get("tailLines") not in (None, "", "-1") else None
        fh = path.open("rb")
        with fh:  # closed also when the client goes away mid-stream
            lines: list[bytes] = fh.readlines()
            pending = b""
            if lines and not lines[-1].endswith(b"\n"):
                pending = lines.pop()
            if tail is not None:
                lines = lines[-tail:] if tail else []
            while True:
                for raw in lines:
                    out = self._format(raw, since, stamps)
                    if out is None:
                        continue
                    if budget is not None:
                        out = out[:budget]
                        budget -= len(out)
                    yield out
                    if budget is not None and budget <= 0:
                        fh.close()
                        return
                if not follow:
                    fh.close()
                    return
                with self.cond:
                    while True:
                        chunk = fh.read()
                        if chunk or path not in self.open or self.closing:
                            break
                        self.cond.wait(0.5)
                    if not chunk and (path not in self.open or self.closing):
                        chunk = fh.read()
                        if not chunk:
                            fh.close()
                            return
                data = pending + chunk
                lines = data.splitlines(keepends=True)
                pending = b""
                if lines and not lines[-1].endswith(b"\n"):
                    pending = lines.pop()

    @staticmethod
    def _format(raw: bytes, since: float | None, stamps: bool) -> bytes | None:
        parts = raw.split(b" ", 3)
        if len(parts) < 4:
            return None
        ts, msg = parts[0], parts[3]
        if since is not None and _parse_ts(ts.decode()) < since:
            return None
        return ts + b" " + msg if stamps else msg

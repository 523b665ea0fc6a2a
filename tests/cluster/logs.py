"""Container logs as the kubelet keeps them (CRI format files, one per container start) and as
the API server serves them (``pods/log`` with follow, timestamps, sinceTime, sinceSeconds,
tailLines, limitBytes, previous, container)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from . import errors
from .store import Store, now_nano


def _parse_ts(ts: str) -> float:
    base, _, frac = ts.rstrip("Z").partition(".")
    secs = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=None)
    epoch = (secs - datetime(1970, 1, 1)).total_seconds()
    return epoch + (float("0." + frac) if frac else 0.0)


class Logs:
    """Writes ``<ts> <stream> F <line>`` records and serves them with the kubelet's options."""

    def __init__(self, store: Store, root: Path) -> None:
        self.store = store
        self.root = root
        self.cond = threading.Condition()
        self.open: set[Path] = set()
        self._cut: dict[tuple[str | None, str | None], int] = {}
        self._cut_epoch = 0

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

    def cut(self, ns: str | None, pod: str | None) -> None:
        with self.cond:
            self._cut_epoch += 1
            self._cut[(ns, pod)] = self._cut_epoch
            self.cond.notify_all()

    def uncut(self) -> None:
        with self.cond:
            self._cut.clear()

    def _cut_since(self, ns: str, pod: str) -> int:
        return max(
            self._cut.get((ns, pod), 0),
            self._cut.get((ns, None), 0),
            self._cut.get((None, None), 0),
        )

    # -- serving ----------------------------------------------------------------------------

    def serve(self, ns: str, name: str, query: dict[str, str]) -> Iterator[bytes]:
        """Checks eagerly (400/404 as the server answers), then returns the line stream."""
        pod = self.store.get(self.store.registry.by_plural("pods"), ns, name)
        spec = pod.get("spec", {})
        names = [c["name"] for c in spec.get("containers", [])]
        init_names = [c["name"] for c in spec.get("initContainers") or []]
        container = query.get("container") or ""
        if not container:
            if len(names) != 1:
                raise errors.bad_request(
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
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        statuses = (pod.get("status") or {}).get("containerStatuses", []) + (
            (pod.get("status") or {}).get("initContainerStatuses") or []
        )
        st = next((s for s in statuses if s["name"] == container), None)
        restart = st.get("restartCount", 0) if st else 0
        previous = query.get("previous") in ("true", "1")
        if previous:
            restart -= 1
            if restart < 0:
                raise errors.bad_request(
                    f'previous terminated container "{container}" in pod "{name}" not found'
                )
        path = self.path(pod["metadata"]["uid"], container, restart)
        if not path.exists():
            waiting = ((st or {}).get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") or "ContainerCreating"
            raise errors.bad_request(
                f'container "{container}" in pod "{name}" is waiting to start: {reason}'
            )
        follow = query.get("follow") in ("true", "1") and not previous
        return self._lines(path, ns, name, query, follow)

    def _lines(
        self, path: Path, ns: str, pod: str, query: dict[str, str], follow: bool
    ) -> Iterator[bytes]:
        stamps = query.get("timestamps") in ("true", "1")
        since = None
        if query.get("sinceSeconds"):
            since = time.time() - int(query["sinceSeconds"])
        elif query.get("sinceTime"):
            since = _parse_ts(query["sinceTime"])
        budget = int(query["limitBytes"]) if query.get("limitBytes") else None
        tail = int(query["tailLines"]) if query.get("tailLines") not in (None, "", "-1") else None
        with self.cond:
            cut_at = self._cut_since(ns, pod)
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
                        if chunk or path not in self.open or self._cut_since(ns, pod) != cut_at:
                            break
                        self.cond.wait(0.5)
                    if not chunk and (path not in self.open or self._cut_since(ns, pod) != cut_at):
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


def pod_log_source(logs: Logs) -> Any:
    return logs.serve

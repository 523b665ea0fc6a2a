"""In a TrainJob: progress and metrics also go to ``TrainJob.status.trainerStatus``.

Kubeflow Trainer v2.2+ with its ``TrainJobStatus`` feature gate injects into every trainer
container ``KUBEFLOW_TRAINER_SERVER_URL`` (an HTTPS endpoint of the controller,
``.../apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status``),
``KUBEFLOW_TRAINER_SERVER_CA_CERT`` (the CA file that signs it) and
``KUBEFLOW_TRAINER_SERVER_TOKEN`` (a projected service-account token file, rotated). A POST
of ``{"trainerStatus": {"progressPercentage", "estimatedRemainingSeconds", "metrics": [{"name",
"value"}], "lastUpdatedTime"}}`` with ``Authorization: Bearer TOKEN`` is applied to the
TrainJob's status, so ``kubectl get trainjob -o yaml`` shows it.

With those variables set, the runtime of global rank 0 calls :func:`enable`: every
``ktrain.report`` record with a ``total`` (hand-written loops and the Transformers Trainer
hook alike) feeds the same :class:`~jupyter_ktrain.pod.progress.ProgressTracker` the
notebook uses, and a background thread POSTs the latest state at most every
:data:`MIN_INTERVAL_S` seconds (the last one when the job ends). Percent stays below 100 until
the last step. Failures are said once on stderr and never reach training. Standard library
only.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from .progress import Progress, ProgressTracker
from .protocol import metric_values
from .report import add_listener

__all__ = [
    "ENV_CA_CERT",
    "ENV_TOKEN",
    "ENV_URL",
    "MIN_INTERVAL_S",
    "StatusReporter",
    "defer",
    "enable",
    "payload",
]

ENV_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
MIN_INTERVAL_S = 5.0
MAX_METRICS = 256
MAX_TEXT = 64
TIMEOUT_S = 5.0


def payload(progress: Progress, metrics: dict[str, float], now: float) -> dict[str, Any]:
    """The request body for ``progress`` and the latest ``metrics`` (the CRD's limits kept:
    at most 256 metrics, names and values at most 64 characters)."""
    status: dict[str, Any] = {
        "lastUpdatedTime": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    }
    pct = progress.percent
    if pct is not None:
        status["progressPercentage"] = 100 if progress.done else min(99, int(pct))
    left = progress.remaining(now)
    if left is not None:
        status["estimatedRemainingSeconds"] = round(left)
    items = {"current_step": float(progress.steps_done), **metrics}  # steps done, as Trainer
    if progress.total is not None:
        items["total_steps"] = float(progress.total)
    status["metrics"] = [
        {"name": name[:MAX_TEXT], "value": f"{value:.6g}"}
        for name, value in list(items.items())[:MAX_METRICS]
    ]
    return {"trainerStatus": status}


class StatusReporter:
    """Collects records (:meth:`offer`, on the reporting thread, cheap) and POSTs from its own
    thread. ``post(url, body, headers)`` is swappable for tests."""

    def __init__(
        self,
        url: str,
        token_path: str,
        ca_cert: str | None = None,
        *,
        interval: float = MIN_INTERVAL_S,
        post: Callable[[str, bytes, dict[str, str]], int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.token_path = token_path
        self.ca_cert = ca_cert
        self.interval = interval
        self.clock = clock
        self.post = post or self._post
        self.tracker = ProgressTracker()
        self.metrics: dict[str, float] = {}
        self.sent = 0
        self.deferred: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._dirty = False
        self._last_post = float("-inf")
        self._warned = False
        self._thread: threading.Thread | None = None

    # -- the reporting side ---------------------------------------------------------------
    def offer(self, record: dict[str, Any]) -> None:
        step, total, t = record.get("step"), record.get("total"), record.get("t")
        metrics = metric_values(record)
        with self._lock:
            self.metrics.update(metrics)
            if isinstance(step, int) and isinstance(total, int):
                when = float(t) if isinstance(t, (int, float)) else self.clock()
                self.tracker.update(step, total, when)
            elif not metrics:
                return
            self._dirty = True
        self._wake.set()

    def start(self) -> StatusReporter:
        self._thread = threading.Thread(target=self._run, name="ktrain-trainer-status", daemon=True)
        self._thread.start()
        atexit.register(self.flush)
        return self

    # -- the sending side -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            self._wake.wait()
            wait = self._last_post + self.interval - self.clock()
            if wait > 0 and not self._final():
                time.sleep(min(wait, self.interval))
                continue
            self._wake.clear()
            self.send()

    def _final(self) -> bool:
        p = self.tracker.progress
        return p is not None and p.done

    def send(self) -> bool:
        """POST the latest state now, if anything changed since the last POST."""
        with self._lock:
            progress = self.tracker.progress
            if not self._dirty or progress is None or self.deferred:
                return False
            self._dirty = False
            now = self.clock()
            body = json.dumps(payload(progress, dict(self.metrics), now)).encode()
        self._last_post = now
        try:
            token = _read(self.token_path)
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            code = self.post(self.url, body, headers)
        except Exception as exc:
            self._warn(f"{type(exc).__name__}: {exc}")
            return False
        if code != 200:
            self._warn(f"HTTP {code}")
            return False
        self.sent += 1
        return True

    def flush(self) -> None:
        """The last state, sent at once (at exit: the final step is not held back)."""
        with contextlib.suppress(Exception):
            self.send()

    def _post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        context = None
        if url.startswith("https:"):
            context = ssl.create_default_context(cafile=self.ca_cert or None)
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=context) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as exc:  # the endpoint's metav1.Status: its code says it
            exc.close()
            return int(exc.code)

    def _warn(self, why: str) -> None:
        if not self._warned:
            self._warned = True
            with contextlib.suppress(Exception):
                sys.stderr.write(
                    f"jupyter-ktrain: could not update the TrainJob's trainerStatus ({why}); "
                    "the notebook still shows progress. Further failures are not reported.\n"
                )


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:  # re-read every time: the token rotates
        return f.read().strip()


_reporter: StatusReporter | None = None


def enable(env: dict[str, str] | None = None) -> StatusReporter | None:
    """Start reporting when the Trainer's endpoint variables are set (else None)."""
    global _reporter
    env = dict(os.environ) if env is None else env
    url, token = env.get(ENV_URL), env.get(ENV_TOKEN)
    if not url or not token or _reporter is not None:
        return _reporter
    _reporter = StatusReporter(url, token, env.get(ENV_CA_CERT)).start()
    add_listener(_reporter.offer)
    return _reporter


def defer(why: str) -> None:
    """Another writer reports this job's trainerStatus: ours stays quiet."""
    if _reporter is not None and _reporter.deferred is None:
        _reporter.deferred = why

"""How an order on a warm job's ConfigMap reaches its pods: by the kernel, through ``pods/exec``.

After each change to the job's code ConfigMap (a run, an abort, an idle limit) the kernel
runs ``python -m jupyter_ktrain.pod.agent.deliver`` in every running pod of the job at once
(one thread each), with the ConfigMap signed by the job's key on stdin
(:func:`~jupyter_ktrain.pod.agent.deliver.seal`). The key is the job's Secret ``NAME-warm``,
read once per kernel and job through the API (so a new kernel drives a job an old one made);
it is never logged or shown. What :class:`Courier` needs of the user is exactly what
Kubeflow's ``kubeflow-edit`` grants: ``get`` of secrets and pods, ``pods/exec``.
"""

from __future__ import annotations

import base64
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ....errors import BackendError, ClusterError
from ....pod.agent.deliver import REFUSED, STALE, seal
from ....pod.agent.mirror import CONFIGMAP_ENV
from ..client.fields import pod_phase
from ..client.kube_api import Api, ExecLost
from ..client.resources import POD, SECRET
from ..client.retries import ApiFailure
from ..labels import JOB_LABEL
from .orders import KEY_FIELD, warm_secret

__all__ = ["Courier"]

EXEC_TIMEOUT_S = 30.0
# a dropped exec connection is tried again: a delivery is idempotent (the pod answers STALE to
# an order it applied already), and a busy API server or node drops one now and then
EXEC_TRIES = 3
EXEC_RETRY_S = 0.5
DELIVER_MODULE = "jupyter_ktrain.pod.agent.deliver"


class Courier:
    """Delivers a warm job's orders to its pods (see the module's docstring)."""

    def __init__(self, api: Api):
        self.api = api
        self._keys: dict[tuple[str, str], str] = {}  # (namespace, job) -> key

    def key(self, namespace: str, job: str) -> str:
        """The job's key, from its Secret (read once)."""
        if (namespace, job) not in self._keys:
            path = SECRET.path(namespace, warm_secret(job))
            secret = self.api.find(path)
            if secret is None:
                raise BackendError(
                    f"The warm job {job!r} has no key (Secret {warm_secret(job)!r} is "
                    "missing: the job was made by an older jupyter-ktrain, or the Secret "
                    f"was deleted). End it with `%ktrain delete {job}` and run the cell again."
                )
            raw = (secret.get("data") or {}).get(KEY_FIELD, "")
            self._keys[(namespace, job)] = base64.b64decode(raw).decode()
        return self._keys[(namespace, job)]

    def pods(self, namespace: str, job: str) -> list[tuple[str, str, str]]:
        """(pod, container, python) of each running pod of the job's warm agents."""
        path = POD.path(namespace)
        items = self.api.items(path, {"labelSelector": f"{JOB_LABEL}={job}"})
        out = []
        for pod in items:
            if pod_phase(pod) != "Running":
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                if any(e.get("name") == CONFIGMAP_ENV for e in c.get("env") or []):
                    python = (c.get("command") or ["python"])[0]
                    out.append((pod["metadata"]["name"], c["name"], python))
        return sorted(out)

    def deliver(
        self, namespace: str, job: str, configmap: dict[str, Any], nodes: int | None = None
    ) -> list[str]:
        """Deliver ``configmap`` (as the API server holds it now) to every running pod of
        ``job``; the problems, one line each ([] when each pod took it or held a newer order
        already). ``nodes``: a run, which every one of this many pods must get (a pod not
        running then is a problem; otherwise it reads the order from its mount when it
        starts)."""
        envelope = seal(self.key(namespace, job), f"{job}-code", configmap)
        pods = self.pods(namespace, job)
        problems = []
        if nodes is not None and len(pods) < nodes:
            running = ", ".join(p for p, _c, _py in pods) or "none"
            problems.append(f"only {len(pods)} of its {nodes} pods are running ({running})")
        if not pods:
            return problems
        with ThreadPoolExecutor(max_workers=min(len(pods), 32)) as pool:
            answers = list(pool.map(lambda p: self._one(namespace, p, envelope), pods))
        return problems + [a for a in answers if a]

    def _one(self, namespace: str, target: tuple[str, str, str], envelope: bytes) -> str:
        """One pod's delivery: '' when taken, else what went wrong, in one line."""
        pod, container, python = target
        # -S: no site-packages (a big image's .pth files cost ~0.1 s); it needs only the
        # standard library and the runner library on PYTHONPATH
        command = [python, "-S", "-m", DELIVER_MODULE]
        for attempt in range(1, EXEC_TRIES + 1):
            try:
                got = self.api.exec(
                    namespace, pod, container, command, stdin=envelope, timeout=EXEC_TIMEOUT_S
                )
                break
            except (ExecLost, ApiFailure) as exc:
                transient = isinstance(exc, ExecLost) or exc.transient
                if not transient or attempt == EXEC_TRIES:
                    tried = f" (tried {attempt} times)" if attempt > 1 else ""
                    return f"pod {pod}: {exc}{tried}"
            except ClusterError as exc:
                return f"pod {pod}: {exc}"
            time.sleep(EXEC_RETRY_S * attempt)
        if got.code in (0, STALE):
            return ""
        said = (got.stderr.strip().splitlines() or [f"exit code {got.code}"])[-1]
        if got.code == REFUSED:
            return f"pod {pod} refused it ({said})"
        return f"pod {pod}: {said} (exit code {got.code})"

"""A cluster job's stacks (``%ktrain stacks``): asked in every running pod of the job at once,
through ``pods/exec``.

In each pod the kernel runs ``python -m jupyter_ktrain.pod.stacks [--rank R]``, which asks the
pod's ranks on their sockets (:mod:`jupyter_ktrain.pod.stacks`) and prints one ``stack`` record
a rank, in the job's line protocol; they are read from the exec's output. ``%ktrain profile``
goes the same way (``--profile N``: one ``profile`` record a rank, its trace inside, after the
ranks' next N steps). The pods hold no API
right and no token for it: what the user needs is ``create`` on ``pods/exec`` (Kubeflow's
``kubeflow-edit`` grants it) and ``get`` of the job's pods.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from ...errors import ClusterError
from ...kinds import KIND_TABLE
from ...pod.protocol import Profile, Stack, parse_line
from ...pod.stacks import ASK_TIMEOUT_S, PROFILE_TIMEOUT_S
from .client.fields import pod_phase
from .cluster import Cluster
from .lookup import kind_of, watch

__all__ = ["JobStacks"]

STACKS_MODULE = "jupyter_ktrain.pod.stacks"
# the command's own start (an interpreter in the pod) and the exec's round trips, on top of the
# ranks' answer
EXEC_TIMEOUT_S = ASK_TIMEOUT_S + 20.0
R = TypeVar("R", Stack, Profile)


class JobStacks:
    """The stacks of the jobs in the ``cluster`` context's namespace."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def stacks(self, name: str, rank: int | None = None) -> list[tuple[str, Stack]]:
        """(pod, stack) of each rank that runs in a pod of job ``name`` (of ``rank`` only), by
        rank; a pod that could not be asked is one entry without a rank, saying why."""
        return self._asked(name, rank, [], Stack, lambda why: Stack(None, why=why), EXEC_TIMEOUT_S)

    def profile(self, name: str, steps: int, rank: int | None = None) -> list[tuple[str, Profile]]:
        """(pod, profile) of the next ``steps`` steps of each rank in a pod of job ``name``,
        asked as :meth:`stacks` asks."""
        timeout = PROFILE_TIMEOUT_S + 20.0
        ask = ["--profile", str(steps)]
        return self._asked(name, rank, ask, Profile, lambda why: Profile(None, why=why), timeout)

    def _asked(
        self,
        name: str,
        rank: int | None,
        ask: list[str],
        kind: type[R],
        failed: Callable[[str], R],
        timeout: float,
    ) -> list[tuple[str, R]]:
        """(pod, record) of each rank in a running pod of job ``name``: the records of ``kind``
        that ``python -m jupyter_ktrain.pod.stacks [--rank R] *ask`` printed there."""
        found = watch(self.cluster, name)  # JobNotFound
        if found.job is None:
            return []
        container = KIND_TABLE[found.job.get("kind") or kind_of(self.cluster, name)].container
        targets = []
        for pod_name, pod in sorted(found.pods.items()):
            if pod_phase(pod) != "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                if c.get("name") == container and c.get("command"):  # the agent's container
                    targets.append((pod_name, str(c["command"][0])))
        if not targets:
            return []
        ask = ask + ([] if rank is None else ["--rank", str(rank)])

        def one(target: tuple[str, str]) -> list[tuple[str, R]]:
            pod, python = target
            command = [python, "-m", STACKS_MODULE, *ask]
            return [(pod, r) for r in self._ask(pod, container, command, kind, failed, timeout)]

        with ThreadPoolExecutor(max_workers=min(len(targets), 32)) as pool:
            got = [entry for answer in pool.map(one, targets) for entry in answer]
        return sorted(got, key=lambda p: (p[1].rank is None, p[1].rank or 0, p[0]))

    def _ask(
        self,
        pod: str,
        container: str,
        command: list[str],
        kind: type[R],
        failed: Callable[[str], R],
        timeout: float,
    ) -> list[R]:
        """The records one pod's ranks gave; a pod that could not be asked: why, in one."""
        namespace = self.cluster.namespace
        try:
            got = self.cluster.api.exec(namespace, pod, container, command, timeout=timeout)
        except ClusterError as exc:  # ExecLost, ApiFailure, or the command did not run there
            return [failed(f"could not be asked ({exc})")]
        if got.code != 0:
            said = (got.stderr.strip().splitlines() or [f"exit code {got.code}"])[-1]
            return [failed(f"could not be asked ({said})")]
        records = (parse_line(line).typed for line in got.stdout.splitlines())
        return [r for r in records if isinstance(r, kind)]

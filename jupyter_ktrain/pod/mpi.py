"""Ranks started by ``mpirun`` (an MPIJob): what ``torch.distributed``'s ``env://`` needs.

Open MPI gives each rank ``OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}`` and nothing
torch-specific, and the Kubeflow v1 MPI controller adds nothing either. Before the user's code
runs, the runtime adds (:func:`torch_env`) ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, so ``dist.init_process_group("gloo")``
(or ``"nccl"``) works unchanged. Where ``RANK`` or ``WORLD_SIZE`` is already set (torchrun, or
the user), nothing is changed.

``MASTER_ADDR`` is rank 0's host: the first host of the hostfile under ``-map-by slot``. Worker
pods have no hostfile (the controller mounts only ``kubexec.sh`` there) and no DNS name (it
creates no Service), so the launcher's agent (``--mpi-launcher``, :func:`launcher_env`) waits
until the hostfile's pods run, turns the first one into an address (its pod's IP through the
``kubectl`` the controller delivers to the launcher, else DNS) and ``mpirun -x MASTER_ADDR -x
MASTER_PORT`` passes it to every rank. A rank given none uses the hostfile when it can read one,
else ``127.0.0.1`` when all ranks share its host. ``MASTER_PORT`` is :data:`MASTER_PORT` (29500,
torch's own default) unless set.

Open MPI 4 (ORTE) and Open MPI 5 (PRRTE) read their hostfile and rsh agent from different
variables: the v1 MPI controller sets only the Open MPI 4 ones (``OMPI_MCA_orte_default_hostfile``,
``OMPI_MCA_plm_rsh_agent``), which Open MPI 5 ignores without a word: its ``mpirun`` would start
every rank on the launcher and the job would still succeed. :data:`OPEN_MPI_5_ENV` are the names
Open MPI 5 reads (as Kubeflow Trainer v2.4 sets them), pointing at the same files; the launcher
gets both (Open MPI 4 ignores ``PRTE_MCA_*``, Open MPI 5 ``OMPI_MCA_orte_*``).

Standard library only: this runs in the job.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Mapping

__all__ = [
    "HOSTFILE",
    "KUBECTL",
    "KUBEXEC",
    "MASTER_PORT",
    "OPEN_MPI_5_ENV",
    "hostfile_hosts",
    "launcher_env",
    "local_rank",
    "node_index",
    "rank_env",
    "torch_env",
]

MASTER_PORT = 29500
HOSTFILE = "/etc/mpi/hostfile"  # where the MPI controller mounts it (launcher only)
KUBECTL = "/opt/kube/kubectl"  # where its kubectl-delivery init container puts kubectl
KUBEXEC = "/etc/mpi/kubexec.sh"  # the controller's rsh agent: `kubectl exec` into a worker
# Open MPI 5's runtime (PRRTE) reads these, not the controller's OMPI_MCA_orte_*/plm_rsh_*
HOSTFILE_ENVS = ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile")
OPEN_MPI_5_ENV = (("PRTE_MCA_prte_default_hostfile", HOSTFILE), ("PRTE_MCA_plm_ssh_agent", KUBEXEC))
WAIT_S = 300.0

_OMPI = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE")  # fmt: skip


def hostfile_hosts(text: str) -> list[str]:
    """Host names of an Open MPI hostfile (``NAME slots=N`` lines; ``#`` comments), in order."""
    hosts = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            hosts.append(words[0])
    return hosts


def _ompi(env: Mapping[str, str]) -> tuple[int, int, int, int] | None:
    values = [env.get(k, "") for k in _OMPI]
    if not all(v.isdigit() for v in values):
        return None
    rank, size, local, local_size = (int(v) for v in values)
    return rank, size, local, local_size


def local_rank(env: Mapping[str, str]) -> int | None:
    """This process's rank on its node when mpirun started it; None otherwise."""
    got = _ompi(env)
    return got[2] if got else None


def node_index(env: Mapping[str, str]) -> int | None:
    """The node a rank of mpirun runs on (``-map-by slot``, equal slots); None otherwise."""
    got = _ompi(env)
    return got[0] // max(got[3], 1) if got else None


def torch_env(env: Mapping[str, str], hostfile: str | None = None) -> dict[str, str]:
    """The variables ``env://`` needs that ``env`` lacks, for a rank mpirun started.

    ``hostfile`` is the hostfile's text when the rank can read one. Returns ``{}`` when ``env``
    is not an Open MPI rank's, or already has ``RANK`` or ``WORLD_SIZE``.
    """
    got = _ompi(env)
    if got is None or "RANK" in env or "WORLD_SIZE" in env:
        return {}
    rank, size, local, local_size = got
    out = {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(local),
           "LOCAL_WORLD_SIZE": str(local_size)}  # fmt: skip
    if not env.get("MASTER_ADDR"):
        hosts = hostfile_hosts(hostfile or "")
        if hosts:
            out["MASTER_ADDR"] = hosts[0]
        elif local_size == size:
            out["MASTER_ADDR"] = "127.0.0.1"
    if not env.get("MASTER_PORT"):
        out["MASTER_PORT"] = str(MASTER_PORT)
    return out


def rank_env(env: Mapping[str, str]) -> dict[str, str]:
    """:func:`torch_env` for this process, reading the hostfile only when it is needed."""
    needs_file = _ompi(env) is not None and not env.get("MASTER_ADDR")
    return torch_env(env, read_hostfile(env) if needs_file else None)


def read_hostfile(env: Mapping[str, str]) -> str | None:
    """The hostfile mpirun uses (Open MPI 4's or 5's variable, else the controller's)."""
    path = next((env[k] for k in HOSTFILE_ENVS if env.get(k)), HOSTFILE)
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        return None


def _resolve(host: str) -> str | None:
    try:
        return socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0]  # type: ignore[return-value]
    except (OSError, UnicodeError, IndexError):
        return None


def _kubectl_pods(kubectl: str, names: list[str]) -> dict[str, tuple[str, str]] | None:
    """name -> (phase, podIP) of the pods that exist, from ``kubectl get pod -o json``; None
    when kubectl cannot answer (no access, no API server)."""
    argv = [kubectl, "get", "pod", *names, "-o", "json", "--ignore-not-found"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    if not done.stdout.strip():
        return {}
    try:
        data = json.loads(done.stdout)
    except ValueError:
        return None
    items = data.get("items", [data]) if isinstance(data, dict) else []
    out = {}
    for pod in items:
        status = pod.get("status") or {}
        out[pod["metadata"]["name"]] = (status.get("phase", ""), status.get("podIP", ""))
    return out


PodLookup = Callable[[list[str]], dict[str, tuple[str, str]] | None]


def wait_for_hosts(
    hosts: list[str],
    pods: PodLookup,
    *,
    wait_s: float = WAIT_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, tuple[str, str]] | None:
    """Poll until every host's pod is Running (or ``wait_s`` passed); the last answer (None
    at once when the cluster cannot be asked: no waiting on what cannot be seen).

    The controller starts the launcher without waiting for its workers; mpirun started before
    they run fails (a launcher restart). Waiting here costs nothing.
    """
    deadline = clock() + wait_s
    while True:
        seen = pods(hosts)
        if (
            seen is None
            or all(seen.get(h, ("", ""))[0] == "Running" for h in hosts)
            or clock() >= deadline
        ):
            return seen
        sleep(1.0)


def launcher_env(
    env: Mapping[str, str],
    *,
    hostfile: str | None,
    pods: PodLookup | None,
    resolve: Callable[[str], str | None] = _resolve,
    say: Callable[[str], None] = lambda _text: None,
    wait_s: float = WAIT_S,
) -> dict[str, str]:
    """``MASTER_ADDR``/``MASTER_PORT`` for mpirun to pass to every rank (``-x``).

    ``pods`` asks the cluster about the hostfile's pods (None without kubectl). Rank 0's host
    becomes an address: its pod's IP, else what DNS says, else the name as it is.
    """
    out = {"MASTER_PORT": env.get("MASTER_PORT") or str(MASTER_PORT)}
    if env.get("MASTER_ADDR"):
        return {"MASTER_ADDR": env["MASTER_ADDR"], **out}
    hosts = hostfile_hosts(hostfile or "")
    if not hosts:
        return {"MASTER_ADDR": "127.0.0.1", **out}
    seen: dict[str, tuple[str, str]] | None = {}
    if pods is not None:
        say(f"waiting for the {len(hosts)} worker pod(s) of the hostfile to run")
        seen = wait_for_hosts(hosts, pods, wait_s=wait_s)
        late = [h for h in hosts if (seen or {}).get(h, ("", ""))[0] != "Running"]
        if seen is None:
            say("cannot list the worker pods (kubectl get pod failed); starting mpirun")
        elif late:
            say(f"not running after {wait_s:.0f}s: {', '.join(late)}; starting mpirun anyway")
    first = hosts[0]
    addr = (seen or {}).get(first, ("", ""))[1] or resolve(first) or first
    say(f"rank 0 runs on {first}: MASTER_ADDR={addr} MASTER_PORT={out['MASTER_PORT']}")
    return {"MASTER_ADDR": addr, **out}


def kubectl_lookup(kubectl: str = KUBECTL) -> PodLookup | None:
    """The pod lookup through the delivered kubectl, or None where there is none."""
    if not os.access(kubectl, os.X_OK):
        return None
    return lambda names: _kubectl_pods(kubectl, names)

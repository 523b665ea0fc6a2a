"""Every job kind ktrain can submit, in one table: the one place per-kind knowledge lives.

Spec validation, rendering, schema validation, the preflight, status and the Kubernetes
backend all read :data:`KIND_TABLE`; none of them names a kind. Adding a kind is one
:class:`JobKind` entry here plus its builder, a function of ``(spec, code, labels)``
registered by name in :mod:`jupyter_ktrain.backends.kubernetes.plans.builders` (this module imports
nothing of the backends, so the spec can read it), and its CRD in ``jupyter_ktrain/crds/``.

Pure data: no I/O, no imports of the rest of the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_KIND",
    "KINDS",
    "KIND_TABLE",
    "JobKind",
    "ReplicaType",
    "job_kind",
]

INDEXED = "{job}-{type}-{index}"  # the operator's pod (and Service) name: <job>-<type>-<i>


@dataclass(frozen=True)
class ReplicaType:
    """One replica type of a kind, as its controller treats it."""

    name: str  # the key in the job's replica specs: "Master", "Worker"
    singleton: bool = False  # the operator allows exactly one (its webhook rejects more)
    required: bool = False  # the operator rejects a job without it
    pod_name: str = INDEXED  # its pods' names; ``{type}`` is ``name`` in lower case
    restart_policy: str = "ExitCode"  # ktrain's default for it (--restart-policy overrides)
    exit_code_restarts: bool = True  # False: the controller cannot restart it by exit code
    metrics: bool = True  # its pods' own process is the agent, serving --metrics-port

    def pod(self, job: str, index: int) -> str:
        return self.pod_name.format(job=job, type=self.name.lower(), index=index)

    def pods(self, job: str, count: int) -> list[str]:
        """Its ``count`` pods' names (one where the name has no index: MPIJob's launcher)."""
        return [self.pod(job, i) for i in range(count if "{index}" in self.pod_name else 1)]


@dataclass(frozen=True)
class JobKind:
    """One kind: its API, its CRD, its replica types in node-rank order, and how it runs.

    ``launcher`` is what the agent starts in each replica (:func:`jupyter_ktrain.pod.launch.
    node_command`): ``torchrun`` (one rank per local process, from the ``PET_*`` env),
    ``single`` (one process; the framework reads the operator's env) or ``mpirun`` (a
    launcher replica starts every rank). ``replica_ranks``: replica *n* holds ranks
    ``n*nproc .. (n+1)*nproc-1``, so a replica's exit code stands for its ranks that never
    reported one. ``trainer_runtime``: a Kubeflow Trainer v2 job, run by the
    (Cluster)TrainingRuntime ``--runtime`` names: its pods are a JobSet's, it takes pod-level
    settings from the runtime, and ktrain gives it a runtime of its own with the failure policy
    every other kind gets. ``elastic``: it takes ``--elastic`` (torchrun's c10d rendezvous).
    ``kueue_ignores``: why Kueue does not manage this kind ("": it does, so ``--kueue-queue``
    holds the job until admitted; a kind Kueue ignores would run at once, unqueued).
    """

    name: str  # "PyTorchJob"
    group: str
    version: str
    plural: str
    crd_file: str  # in jupyter_ktrain/crds/
    container: str  # the container the controller looks for (and reads exit codes from)
    builder: str  # its builder's name in jupyter_ktrain.backends.kubernetes.plans.builders
    launcher: Literal["torchrun", "single", "mpirun"]
    replica_key: str | None = None  # "pytorchReplicaSpecs"; None: no replica specs
    replicas: tuple[ReplicaType, ...] = ()  # in node-rank order
    container_required: bool = True  # the operator's webhook rejects a replica without it
    replica_ranks: bool = False
    trainer_runtime: bool = False
    elastic: bool = False
    kueue_ignores: str = ""
    # the program runs once, as the driver of a framework that spreads the work over the nodes
    # itself (Ray): a local run starts that driver once, its framework local on this machine
    driver_only: bool = False
    # environment of every process of the job (the driver's and its framework's), wherever it
    # runs: what the kind needs of ktrain's line protocol
    driver_env: tuple[tuple[str, str], ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def api(self) -> tuple[str, str, str]:
        """(group, version, plural): the REST path of its objects."""
        return self.group, self.version, self.plural

    def replica(self, name: str) -> ReplicaType | None:
        return next((r for r in self.replicas if r.name == name), None)

    def restart_policy(self, replica: str) -> str:
        rtype = self.replica(replica)
        return rtype.restart_policy if rtype is not None else "ExitCode"

    def rank_order(self, replica: str) -> int:
        """Where a replica type's pods come in node-rank order (unknown types last)."""
        names = [r.name for r in self.replicas]
        return names.index(replica) if replica in names else len(names)

    def pod_suffixes(self, nodes: int) -> list[str]:
        """What the controller appends to the job's name for its pods and Services, at
        their longest with ``nodes`` nodes (a singleton's index is always 0)."""
        last = max(nodes - 1, 0)
        return [r.pod("", 0 if r.singleton else last) for r in self.replicas]


_KUBEFLOW = "kubeflow.org"
_TRAINER = "trainer.kubeflow.org"

KIND_TABLE: dict[str, JobKind] = {
    k.name: k
    for k in (
        # Master + Workers (static rendezvous), or Workers only with an elasticPolicy
        JobKind(
            name="PyTorchJob",
            group=_KUBEFLOW,
            version="v1",
            plural="pytorchjobs",
            crd_file="kubeflow.org_pytorchjobs.yaml",
            container="pytorch",
            builder="pytorchjob",
            launcher="torchrun",
            replica_key="pytorchReplicaSpecs",
            replicas=(ReplicaType("Master", singleton=True), ReplicaType("Worker")),
            replica_ranks=True,
            elastic=True,
        ),
        # Chief + Workers (+ parameter servers); TensorFlow reads TF_CONFIG
        JobKind(
            name="TFJob",
            group=_KUBEFLOW,
            version="v1",
            plural="tfjobs",
            crd_file="kubeflow.org_tfjobs.yaml",
            container="tensorflow",
            builder="tfjob",
            launcher="single",
            replica_key="tfReplicaSpecs",
            replicas=(
                ReplicaType("Chief", singleton=True),
                ReplicaType("Master", singleton=True),
                ReplicaType("Worker"),
                ReplicaType("PS"),
            ),
        ),
        # a launcher (mpirun; its agent re-runs it after a fault) + workers whose containers
        # only wait while mpirun execs the ranks in them; the controller names its one
        # launcher <job>-launcher, with no index; MPIJob has no webhook (mainContainer)
        JobKind(
            name="MPIJob",
            group=_KUBEFLOW,
            version="v1",
            plural="mpijobs",
            crd_file="kubeflow.org_mpijobs.yaml",
            container="mpi",
            builder="mpijob",
            launcher="mpirun",
            replica_key="mpiReplicaSpecs",
            replicas=(
                ReplicaType(
                    "Launcher",
                    singleton=True,
                    required=True,
                    pod_name="{job}-{type}",
                    restart_policy="Never",
                    exit_code_restarts=False,
                ),
                # a deleted worker is made anew by the operator under ExitCode
                ReplicaType("Worker", metrics=False),
            ),
            container_required=False,
            kueue_ignores="its MPIJob integration is the MPI Operator's kubeflow.org/v2beta1, not "
            "the Training Operator's kubeflow.org/v1",
        ),
        # Kubeflow Trainer v2: the JobSet's "node" Job, pods <job>-node-0-<i>-<hash>
        JobKind(
            name="TrainJob",
            group=_TRAINER,
            version="v1alpha1",
            plural="trainjobs",
            crd_file="trainer.kubeflow.org_trainjobs.yaml",
            container="node",
            builder="trainjob",
            launcher="torchrun",
            replicas=(ReplicaType("Node", pod_name="{job}-node-0-{index}"),),
            container_required=False,
            trainer_runtime=True,
        ),
        # Master (rank 0, runs the rabit/collective tracker) + Workers; the controller sets
        # MASTER_ADDR/MASTER_PORT (the Master's Service, port xgboostjob-port 9999),
        # WORLD_SIZE and RANK (Master 0, Worker i is i+1) and PYTHONUNBUFFERED=1
        JobKind(
            name="XGBoostJob",
            group=_KUBEFLOW,
            version="v1",
            plural="xgboostjobs",
            crd_file="kubeflow.org_xgboostjobs.yaml",
            container="xgboost",
            builder="xgboostjob",
            launcher="single",
            replica_key="xgbReplicaSpecs",
            replicas=(ReplicaType("Master", singleton=True, required=True), ReplicaType("Worker")),
        ),
        # KubeRay: a Ray cluster (a head + one worker group) made for the job, whose pods KubeRay
        # starts with its own `ray start` commands; the program is the job's entrypoint (the
        # driver, run on the head by Ray's job supervisor, submitted from KubeRay's submitter
        # pod). Pod names carry generated parts: <job>-<5>-head-<5>, <job>-<5>-worker-worker-<5>
        JobKind(
            name="RayJob",
            group="ray.io",
            version="v1",
            plural="rayjobs",
            crd_file="ray.io_rayjobs.yaml",
            container="ray",
            builder="rayjob",
            launcher="single",
            driver_only=True,
            driver_env=(
                # a task's process is the driver's: its ktrain.report is rank 0's (pod/ranks.py)
                ("KTRAIN_RANK", "0"),
                # Ray folds lines of several tasks that differ only in numbers into one ("[repeated
                # 2x across cluster]"): ktrain's records (one per report) must all arrive
                ("RAY_DEDUP_LOGS", "0"),
            ),
            replicas=(
                ReplicaType(
                    "Head", singleton=True, pod_name="{job}-xxxxx-head-xxxxx", metrics=False
                ),
                ReplicaType("Worker", pod_name="{job}-xxxxx-worker-worker-xxxxx", metrics=False),
            ),
            container_required=False,
        ),
    )
}
KINDS: tuple[str, ...] = tuple(KIND_TABLE)
DEFAULT_KIND = "PyTorchJob"


def job_kind(name: str) -> JobKind | None:
    """The table's entry for a kind's name (``None`` when ktrain does not submit it)."""
    return KIND_TABLE.get(name)

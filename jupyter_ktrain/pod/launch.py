"""How a node starts the job: the one command every backend runs in every replica.

A replica (a pod, or a local "node") runs the agent, which wraps torchrun, which starts one
runtime process per local rank::

    python -m jupyter_ktrain.pod.agent --code-dir {code_dir} -- python -m torch.distributed.run \\
        -m jupyter_ktrain.pod.runtime {code_dir}/program.py

The agent first installs what ``{code_dir}/requirements.txt`` pins and the image lacks.

torchrun takes ``--nnodes``, ``--nproc-per-node``, ``--node-rank``, ``--master-addr`` and
``--master-port`` from the ``PET_*`` environment variables the Kubeflow Training Operator sets
(the local backend sets the same ones), so the command is identical on every backend and every
replica. ``code_dir`` holds ``program.py`` (the captured program) and whatever else the job
ships (``requirements.txt``, ``ds_config.json``); ``lib_dir`` holds this package when the
image does not have it installed.
"""

from __future__ import annotations

__all__ = [
    "CODE_DIR",
    "LIB_DIR",
    "PROGRAM_FILE",
    "WARM_DIR",
    "node_command",
    "operator_env",
    "warm_command",
]

CODE_DIR = "/ktrain"
LIB_DIR = "/ktrain/lib"
PROGRAM_FILE = "program.py"
WARM_DIR = "/ktrain-warm"  # a warm pod's run folder (an emptyDir): runs/N/code, control.json


def warm_command(python: str = "python") -> list[str]:
    """argv of a warm replica (``--warm``): the warm agent, which keeps a ready interpreter and
    forks each run's ranks (:mod:`jupyter_ktrain.pod.agent.warm`)."""
    return [python, "-m", "jupyter_ktrain.pod.agent.warm"]


def node_command(
    code_dir: str = CODE_DIR,
    python: str = "python",
    *,
    launcher: str = "torchrun",
    processes: int = 1,
    gpus: bool = True,
) -> list[str]:
    """argv of one replica; identical for every replica of a job.

    ``launcher`` picks what the agent starts: ``torchrun`` (PyTorchJob, TrainJob: one runtime
    per local rank, from the ``PET_*`` environment), ``single`` (TFJob: one runtime process,
    TensorFlow reads ``TF_CONFIG``) or ``mpirun`` (MPIJob launcher: ``processes`` ranks over the
    hostfile the operator mounts). Under mpirun each rank starts through the agent too, so
    requirements are installed and GPUs sampled in the worker pods, where the ranks run; the
    launcher's agent only finds rank 0's address and mpirun passes it on (``-x``, see
    :mod:`jupyter_ktrain.pod.mpi`).
    ``gpus`` False (a job that asked for none): the agent samples no GPU and says nothing of it.
    """
    sampling = [] if gpus else ["--gpu-sampling", "off"]
    agent = [python, "-m", "jupyter_ktrain.pod.agent", *sampling, "--code-dir", code_dir, "--"]
    runtime = ["-m", "jupyter_ktrain.pod.runtime", f"{code_dir}/{PROGRAM_FILE}"]
    if launcher == "torchrun":
        return [*agent, python, "-m", "torch.distributed.run", *runtime]
    if launcher == "single":
        return [*agent, python, *runtime]
    if launcher == "mpirun":
        head = [python, "-m", "jupyter_ktrain.pod.agent", "--gpu-sampling", "off", "--mpi-launcher"]
        # the long options both Open MPI 4 and 5 read (5's mpirun takes "-bind-to" for a program)
        mpirun = ["mpirun", "--allow-run-as-root", "-np", str(processes), "--bind-to", "none",
                  "--map-by", "slot", "-x", "MASTER_ADDR", "-x", "MASTER_PORT"]  # fmt: skip
        return [*head, "--", *mpirun, *agent, python, *runtime]
    raise ValueError(f"unknown launcher {launcher!r}")


def operator_env(
    *, nnodes: int, nproc_per_node: int, node_rank: int, master_addr: str, master_port: int
) -> dict[str, str]:
    """The environment the Training Operator gives replica ``node_rank`` of a PyTorchJob.

    WORLD_SIZE and RANK are per replica here (the operator's meaning); torchrun replaces them
    with per-process values for the ranks it starts.
    """
    return {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(nnodes),
        "RANK": str(node_rank),
        "PET_NNODES": str(nnodes),
        "PET_NPROC_PER_NODE": str(nproc_per_node),
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
    }

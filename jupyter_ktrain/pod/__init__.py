"""Everything that runs in the job, standard library only; exactly this package (with
``jupyter_ktrain/__init__.py``) travels to the pod (:func:`jupyter_ktrain.packaging.layer.
runner_files`).

    protocol/          the line protocol and its records, one dataclass per type (what a job
                       writes, what the monitor reads): the lowest contract of the system
    ranks.py           which rank and which node this process is, in every kind
    report.py          ``ktrain.report()``: metric records from a rank
    runtime.py         ``python -m jupyter_ktrain.pod.runtime PROGRAM``: one per rank; the
                       top of the pod side (through the node's fork server, where there is one)
    program.py         a rank's run of the program: lines prefixed by rank, the exit record
    cell.py            ``run_cell``, the program's last line: rank 0's results record
    tracebacks.py      tracebacks and warnings pointing at the notebook's cells
    stacks.py          every thread's stack of a running rank, on demand (``ktrain stacks``):
                       a thread of each rank answers on a socket of its node (a profile too)
    profiling/         ``ktrain profile``: torch.profiler over the rank's next N steps, the
                       rank's step boundaries (from ``report`` and Trainers), a profile's
                       figures from its trace (top operators, compute, communication, waiting)
    integrations.py    Transformers / Lightning report by themselves (import hooks)
    trainer_status.py  a TrainJob's rank 0 also posts progress to ``trainerStatus``
    progress.py        percent done and time left from ``step``/``total``; the one fold of a
                       job's progress from its ranks' records (the lowest rank's)
    checkpoint/        ``ktrain.checkpoint()``: saves written in the background, resumes
                       (``plain``); what every rank writes a part of (``shards``); below
                       both the background writer, atomic writes, the records (``common``)
    exits.py           exit codes that tell a bug from a fault
    mpi.py             what ranks started by ``mpirun`` need for ``env://``
    launch.py          the one command every replica runs
    install.py         installs the job's pinned requirements the image lacks
    agent/             ``python -m jupyter_ktrain.pod.agent``: the per-replica runner (starts
                       torchrun, samples GPUs, serves Prometheus metrics, re-runs mpirun,
                       keeps a fork server that pre-imports torch, holds a warm job's
                       interpreter, mirrors a warm run's files, stops what a rank that ended
                       left running)

Nothing here imports the rest of ``jupyter_ktrain``, and nothing but the standard library at
import time (torch, pynvml, transformers only inside the functions that use them); a unit test
reads every module's imports to keep it so.
"""

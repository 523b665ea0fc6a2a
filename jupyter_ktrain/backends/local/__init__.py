"""The local backend (the embedded default): N "nodes" of torchrun on 127.0.0.1, each started
exactly as a PyTorchJob replica is, and owned by a detached supervisor so a job outlives its
kernel. Laid out like :mod:`..kubernetes`:

- :mod:`.backend`: :class:`LocalBackend`, the job store's verbs (plan, start, status, cancel,
  list, delete, logs), each handed on to the part that does it;
- :mod:`.folders`: :class:`~.folders.JobFolders`, the jobs as their folders say (state, status,
  shape, the list), read by the backend and its warm part alike;
- :mod:`.planner`: :class:`~.planner.Planner`, a new job's plan (each node's command and
  environment); :mod:`.plan_parts`: the parts of a plan besides the request (port, DeepSpeed files,
  restart limit, cluster-only settings, the dry run's text);
- :mod:`.request`: :class:`LocalRequest`, what the backend hands the supervisor (``plan.json``);
- :mod:`.daemon`: the process the backend starts for a job (``python -m
  jupyter_ktrain.backends.local.daemon``), which wires the rest: :mod:`.supervisor`, what owns
  one job (``supervisor/nodes.py``; ``output.py``: what it reads of its nodes' output;
  ``causes.py``: which failure is the job's; ``warm_job.py``: a ``--warm`` job's supervisor;
  ``watchdog.py``: its parent, which ends the job when the supervisor dies), :mod:`.joblog`:
  its output files;
- :mod:`.state`: :class:`~.state.LocalState`, what the supervisor writes back (``state.json``);
- :mod:`.warm_runs`: a ``--warm`` job's runs as the backend reads and orders them;
- :mod:`.logs`: node logs read as they grow (:class:`FileLogSource`, :class:`LogIndex`);
- :mod:`.gpus`: this machine's GPUs and each node's share;
- :mod:`.procs`: every process of a job or node, found and stopped by its marker.

``LocalBackend`` and the names below are imported from here on first use: the supervisor
process imports this package too, and needs none of the backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import LocalBackend
    from .logs import FileLogSource
    from .request import LocalRequest, NodeLaunch

__all__ = ["FileLogSource", "LocalBackend", "LocalRequest", "NodeLaunch"]

_HOMES = {
    "LocalBackend": "backend",
    "FileLogSource": "logs",
    "LocalRequest": "request",
    "NodeLaunch": "request",
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)

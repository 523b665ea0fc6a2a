"""``%ktrain stacks NAME [--rank R]``: every running rank's Python stack, every thread.

The handler (:func:`show_stacks`) checks what the user asked for (a job that runs, a rank it has,
a warm job with a run going) and gets the stacks from the backend (:class:`~.backends.
capabilities.StacksShown`: the ranks answer themselves, :mod:`.pod.stacks`); :func:`stacks_text`
shows them as Python shows a traceback, most recent call last, a frame of the notebook's code
named ``cell [N]``. Every refusal is one line saying what to do instead.
"""

from __future__ import annotations

from .backends.base import Backend
from .backends.capabilities import WarmCapable, job_shape, stacks_shown
from .errors import SpecError
from .pod.stacks import stacks_text

__all__ = ["check_rank", "refuse_ended", "show_stacks", "stacks_text"]


def refuse_ended(backend: Backend, name: str, what: str = "stacks to show") -> None:
    """A job (or a warm job's last run) that runs no rank now: one line saying so (it has no
    ``what``)."""
    status = backend.status(name)  # JobNotFound: one line naming the job
    if status.terminal:
        raise SpecError(
            f"{name!r} has ended ({status.state}): it has no {what}. "
            f"`%ktrain logs {name}` shows what it printed."
        )
    if isinstance(backend, WarmCapable):
        run = backend.latest_run(name)
        if run is not None and backend.run_status(name, run).terminal:
            ended = backend.run_status(name, run).state
            raise SpecError(
                f"The warm job {name!r} runs nothing now (its last run, {run}, ended "
                f"{ended}): there are no {what}. Run a %%ktrain cell on it first."
            )


def check_rank(backend: Backend, name: str, rank: int | None) -> None:
    """A rank the job does not have: one line saying which it has."""
    shape = job_shape(backend, name)
    if rank is None or shape is None:
        return
    world = shape.nodes * shape.procs_per_node
    if not 0 <= rank < world:
        raise SpecError(
            f"{name!r} has ranks 0-{world - 1}; there is no rank {rank}. "
            f"Pass --rank 0 to {world - 1}, or leave --rank out for every rank."
        )


def show_stacks(backend: Backend, name: str, rank: int | None) -> str:
    """The text of ``%ktrain stacks NAME [--rank R]`` on ``backend``."""
    refuse_ended(backend, name)
    check_rank(backend, name, rank)
    got = stacks_shown(backend, name).stacks(name, rank)
    if got:
        return stacks_text(name, got)
    state = backend.status(name).state
    if rank is not None:
        return f"Rank {rank} of {name!r} is not running now ({state}); nothing to show."
    return f"No rank of {name!r} runs now ({state}); nothing to show yet."

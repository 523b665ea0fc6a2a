"""The one text of a job that did not succeed: the error a ``%%ktrain`` cell, ``ktrain.run``
and the ``ktrain`` command raise (:func:`job_error`), and the side panel's failure box
(:func:`~jupyter_ktrain.monitor.text.failure_summary`, the same text).

A header that says what happened (``rank 1 raised ValueError: no shard``), what to do for a
known kind of failure (:func:`~jupyter_ktrain.failures.classify`, or the signal that killed the
rank), then the first failing rank's own last lines (its traceback, frames named ``cell [N]``,
down to its exception line), and where the whole log is. Nothing of torchrun's report (its
``ChildFailedError`` traceback and "Root Cause" banner names whichever rank its node saw end
first, often one that was only stopped): the ranks' own lines are the truth.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..errors import JobCancelled, JobFailed
from ..failures import Failure, classify, ranks_text, signal_failure
from ..jobs import CANCELLED, CANCELLED_BY_USER
from ..pod.exits import describe_exit, is_bug

if TYPE_CHECKING:
    from ..backends.base import Job
    from ..jobs import JobStatus

__all__ = ["cancelled_headline", "exception_line", "failure_headline", "job_error", "raised_at"]

TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(:.*)?$")  # ValueError: bad / KeyboardInterrupt
_MAX_HEADLINE = 300


def exception_line(lines: Sequence[str]) -> int | None:
    """Index of the exception line (``ValueError: bad``) of the last Python traceback in
    ``lines``: the first line after ``Traceback (most recent call last):`` that is not part
    of a frame (frames, their code and ``^^^`` markers are indented) and reads as an exception
    (``Name: message``, ``pkg.Name``). A rank's stdout and stderr reach its log apart, so a
    line it printed may land inside its traceback (``rank 3 up``): that one is passed over,
    unless no line reads as an exception. None without a traceback."""
    starts = [i for i, line in enumerate(lines) if line.strip() == TRACEBACK]
    if not starts:
        return None
    unindented = [
        i
        for i in range(starts[-1] + 1, len(lines))
        if lines[i].strip() and not lines[i][0].isspace()
    ]
    named = [i for i in unindented if _EXCEPTION.match(lines[i].rstrip())]
    found = named or unindented
    return found[0] if found else None


def raised_at(code: int | None, lines: Sequence[str]) -> int | None:
    """Index of the exception line that ended a rank, when an uncaught exception did: it
    ends a rank with code 1; with another code (``sys.exit(3)``, a signal) a traceback in its
    output was printed and handled, not what ended it."""
    return exception_line(lines) if code in (1, None) else None


def failure_headline(
    rank: int,
    code: int | None,
    lines: Sequence[str],
    others: Iterable[int] = (),
    stopped: Iterable[int] = (),
) -> str:
    """How the first failing rank ended, and which other ranks ended with an error too or were
    stopped: the one sentence the cell's error, the widget and the side panel all say.

    ``rank 1 raised ValueError: bad shard; rank 0 ended with an error too``, ``rank 1 raised
    ValueError: bad shard; rank 0 was stopped``, ``rank 2 was killed by signal 9 (SIGKILL)``,
    ``rank 3 failed first (exit code 3, OOM)``. ``lines`` are the rank's own last lines;
    ``others`` the other ranks that ended with an error of their own (an exit code 1-127);
    ``stopped`` those a signal ended (>= 128: the job stopped them once it had failed)."""
    at = raised_at(code, lines)
    if at is not None:
        how = f"rank {rank} raised {_clip(lines[at])}"
    elif code is not None and code >= 128:  # a signal ended it: say which
        how = f"rank {rank} was {describe_exit(code)}"
    else:
        failure = classify(lines, code)
        kind = f", {failure.kind}" if failure.kind != "error" else ""
        said = f"exit code {code}" if code is not None else "no exit code"
        how = f"rank {rank} failed first ({said}{kind})"
    rest = sorted(set(others) - {rank})
    if rest:
        how += f"; {ranks_text(rest)} ended with an error too"
    gone = sorted(set(stopped) - {rank} - set(rest))
    if gone:
        how += f"; {ranks_text(gone)} {'was' if len(gone) == 1 else 'were'} stopped"
    return how


def _clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MAX_HEADLINE else text[: _MAX_HEADLINE - 1] + "…"


def _rank_failure(job: Job, status: JobStatus, rank: int, tail: int) -> JobFailed:
    code = status.exit_codes.get(rank)
    lines = job.logs(rank=rank).splitlines()
    others = [r for r, c in status.exit_codes.items() if is_bug(c)]
    stopped = [r for r, c in status.exit_codes.items() if c != 0 and not is_bug(c)]
    headline = failure_headline(rank, code, lines, others, stopped)
    said = _explanation(code, lines)
    notes = [str(said)] if said is not None and said.explanation not in status.message else []
    if status.message and status.message not in headline:
        notes.append(status.message)
    body = [f"Last lines of rank {rank}:", *(f"    {line}" for line in lines[-tail:])]
    if not lines:
        body = [f"Rank {rank} printed nothing."]
    body.append(f"Rank {rank}'s whole log: %ktrain logs {job.name} --rank {rank}{_run_flag(job)}")
    text = "\n".join([f"Job {_who(job)} failed: {headline.rstrip('.')}.", *notes, *body])
    return JobFailed(text, state=status.state, headline=headline)


def _explanation(code: int | None, lines: Sequence[str]) -> Failure | None:
    """What a rank's end means and what to do, when its lines or its signal say more than the
    headline (``OOM: out of memory (...): lower the batch size ...``); None when nothing does."""
    killed = signal_failure(code)
    said = classify(lines, None if killed else code)
    return said if said.kind != "error" else killed


def cancelled_headline(job: Job) -> str:
    """``'train-1a2b3c' was cancelled by the user; the cell set no names.``: the one wording
    of a followed job's cancel, in the cell's error and in the text monitor's summary."""
    return f"{_who(job)} was {CANCELLED_BY_USER}; the cell set no names."


def _who(job: Job) -> str:
    """``'train-1a2b3c'``, or ``'train-1a2b3c' run 2`` for a run of a warm job."""
    run = getattr(job, "run", None)  # a job-like handle may have no runs
    return f"{job.name!r}" + (f" run {run}" if run is not None else "")


def _run_flag(job: Job) -> str:
    run = getattr(job, "run", None)
    return f" --run {run}" if run is not None else ""


def job_error(job: Job, status: JobStatus, tail: int = 20) -> JobFailed:
    """The error for ``job``, which ended ``status`` (Failed or Cancelled)."""
    if status.state == CANCELLED:
        headline = cancelled_headline(job)
        return JobCancelled(f"Job {headline}", headline=headline)
    if status.failed_rank is not None:
        return _rank_failure(job, status, status.failed_rank, tail)
    codes = ", ".join(f"{r.name}: {r.exit_code}" for r in status.replicas if r.exit_code)
    if status.message:  # what the backend knows of it (a supervisor killed, a full disk...)
        headline = f"{_who(job)} failed: {_clip(status.message)}"
    else:
        headline = f"{_who(job)} failed before any rank reported ({codes or status.reason})"
    lines = [f"Job {headline}", f"Its log: %ktrain logs {job.name}{_run_flag(job)}"]
    return JobFailed("\n".join(lines), state=status.state, headline=headline)

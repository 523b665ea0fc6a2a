"""``%ktrain profile NAME --steps N [--rank R]``: ``torch.profiler`` on every running rank for
its next N steps; per rank the top operators and the share of compute, communication and
waiting, as a table; the Chrome traces kept in the job store.

The job service's profile verb (:func:`show_profile`, :func:`.verbs.profile`) checks what the
user asked for as ``stacks`` does (a job that runs, a rank it has, a warm job with a run going)
and asks the backend, which asks the ranks the way it asks for stacks
(:class:`~..backends.capabilities.StacksShown`; the rank's side is
:mod:`..pod.profiling.profiler`, its
figures :mod:`..pod.profiling.summary`). A job whose ranks mark no steps is one line saying how to
mark them. The traces and what the table said are kept (:func:`~..store.profiles.keep_profile`)
for the side panel; :func:`profile_text` is the table.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Sequence
from pathlib import Path

from ..backends.base import Backend
from ..backends.capabilities import stacks_shown
from ..errors import SpecError
from ..pod.protocol import Profile
from ..rank_stacks import check_rank, refuse_ended
from ..store.profiles import keep_profile, trace_name, traces_dir

__all__ = ["SHOWN_OPS", "no_steps_text", "profile_text", "show_profile"]

SHOWN_OPS = 10  # operators shown per rank (the record has up to 15)


def no_steps_text(name: str) -> str:
    """The one line for a job whose ranks mark no steps: how to mark them."""
    return (
        f"{name!r} marks no steps, so a profile has no step to start at: call "
        "`ktrain.report(step=...)` once per step in the training loop on every rank (a Hugging "
        f"Face Trainer marks its steps itself), then run `%ktrain profile {name}` again."
    )


def show_profile(backend: Backend, name: str, steps: int, rank: int | None) -> str:
    """The text of ``%ktrain profile NAME --steps N [--rank R]`` on ``backend``; the traces
    and the text kept in the job store."""
    refuse_ended(backend, name, "steps to profile")
    check_rank(backend, name, rank)
    got = stacks_shown(backend, name).profile(name, steps, rank)
    ranked = [p for _, p in got if p.rank is not None]
    if not got:
        state = backend.status(name).state
        who = f"Rank {rank} of {name!r} is" if rank is not None else f"No rank of {name!r}"
        return f"{who} not running now ({state}); nothing to profile."
    if ranked and all(p.no_steps for p in ranked):
        raise SpecError(no_steps_text(name))
    traces: dict[int, bytes] = {}
    for p in ranked:
        if p.trace and p.rank is not None:
            try:
                traces[p.rank] = base64.b64decode(p.trace, validate=True)
            except (binascii.Error, ValueError):
                continue
    text = profile_text(name, steps, got, traces_dir(backend.name, name), sorted(traces))
    shown = [{k: v for k, v in p.to_dict().items() if k != "trace"} for _, p in got]
    said = {"t": time.time(), "steps": steps, "text": text, "ranks": shown}
    keep_profile(backend.name, name, said, traces)
    return text


def _percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def _steps(p: Profile, steps: int) -> str:
    if p.first is None or p.last is None:
        return "-"
    if p.last - p.first == steps:
        return f"{p.first + 1}-{p.last}" if steps > 1 else str(p.last)
    return f"after {p.first}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def profile_text(
    name: str,
    steps: int,
    got: Sequence[tuple[str, Profile]],
    folder: Path | None,
    traced: Sequence[int] = (),
) -> str:
    """The table: one line per rank (steps, window, shares), then each rank's top operators;
    where the traces were kept (``folder``, the ranks in ``traced``)."""
    ranked = [p for _, p in got if p.rank is not None and not p.why]
    cuda = any(p.device == "cuda" for p in ranked)
    time_of = "CUDA time" if cuda else "CPU time"
    plural = "s" if len(ranked) != 1 else ""
    lines = [f"Profile of {name!r}: {len(ranked)} rank{plural}, {steps} steps each ({time_of}):"]
    lines.append(f"  {'RANK':10} {'STEPS':>9} {'WINDOW':>10} {'COMPUTE':>8} {'COMMUNICATION':>14}"
                 f" {'WAITING':>8}")  # fmt: skip
    for where, p in got:
        head = f"rank {p.rank}" if p.rank is not None else f"pod {where}"
        if p.why:
            lines.append(f"  {head}: {_why(p)}")
            continue
        lines.append(
            f"  {head:10} {_steps(p, steps):>9} {_ms(p.window):>10} "
            f"{_percent(p.compute, p.window):>8} {_percent(p.communication, p.window):>14} "
            f"{_percent(p.waiting, p.window):>8}"
        )
    for where, p in got:
        if p.why or p.rank is None:
            continue
        kind = "CUDA kernels, by device time" if p.device == "cuda" else "CPU operators, self time"
        lines += ["", f"rank {p.rank}" + (f" (pod {where})" if where else "") + f": top {kind}"]
        lines.append(f"  {'OPERATOR':56} {'CALLS':>6} {'TIME':>10} {'SHARE':>6}")
        for op, calls, seconds in p.ops[:SHOWN_OPS]:
            shown = op if len(op) <= 56 else op[:53] + "..."
            lines.append(
                f"  {shown:56} {calls:>6} {_ms(seconds):>10} {_percent(seconds, p.window):>6}"
            )
        if p.note:
            lines.append(f"  ({p.note})")
    lines += ["", "Compute: operators running; communication: collectives while nothing computes;"
              " waiting: neither (Python, data, sleeps)."]  # fmt: skip
    if folder is not None and traced:
        files = ", ".join(trace_name(r) for r in traced)
        lines.append(
            f"Chrome traces ({files}) kept in {folder}: open one in https://ui.perfetto.dev "
            "or chrome://tracing, or download it from the job's tab in the side panel."
        )
    return "\n".join(lines)


def _why(p: Profile) -> str:
    if p.no_steps:
        return "marks no steps (call `ktrain.report(step=...)` each step on this rank too)"
    return p.why

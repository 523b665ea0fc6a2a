"""``%ktrain compare A B C``: one metric of several jobs overlaid, and what differed between
them (the flags and constants whose values are not the same in every job). A column is an
:class:`Entry`: a job, or one run of a warm job, with its params (a sweep's trials: their
swept values, ``%ktrain compare SWEEP``).

The curves come from each job's stored lines, read by the job service
(:mod:`jupyter_ktrain.runner.compare`: rank 0's series, or the lowest rank that reported the
metric); the params from each job's record in the job store (:mod:`.store`). :func:`compared`
makes the data; :func:`text` and :func:`figure` render it (plotly, as the widget's plots).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from ..spec.job import check_job_name
from ..store.records import RunRecord, read_run, record_name

__all__ = ["POINTS", "Comparison", "Entry", "compared", "entry", "figure", "text"]

MISSING = "—"
POINTS = 2_000
SELF = {"name"}  # the job's own name (``--name``): the columns already say it


@dataclass
class Comparison:
    """``curves``: job -> (steps, values) of ``metric``; ``differ``: param -> job -> value
    (only the params whose value is not the same in every job); ``last``: job -> last value."""

    metric: str
    jobs: list[str]
    curves: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    differ: dict[str, dict[str, str]] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    metrics: list[str] = field(default_factory=list)  # every metric name any job reported


@dataclass(frozen=True)
class Entry:
    """One column of a comparison: its ``label``, the ``job`` whose stored lines give its
    curves (``run``: that run of a warm job), its ``params`` (None: the job's record's)."""

    label: str
    job: str
    run: int | None = None
    params: Mapping[str, str] | None = None


def entry(name: str) -> Entry:
    """A column named by the user: ``NAME``, a job, or ``NAME:N``, run N of warm job NAME;
    :class:`SpecError` for a name that is neither."""
    job, colon, run = name.partition(":")
    check_job_name(job)
    if not colon:
        return Entry(name, job)
    if not run.isdigit() or int(run) < 1:
        raise SpecError(
            f"{name!r} is not a run of a warm job: write NAME:N, N the run's number (1, 2, "
            f"...), e.g. {job}:2. `%ktrain status {job}` shows its runs."
        )
    return Entry(name, job, int(run))


def compared(
    backend: str,
    entries: Sequence[Entry],
    series: Mapping[str, Mapping[str, tuple[list[float], list[float]]]],
    metric: str | None = None,
) -> Comparison:
    """The comparison of ``entries`` (jobs or runs of backend ``backend``, labelled) on
    ``metric``, from each entry's ``series`` (label -> metric -> points, read from its stored
    lines by the job service) and its params (its own, else its record's in the job store)."""
    names = [e.label for e in entries]
    common = set.intersection(*(set(s) for s in series.values()))
    every = sorted(set().union(*(set(s) for s in series.values())))
    if metric is None:
        if not common:
            raise SpecError(
                f"{', '.join(names)} have no metric in common (they reported: "
                f"{', '.join(every) or 'none'}); pick one with --metric NAME."
            )
        metric = "loss" if "loss" in common else sorted(common)[0]
    out = Comparison(metric, list(names), metrics=every)
    for name, found in series.items():
        if metric in found:
            out.curves[name] = found[metric]
            out.last[name] = found[metric][1][-1]
    if not out.curves:
        raise SpecError(f"No job of {', '.join(names)} reported {metric!r}: known {every}.")
    params = {
        e.label: (
            e.params
            if e.params is not None
            else _params(read_run(backend, record_name(e.job, e.run)))
        )
        for e in entries
    }
    for key in sorted(set().union(*(set(p) for p in params.values())) - SELF):
        values = {name: str(params[name].get(key, MISSING)) for name in names}
        if len(set(values.values())) > 1:
            out.differ[key] = values
    return out


def _params(record: RunRecord | None) -> Mapping[str, str]:
    return record.params if record is not None else {}


def text(c: Comparison) -> str:
    """The comparison as a table: the metric's last value, then each differing param."""
    width = max(12, *(len(n) for n in c.jobs))
    head = f"{'':24} " + " ".join(f"{n:>{width}}" for n in c.jobs)
    rows = [head]
    last = [f"{c.last[n]:.6g}" if n in c.last else MISSING for n in c.jobs]
    rows.append(f"{c.metric + ' (last)':24} " + " ".join(f"{v:>{width}}" for v in last))
    for key, values in c.differ.items():
        rows.append(f"{key[:24]:24} " + " ".join(f"{values[n][:width]:>{width}}" for n in c.jobs))
    if not c.differ:
        rows.append("(the jobs' flags and constants are the same, or were not recorded)")
    return "\n".join(rows)


def figure(c: Comparison) -> Any:
    """A plotly figure: ``metric`` against step, one trace per job, the differing params in
    each trace's name and in a table beside the plot."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, column_widths=[0.65, 0.35],
                        specs=[[{"type": "xy"}, {"type": "table"}]])  # fmt: skip
    for name in c.jobs:
        if name not in c.curves:
            continue
        xs, ys = c.curves[name]
        label = ", ".join(f"{k}={v[name]}" for k, v in list(c.differ.items())[:3])
        trace_name = f"{name} ({label})" if label else name
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=trace_name), row=1, col=1)
    keys = [f"{c.metric} (last)", *c.differ]
    columns = [keys] + [
        [f"{c.last[n]:.6g}" if n in c.last else MISSING] + [c.differ[k][n] for k in c.differ]
        for n in c.jobs
    ]
    fig.add_trace(go.Table(header={"values": ["", *c.jobs]}, cells={"values": columns}),
                  row=1, col=2)  # fmt: skip
    fig.update_layout(title=f"{c.metric} across {', '.join(c.jobs)}", height=420,
                      xaxis_title="step", yaxis_title=c.metric)  # fmt: skip
    return fig

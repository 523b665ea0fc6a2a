"""Wire payloads of the ``/ktrain/api`` REST API: the one source of their shapes.

``labextension/src/payloads.ts`` is generated from this module by ``scripts/gen_ts.py`` (run
it after a change here; ``tests/unit/test_gen_ts.py`` fails while the two differ). Every
error response is :class:`ErrorPayload` with the HTTP status chosen in one place
(:func:`jupyter_ktrain.server.core.http_status`).
"""

from __future__ import annotations

from typing import TypedDict

# imported at run time: scripts/gen_ts.py writes each Literal alias here as a TypeScript union
from ..jobs import JobState, ReplicaPhase
from ..monitor.glance import Level, Mark
from ..sweep.record import SweepState

__all__ = [
    "BackendProblem",
    "CompareCurve",
    "CompareParam",
    "ComparePayload",
    "ErrorPayload",
    "GpuHeatmap",
    "GpuRowPayload",
    "HeatCellPayload",
    "JobDetail",
    "JobSummary",
    "JobsPayload",
    "LogLinePayload",
    "LogsPayload",
    "MarkerPayload",
    "MetricPanel",
    "MetricTrace",
    "MetricsPayload",
    "ProfileShown",
    "ProgressPayload",
    "ReplicaPayload",
    "StacksPayload",
    "SummaryPayload",
    "SweepCurve",
    "SweepDetail",
    "SweepRowPayload",
    "SweepSummary",
    "SweepsPayload",
    "TraceLink",
    "WarmPayload",
]


class ErrorPayload(TypedDict):
    error: str


class ProgressPayload(TypedDict):
    """Where a job stands: ``percent`` 0-100 and ``eta_s`` seconds left at the server's
    ``now`` (None: unknown, e.g. before a few steps were timed); ``text`` as the notebook
    words it (``42% (420/1000) · 1m 30s left``)."""

    step: int  # the step last reported (counted from 0)
    done: int  # steps done: ``step + 1``, at most ``total``
    total: int | None
    percent: float | None
    eta_s: float | None
    text: str
    short: str  # the job list's cell: ``42% · 1m 30s``, ``42% · ETA unknown``, ``step 12``


class WarmPayload(TypedDict):
    """A warm job (``--warm``): its runs so far, the run in progress (None: idle), seconds
    idle and its idle limit, the GPUs it holds and the GPU-hours they sat idle (this idle
    stretch); ``text`` as ``%ktrain list`` words it."""

    runs: int
    active: int | None
    idle_s: float
    idle_limit_s: float
    gpus: int
    idle_gpu_hours: float
    text: str
    short: str  # the job list's words: ``run 3 of a live job``, ``ended after 2 runs``


class JobSummary(TypedDict):
    """One row of the panel. Times are epoch seconds (server clock); ``age_s`` is seconds
    since the job started (None before it started); ``progress`` is None until the job
    reports a total (``ktrain.report(step=..., total=...)`` or the Transformers Trainer)."""

    name: str
    backend: str
    state: JobState
    reason: str
    message: str
    started: float | None
    finished: float | None
    age_s: float | None
    progress: ProgressPayload | None
    warm: WarmPayload | None  # a warm job's runs and idle time; None for any other job
    # read from the job store: the job's cluster objects are gone (deleted), its history shown
    history: bool


class BackendProblem(TypedDict):
    backend: str
    error: str


class JobsPayload(TypedDict):
    """``GET /ktrain/api/jobs``: newest first. A backend that could not be asked is listed in
    ``problems`` (the others' jobs still come back)."""

    jobs: list[JobSummary]
    problems: list[BackendProblem]
    now: float


class ReplicaPayload(TypedDict):
    name: str
    phase: ReplicaPhase
    restarts: int
    node: str
    exit_code: int | None
    last_event: str
    restart_text: str  # its last restart as the cell and the widget say it ("" if none)


class JobDetail(JobSummary):
    """``GET /ktrain/api/jobs/NAME``: the summary plus replicas and per-rank exit codes."""

    replicas: list[ReplicaPayload]
    exit_codes: dict[str, int]
    failed_rank: int | None
    terminal: bool
    failure: str | None  # a failed or cancelled job: what the cell says (first failing rank...)


class LogLinePayload(TypedDict):
    """One log line: ``label`` is ``rank3``, ``agent@1`` or ``node@1`` (node = replica index)."""

    label: str
    rank: int | None
    source: str
    text: str


class LogsPayload(TypedDict):
    """``GET /ktrain/api/jobs/NAME/logs?rank=&grep=&offset=``: lines after ``offset`` that
    match. Pass ``next_offset`` back as ``offset`` to get only newer lines. ``more`` says the
    response stopped at its line limit (ask again at once)."""

    lines: list[LogLinePayload]
    next_offset: str
    more: bool
    terminal: bool


class MetricTrace(TypedDict):
    """One rank's (``rank 3``) or GPU's (``node 1 GPU 0``) series, in its colour."""

    label: str
    colour: str
    x: list[float]
    y: list[float]


class MarkerPayload(TypedDict):
    """A restart in a metric chart: a vertical line at step ``x`` (``resumed from step 40``)."""

    x: float
    text: str


class MetricPanel(TypedDict):
    """``key``: ``metric:loss`` or ``gpu:util``; ``name`` what a user calls it (``loss``,
    ``gpu util``); ``title`` the chart's title and y axis title; ``markers`` the job's
    restarts (metric panels)."""

    key: str
    name: str
    title: str
    x_title: str
    traces: list[MetricTrace]
    markers: list[MarkerPayload]


class SummaryPayload(TypedDict):
    """A metric reported once so far (a run's closing ``train_runtime``...): a value."""

    name: str
    value: float
    text: str
    rank: int


class HeatCellPayload(TypedDict):
    """One GPU of a heatmap: its index, the field's latest value (None: no reading), the
    value as shown, its colour, ``mark`` (``idle``, ``hot`` or ``""``) and every reading in
    words (the hover)."""

    gpu: int
    value: float | None
    label: str
    colour: str
    mark: Mark
    title: str


class GpuRowPayload(TypedDict):
    """One node's row of a heatmap: ``name`` as the views say it (``pod j-worker-1``)."""

    node: int
    name: str
    cells: list[HeatCellPayload]


class GpuHeatmap(TypedDict):
    """From 8 GPUs up, one field's heatmap (``util``, ``mem_used``, ``power``): a row per
    node, a column per GPU index (``gpus``), colours on a scale up to ``top``; ``idle`` and
    ``hot`` count the GPUs marked so."""

    field: str
    title: str
    gpus: list[int]
    rows: list[GpuRowPayload]
    top: float
    idle: int
    hot: int


class TraceLink(TypedDict):
    """A rank's Chrome trace of the job's last profile: ``path`` under the API's root."""

    rank: int
    path: str


class ProfileShown(TypedDict):
    """The job's last ``%ktrain profile``: its table's text, when it was taken, the traces."""

    text: str
    t: float
    traces: list[TraceLink]


class MetricsPayload(TypedDict):
    """``GET /ktrain/api/jobs/NAME/metrics``: one panel per metric reported more than once
    (a trace per rank, x = step) and per GPU field (a trace per node/GPU, x = seconds),
    downsampled; ``values``: metrics reported once; ``notices``: what the job's records said
    happened (``resumed from step 40 (checkpoint step-40.pt)``), oldest first; ``warnings``:
    what is wrong while it runs (a rank named hung, RDMA not used, an idle GPU); ``stacks``:
    the stacks taken when a rank was named hung ("" when none); ``profile``: the last
    ``%ktrain profile``'s table and traces (None when none). From 8 GPUs up the GPU fields
    are ``heatmaps`` (one per field), not panels. ``log_ranks``: the ranks that printed
    lines; from 16 ranks up ``log_start`` is the ranks the log view starts with (rank 0 and
    those in ``log_flagged``, which printed an ``error`` or a ``warning``), else None (every
    rank). ``version`` changes when anything does."""

    panels: list[MetricPanel]
    heatmaps: list[GpuHeatmap]
    log_ranks: list[int]
    log_start: list[int] | None
    log_flagged: dict[str, Level]
    values: list[SummaryPayload]
    notices: list[str]
    warnings: list[str]
    stacks: str
    profile: ProfileShown | None
    version: int


class CompareCurve(TypedDict):
    """One job's curve of the compared metric (rank 0's, or the lowest rank's), downsampled;
    ``last`` its last value."""

    job: str
    colour: str
    x: list[float]
    y: list[float]
    last: float | None


class CompareParam(TypedDict):
    """A flag or captured constant whose value is not the same in every compared job."""

    name: str
    values: dict[str, str]  # job -> its value ("—": the job had none)


class ComparePayload(TypedDict):
    """``GET /ktrain/api/compare?jobs=A,B[&metric=M][&backend=B]``: one metric of several
    jobs overlaid, and what differed between them (``%ktrain compare``'s data)."""

    backend: str
    metric: str
    metrics: list[str]  # every metric any of the jobs reported (to pick another)
    jobs: list[str]
    curves: list[CompareCurve]
    differ: list[CompareParam]


class StacksPayload(TypedDict):
    """Every running rank's Python stack, taken when asked (the job tab's Stacks button): the
    text ``%ktrain stacks NAME`` prints; ``t`` when it was taken (seconds since the epoch)."""

    text: str
    t: float


class SweepSummary(TypedDict):
    """A sweep as the side panel lists it (``GET /ktrain/api/sweeps``), from its record in the
    job store: ``state`` Running, Done, Stopped or Interrupted (Running only while the process
    that runs it lives), ``done`` of ``total`` trials ended, ``best`` the best trial's number,
    ``best_objective`` its value, ``best_text`` the two in words (``trial 2, loss=0.05
    (lr=0.001)``); ``state_colour`` the state's, as in the cell."""

    name: str
    backend: str
    state: SweepState
    state_colour: str
    objective: str
    done: int
    total: int
    running: int
    best: int | None
    best_objective: float | None
    best_text: str
    started: float
    ended: float | None


class SweepsPayload(TypedDict):
    """``GET /ktrain/api/sweeps``: every sweep of the job store, newest first."""

    sweeps: list[SweepSummary]


class SweepRowPayload(TypedDict):
    """One trial: ``params`` its values as text, in the sweep's ``names`` order; ``objective``
    its value so far as text (``value`` the number); ``where`` its job (and run on a warm
    job); ``reason`` why it failed or was pruned (one line); ``colour`` its curve's,
    ``state_colour`` its state's."""

    number: int
    params: list[str]
    state: str
    state_colour: str
    objective: str
    value: float | None
    job: str
    run: int | None
    where: str
    reason: str
    best: bool
    colour: str


class SweepCurve(TypedDict):
    """Trial ``trial``'s objective over steps (downsampled)."""

    trial: int
    label: str
    colour: str
    x: list[float]
    y: list[float]


class SweepDetail(SweepSummary):
    """``GET /ktrain/api/sweeps/NAME``: the sweep's record as its views show it (the cell's
    widget draws the same): ``header`` its one line, ``names`` the swept names, a row per
    trial, running or ended, and every trial's objective over steps."""

    header: str
    metric: str
    names: list[str]
    space: list[str]
    search: str
    parallel: int
    warm: bool
    rows: list[SweepRowPayload]
    curves: list[SweepCurve]

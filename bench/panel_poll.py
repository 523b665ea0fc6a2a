"""The side panel's per-poll cost on the server, for a small and a big running job.

A job tab polls ``GET .../logs?offset=`` and ``GET .../metrics`` every second. Each poll here
follows 200 new lines (2 nodes: plain lines and ``ktrain.report`` records) written since the
previous one, into a local job that already has ``small`` or ``big`` lines. The cost per poll
should grow with the new lines, not with the job's age: the big job's poll should cost about
what the small job's does.

Runs against whichever jupyter_ktrain is first on the path, so the same file measures a
before and an after: ``PYTHONPATH=<checkout> python bench/panel_poll.py``. The last line is
one JSON object: milliseconds per poll for each size and their ratio, with its goal.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from jupyter_ktrain.backends.local import LocalBackend
from jupyter_ktrain.pod.protocol import METRIC, TYPE, format_rank_line, format_record
from jupyter_ktrain.server.core import PanelCore

NEW_PER_POLL = 200
POLLS = 10


def _write(job_dir: Path, node: int, start: int, count: int, t0: float) -> None:
    with (
        open(job_dir / f"node-{node}.log", "a") as log,
        open(job_dir / f"node-{node}.times", "a") as times,
    ):
        for i in range(start, start + count):
            rank = node
            if i % 2:
                rec = {TYPE: METRIC, "step": i, "total": 10**7, "loss": 1 / (i + 1),
                       "t": t0 + i * 0.01}  # fmt: skip
                line = format_rank_line(rank, format_record(rec))
            else:
                line = format_rank_line(rank, f"step {i} some training output " + "x" * 40)
            log.write(line + "\n")
            times.write(f"{t0 + i * 0.01:.6f}\n")


def measure(home: Path, name: str, lines: int) -> dict[str, float]:
    backend = LocalBackend(home)
    job_dir = backend.job_dir(name)
    job_dir.mkdir(parents=True)
    t0 = time.time() - 3600
    (job_dir / "plan.json").write_text("{}")
    (job_dir / "job.json").write_text('{"nodes": 2}')
    (job_dir / "state.json").write_text(json.dumps({"state": "Running", "started": t0}))
    per_node = lines // 2
    for node in (0, 1):
        _write(job_dir, node, 0, per_node, t0)
    core = PanelCore({"local": lambda: backend})
    offset = ""
    while True:  # the tab opened: read everything once (not measured)
        page = core.logs(name, offset=offset)
        offset = page["next_offset"]
        if not page["more"]:
            break
    core.metrics(name)
    logs_s = metrics_s = 0.0
    written = per_node
    for _ in range(POLLS):
        for node in (0, 1):
            _write(job_dir, node, written, NEW_PER_POLL // 2, t0)
        written += NEW_PER_POLL // 2
        start = time.perf_counter()
        page = core.logs(name, offset=offset)
        offset = page["next_offset"]
        logs_s += time.perf_counter() - start
        start = time.perf_counter()
        core.metrics(name)
        metrics_s += time.perf_counter() - start
    return {"logs_ms": 1000 * logs_s / POLLS, "metrics_ms": 1000 * metrics_s / POLLS}


def main() -> None:
    sizes = {"small": 2_000, "big": 400_000}
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, lines in sizes.items():
            out[label] = measure(Path(tmp) / label, f"bench-{label}", lines)
            costs = out[label]
            print(
                f"{label:5} job ({lines} lines), {NEW_PER_POLL} new lines per poll: "
                f"logs {costs['logs_ms']:.1f} ms, metrics {costs['metrics_ms']:.1f} ms per poll",
                file=sys.stderr,
            )
    small, big = (out[k]["logs_ms"] + out[k]["metrics_ms"] for k in ("small", "big"))
    figures = {
        "small_poll_ms": round(small, 2),
        "big_poll_ms": round(big, 2),
        # a poll of a 200x older job costs about what a young job's does
        "big_over_small_poll_cost": round(big / small, 2),
        "big_over_small_poll_cost_goal": "<=2",
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()

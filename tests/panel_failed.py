"""A failed 2-node local job as the supervisor stores it (state.json, node logs with their
times), without running one: rank 1 ran out of memory first, rank 0 was stopped after it."""

from __future__ import annotations

import json
import time
from pathlib import Path

FAILED = "panel-broken"
LAST_LINE = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def write_failed_job(home: Path, name: str = FAILED) -> Path:
    job_dir = home / "jobs" / name
    job_dir.mkdir(parents=True)
    t0 = time.time() - 60
    (job_dir / "job.json").write_text(json.dumps({"name": name, "kind": "PyTorchJob",
                                                  "nodes": 2, "nproc": 1}))  # fmt: skip
    (job_dir / "plan.json").write_text(json.dumps({"marker": "none", "nodes": []}))
    state = {"state": "Failed", "reason": "RankFailed", "started": t0, "finished": t0 + 9,
             "exit_codes": {"0": 143, "1": 1}, "failed_rank": 1, "supervisor_pid": 1,
             "nodes": [{"pid": 0, "exit_code": 143}, {"pid": 0, "exit_code": 1}]}  # fmt: skip
    (job_dir / "state.json").write_text(json.dumps(state))
    logs = {
        0: [(t0 + 1, "[rank0]: epoch 1 loss 0.9"), (t0 + 3, "[rank0]: epoch 2 loss 0.7")],
        1: [
            (t0 + 2, "[rank1]: epoch 1 loss 0.8"),
            (t0 + 4, "[rank1]: Traceback (most recent call last):"),
            (t0 + 5, f"[rank1]: {LAST_LINE}"),
        ],
    }
    for node, lines in logs.items():
        (job_dir / f"node-{node}.log").write_text("".join(f"{text}\n" for _, text in lines))
        (job_dir / f"node-{node}.times").write_text("".join(f"{t:.6f}\n" for t, _ in lines))
    return job_dir

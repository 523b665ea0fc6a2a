"""A sweep on warm pods, against the same trials as a job each through the Kubeflow SDK.

On the test cluster (the real kube-apiserver, scheduler and Training Operator, our kubelet),
in one run, one after the other, each in a namespace of its own, the same 16 trials (a grid:
4 learning rates x 4 batch sizes) of one short training function (a small torch regression,
20 SGD steps, its loss reported each step), 2 at a time:

1. ours: ``ktrain.sweep(train, ..., parallel=2, warm=True)``: two warm PyTorchJobs (1 node x
   1 process), each next trial a run on a free one; their cold starts and ends are counted;
2. the Kubeflow SDK, as Katib runs a trial: a PyTorchJob per trial (``TrainingClient.
   create_job`` with the same function as ``train_func``), waited on until Succeeded
   (``wait_for_job_conditions``), its last loss read from its log (Katib's StdOut metrics
   collector reads the ``loss=...`` lines), then deleted; two such trials at a time. Twice:
   at the SDK's default polling (every 15 s, as a notebook user of the SDK waits), and polled
   every second (Katib's controller watches the job: this is the peer at its quickest).

No pruning on either side (Katib runs without early stopping by default): the same work.
Wall time of each, from the first call to the last trial's objective; both must find the
same best trial. The last line is one JSON object with each figure and its goal.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import product
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's package

LRS = (0.003, 0.01, 0.03, 0.1)
BATCHES = (8, 16, 32, 64)
PARALLEL = 2
SDK_DEFAULT_POLL_S = 15  # wait_for_job_conditions' polling_interval
KATIB_POLL_S = 1


def train(lr, batch):  # type: ignore[no-untyped-def]
    """Ours: what a sweep's cell calls (its loss through ``ktrain.report``)."""
    import torch

    import jupyter_ktrain as ktrain

    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(256)
    w = torch.zeros(8, requires_grad=True)
    opt = torch.optim.SGD([w], lr=lr)
    for step in range(20):
        idx = torch.randint(0, 256, (batch,))
        loss = ((x[idx] @ w - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        ktrain.report(step=step, loss=float(((x @ w - y) ** 2).mean()))
    return float(((x @ w - y) ** 2).mean())


def sdk_train(parameters):  # type: ignore[no-untyped-def]
    """The SDK's train_func: the same body, its loss printed as Katib's collector reads it."""
    import torch

    lr, batch = parameters["lr"], parameters["batch"]
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    y = x @ torch.arange(1.0, 9.0) + 0.1 * torch.randn(256)
    w = torch.zeros(8, requires_grad=True)
    opt = torch.optim.SGD([w], lr=lr)
    for step in range(20):
        idx = torch.randint(0, 256, (batch,))
        loss = ((x[idx] @ w - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step={step} loss={float(((x @ w - y) ** 2).mean())}", flush=True)
    return float(((x @ w - y) ** 2).mean())


def ours(kubeconfig: Path, home: Path) -> tuple[float, dict[tuple[float, int], float]]:
    """The sweep through ``ktrain.sweep``: its wall time, each trial's objective."""
    os.environ["KTRAIN_HOME"] = str(home)
    os.environ["KTRAIN_MONITOR"] = "text"
    import jupyter_ktrain as ktrain
    from jupyter_ktrain.config import set_config

    set_config(["backend=kubernetes", f"kubeconfig={kubeconfig}"])
    t0 = time.monotonic()
    sweep = ktrain.sweep(
        train,
        {"lr": _choice(LRS), "batch": _choice(BATCHES)},
        objective="loss:min", search="grid", parallel=PARALLEL, no_prune=True,
        warm=True, nodes=1, procs_per_node=1, image="local/python", name="bench",
    )  # fmt: skip
    took = time.monotonic() - t0
    bad = [t for t in sweep.trials if t.state != "Succeeded" or t.objective is None]
    if bad or len(sweep.trials) != len(LRS) * len(BATCHES):
        raise RuntimeError(f"our sweep did not run every trial: {sweep.table()}")
    return took, {(t.params["lr"], t.params["batch"]): t.objective or 0.0 for t in sweep.trials}


def _choice(values: tuple[Any, ...]) -> str:
    return f"choice({', '.join(map(str, values))})"


LOSS = re.compile(r"\bloss=([0-9.eE+-]+)")


def sdk_trial(kubeconfig: Path, ns: str, poll: int, number: int, lr: float, batch: int) -> float:
    """One trial as Katib runs it: a PyTorchJob of its own, its last loss from its log."""
    from kubeflow.training import TrainingClient

    tc = TrainingClient(config_file=str(kubeconfig), namespace=ns)
    name = f"trial-{number}"
    tc.create_job(
        name=name, train_func=sdk_train, parameters={"lr": lr, "batch": batch},
        num_workers=1, base_image="local/python",
    )  # fmt: skip
    try:
        tc.wait_for_job_conditions(name, polling_interval=poll)
        logs, _ = tc.get_job_logs(name)
        found = LOSS.findall("\n".join(logs.values()))
        if not found:
            raise RuntimeError(f"{name} logged no loss: {logs}")
        return float(found[-1])
    finally:
        tc.delete_job(name)


def sdk(kubeconfig: Path, ns: str, poll: int) -> tuple[float, dict[tuple[float, int], float]]:
    """The same trials through the SDK, ``PARALLEL`` at a time, each waited on polling every
    ``poll`` s: wall time, objectives."""
    grid = list(product(LRS, BATCHES))
    t0 = time.monotonic()
    with ThreadPoolExecutor(PARALLEL) as pool:
        trials = [(kubeconfig, ns, poll, n, lr, batch) for n, (lr, batch) in enumerate(grid)]
        losses = list(pool.map(lambda a: sdk_trial(*a), trials))
    return time.monotonic() - t0, dict(zip(grid, losses, strict=True))


def _best(objectives: dict[tuple[float, int], float]) -> tuple[float, int]:
    return min(objectives, key=lambda k: objectives[k])


def main() -> None:
    from jupyter_ktrain.backends.registry import warm_up
    from tests.cluster.cluster import Cluster

    warm_up("kubernetes")  # what loading the extension does in the background
    with tempfile.TemporaryDirectory(prefix="ktrain-bench-") as tmp, Cluster(Path(tmp)) as cl:
        cfg = {}
        for ns in ("sweep", "sdk", "katib"):
            cl.create_namespace(ns)
            cfg[ns] = cl.user_kubeconfig(Path(tmp) / f"{ns}.kubeconfig", ns)
        our_s, our = ours(cfg["sweep"], Path(tmp) / "home")
        print(f"ours: {len(our)} trials on {PARALLEL} warm jobs in {our_s:.1f} s", flush=True)
        sdk_s, theirs = sdk(cfg["sdk"], "sdk", SDK_DEFAULT_POLL_S)
        print(f"Kubeflow SDK (its default {SDK_DEFAULT_POLL_S} s poll): {len(theirs)} trials "
              f"as a PyTorchJob each in {sdk_s:.1f} s", flush=True)  # fmt: skip
        katib_s, katib = sdk(cfg["katib"], "katib", KATIB_POLL_S)
        print(f"Kubeflow SDK polled every {KATIB_POLL_S} s (Katib-like): {katib_s:.1f} s",
              flush=True)  # fmt: skip
    for other in (theirs, katib):
        if _best(our) != _best(other):
            raise RuntimeError(f"different best trials: {_best(our)}, {_best(other)}")
        for key, value in our.items():  # the same function, the same seed: the same losses
            if abs(value - other[key]) > 1e-3 * max(1.0, abs(value)):
                raise RuntimeError(f"trial {key}: ours {value}, the SDK's {other[key]}")
    per_round = len(our) / PARALLEL
    summary: dict[str, Any] = {
        "trials": len(our),
        "parallel": PARALLEL,
        "sweep_warm_s": round(our_s, 1),
        "sweep_kubeflow_sdk_s": round(sdk_s, 1),
        "sweep_kubeflow_sdk_poll_1s_s": round(katib_s, 1),
        "per_trial_warm_s": round(our_s / per_round, 2),
        "per_trial_kubeflow_sdk_s": round(sdk_s / per_round, 2),
        "per_trial_kubeflow_sdk_poll_1s_s": round(katib_s / per_round, 2),
        "speedup_vs_kubeflow_sdk": round(sdk_s / our_s, 1),
        "speedup_vs_kubeflow_sdk_goal": ">=5",
        "speedup_vs_kubeflow_sdk_poll_1s": round(katib_s / our_s, 1),
        "best": {"lr": _best(our)[0], "batch": _best(our)[1]},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

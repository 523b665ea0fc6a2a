"""A big job for the views (issue 37's "big jobs at a glance"): :data:`GLANCE_CELL` runs in
every rank of a ``nodes x 8`` job without torch. Each node's local rank 0 writes its node's
8 GPU samples each step, as the node agent's sampler writes them (the records of
:class:`jupyter_ktrain.pod.protocol.Gpu`: no NVML here, the rest of their way is the real
one); GPU 3 of every node idles, GPU 6 runs hot. Rank 5 prints a warning, rank 9 an error.

:func:`panel_sees_a_big_job` checks what the side panel's API makes of it (the cluster
test and the browser test share it)."""

from __future__ import annotations

from typing import Any

from jupyter_ktrain.server.core import PanelCore

GPUS = 8
IDLE_GPU, HOT_GPU = 3, 6
WARNS, FAILS = 5, 9
WARNING = "UserWarning: the loader is slow"
ERROR = "RuntimeError: a bad batch, skipped"

GLANCE_CELL = f"""
import json, os, time
import jupyter_ktrain as ktrain
from jupyter_ktrain.pod.protocol import Gpu, format_record

def glance(steps, pause=0.5):
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    node = rank // int(os.environ["LOCAL_WORLD_SIZE"])
    if rank == {WARNS}:
        print({WARNING!r}, flush=True)
    if rank == {FAILS}:
        print({ERROR!r}, flush=True)
    for step in range(steps):
        if local == 0:  # one sampler per node, as the agent's: every GPU of its node
            for g in range({GPUS}):
                util = 0.0 if g == {IDLE_GPU} else 90.0
                gpu = Gpu(node, g, f"GPU-{{node}}-{{g}}", time.time(), util=util,
                          power=60.0 + 3 * util, temp=91.0 if g == {HOT_GPU} else 55.0,
                          mem_used=30000.0, mem_total=81559.0)
                print(format_record(gpu.to_dict()), flush=True)
        print(f"rank {{rank}} at step {{step}}", flush=True)
        ktrain.report(step=step, total=steps, loss=1.0 / (step + 1))
        time.sleep(pause)
    return rank
"""


def panel_sees_a_big_job(panel: PanelCore, name: str, nodes: int, ranks: int) -> dict[str, Any]:
    """The panel's API of a finished :data:`GLANCE_CELL` job: one heatmap per field (a row per
    node, a column per GPU, the idle and hot GPUs marked), no line per GPU; the log starts
    with rank 0 and the ranks that warned or failed, and every rank's lines are reachable
    through the filter. Returns the metrics payload."""
    payload = panel.metrics(name)
    assert [h["field"] for h in payload["heatmaps"]] == ["util", "mem_used", "power"], payload
    util = payload["heatmaps"][0]
    assert util["gpus"] == list(range(GPUS))
    assert [row["node"] for row in util["rows"]] == list(range(nodes))
    marks = {(row["node"], c["gpu"]): c["mark"] for row in util["rows"] for c in row["cells"]}
    assert {k for k, v in marks.items() if v == "idle"} == {(n, IDLE_GPU) for n in range(nodes)}
    assert {k for k, v in marks.items() if v == "hot"} == {(n, HOT_GPU) for n in range(nodes)}
    assert not [p for p in payload["panels"] if p["key"].startswith("gpu:")]
    assert payload["log_ranks"] == list(range(ranks))
    assert payload["log_start"] == [0, WARNS, FAILS]
    assert payload["log_flagged"] == {str(WARNS): "warning", str(FAILS): "error"}
    start = panel.logs(name, ranks=set(payload["log_start"]))["lines"]
    assert {line["rank"] for line in start} - {None} == {0, WARNS, FAILS}
    assert (f"rank{WARNS}", WARNING) in {(line["label"], line["text"]) for line in start}
    # nothing lost: each rank's lines through the filter, all of them together every line
    every = [(line["label"], line["text"]) for line in panel.logs(name)["lines"]]
    chosen: list[tuple[str, str]] = []
    for rank in range(ranks):
        lines = panel.logs(name, ranks={rank})["lines"]
        chosen += [(line["label"], line["text"]) for line in lines if line["rank"] == rank]
        assert f"rank {rank} at step 0" in {line["text"] for line in lines}, rank
    assert sorted(chosen) == sorted(x for x in every if x[0].startswith("rank")), every
    return payload

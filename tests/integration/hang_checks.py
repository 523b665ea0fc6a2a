"""The hang and straggler checks shared by the local and the cluster tests
(``test_hangs_local``, ``test_k8s_hangs``): one cell each, one set of assertions, two
backends."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.errors import JobFailed
from jupyter_ktrain.monitor.stragglers import STEP_TIME
from jupyter_ktrain.server.core import PanelCore
from jupyter_ktrain.store.records import read_hang
from tests.notebook_cells import FIRST_HANG_SLEEP_LINE, HANG_SLEEP_LINE


def _timeless(text: str) -> str:
    return re.sub(r"for [\d.]+ (s|min|h)\b", "for (a while)", text)


def _panel_until_named(
    panel: PanelCore, name: str, cancel: Callable[[], Any], seen: dict[str, Any]
) -> None:
    """The side panel's view of the job (its API), polled until it names the hung rank with
    the stacks; then the job is cancelled (the cell ends)."""
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            try:
                payload = panel.metrics(name)
            except Exception:  # the job is not there yet
                time.sleep(0.3)
                continue
            if payload["stacks"]:
                seen["payload"] = payload
                return
            time.sleep(0.3)
    finally:
        cancel()


def hang_named_in_cell_and_panel(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    *,
    flags: str,
    name: str,
    panel: PanelCore,
    cancel: Callable[[], Any],
    where: tuple[str, str],
    backend: str,
) -> None:
    """Run ``steps_then_hang(5, 1)`` (:data:`HANG_CELL`) with ``flags --hang-after 4s``; while
    the cell follows it, the panel (``panel``) is polled until it shows the hang with the
    stacks, then ``cancel`` ends the job. ``where``: how rank 0 and rank 1's places are named
    ("node 0", "pod NAME-master-0")."""
    seen: dict[str, Any] = {}
    poll = threading.Thread(
        target=_panel_until_named, args=(panel, name, cancel, seen), daemon=True
    )
    poll.start()
    with pytest.raises(JobFailed, match="cancelled"):
        shell.run_cell_magic(
            "ktrain", f"{flags} --hang-after 4s --name {name}", "steps_then_hang(5, 1)\n"
        )
    poll.join(timeout=30)
    out = capsys.readouterr().out
    waits = re.compile(
        rf"rank 1 waits in sleep <- steps_then_hang \(cell \[\d+\], line {HANG_SLEEP_LINE}\)"
    )
    # the cell: first the hang (every rank stopped at step 4), then, with the stacks, rank 1
    # named as the one the other waits for, and where it waits
    said = [line for line in out.splitlines() if "made no progress" in line]
    assert said, out
    both = f"[ktrain] warning: rank 0 ({where[0]}), rank 1 ({where[1]}) have made no progress"
    assert said[0].startswith(both), said
    assert "every rank is stopped, all at step 4" in said[0], said
    one = f"[ktrain] warning: rank 1 ({where[1]}) has made no progress for "
    assert said[-1].startswith(one), said
    assert said[-1].endswith(": every rank is stopped, the others inside a collective, it is not")
    assert waits.search(out), out
    assert f"(every rank's whole stack: %ktrain stacks {name})" in out
    # the panel said the same, with every rank's stack: rank 0 inside all_reduce
    payload = seen.get("payload")
    assert payload is not None, out
    [warning] = [w for w in payload["warnings"] if "made no progress" in w]
    # the same words (the local job's own watch says it a moment apart: its seconds may differ)
    cell = said[-1].removeprefix("[ktrain] warning: ")
    assert _timeless(warning.splitlines()[0]) == _timeless(cell)
    assert waits.search(warning), warning
    stacks = payload["stacks"]
    assert stacks.startswith(f"Stacks of {name!r}, 2 ranks (most recent call last):"), stacks
    rank0, rank1 = re.split(r"\nrank 1[ ,]", stacks)
    assert "in all_reduce" in rank0, rank0
    assert f"line {HANG_SLEEP_LINE}, in steps_then_hang" in rank1, rank1
    # an ended job hangs no more: the store forgets it, the panel says nothing of it
    assert read_hang(backend, name) is None
    after = panel.metrics(name)
    assert not [w for w in after["warnings"] if "made no progress" in w]


def straggler_named_in_cell_and_panel(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    *,
    flags: str,
    name: str,
    panel: PanelCore,
    where: str,
) -> None:
    """Run ``uneven(30, 3, 0.3)`` (:data:`STRAGGLER_CELL`: rank 3 of 4 computes 0.3 s a step in
    a busy loop, the others 0.1 s) with ``flags`` (2 nodes x 2 ranks): the cell names rank 3
    as the slowest (``where``: its place) with its step time against the median, and plots
    each rank's step time; the panel's API says and plots the same."""
    assert shell.run_cell_magic("ktrain", f"{flags} --name {name}", "r = uneven(30, 3, 0.3)\n")
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "is the slowest" in line]
    assert len(said) == 1, out  # said once, when it was seen
    found = re.search(
        rf"\[ktrain\] warning: rank 3 \({where}\) is the slowest: its steps take ([\d.]+) s "
        r"against a median of ([\d.]+) s \(([\d.]+)x\) for 20 steps in a row, up to step (\d+); "
        "every other rank waits for it",
        said[0],
    )
    assert found is not None, said
    slow, median, ratio = (float(found.group(i)) for i in (1, 2, 3))
    assert 0.28 <= slow <= 0.45, said  # its 0.3 s of compute (a loaded machine adds some)
    assert ratio >= 1.25, said
    assert median < slow, said
    payload = panel.metrics(name)
    assert [w for w in payload["warnings"] if "is the slowest" in w] == [
        said[0].removeprefix("[ktrain] warning: ")
    ]
    [chart] = [p for p in payload["panels"] if p["name"] == STEP_TIME]
    by_rank = {t["label"]: t["y"] for t in chart["traces"]}
    assert sorted(by_rank) == [f"rank {r}" for r in range(4)], by_rank
    # rank 3's steps took longer than rank 0's at every step but the first few
    late = [(a, b) for a, b in zip(by_rank["rank 0"], by_rank["rank 3"], strict=False)][5:]
    assert late, by_rank
    assert all(b > a for a, b in late), late


def _panel_warning(panel: PanelCore, name: str, deadline: float) -> dict[str, Any] | None:
    """The panel's view of the job once it shows a hang with the stacks, else None by then."""
    while time.monotonic() < deadline:
        try:
            payload = panel.metrics(name)
        except Exception:  # the job is not there yet
            payload = None
        if payload is not None and payload["stacks"]:
            return payload
        time.sleep(0.3)
    return None


def first_collective_hang_named(
    shell: InteractiveShell,
    capsys: pytest.CaptureFixture[str],
    *,
    flags: str,
    name: str,
    panel: PanelCore,
    cancel: Callable[[str], Any],
    ended: Callable[[str], bool],
    where: tuple[str, str],
    backend: str,
) -> None:
    """``first_all_reduce_hang(1)`` (:data:`HANG_CELL`: rank 1 sleeps before the first
    all-reduce, rank 0 waits in it; no step is ever reported) with ``--hang-after 8s``, twice:
    followed by the cell (the cell names rank 1 and where it waits, the panel says it) and
    detached (no cell: ``%ktrain status`` and the panel say it, from the job's own watch).
    ``where``: how rank 0's and rank 1's places are named."""
    waits = re.compile(
        rf"rank 1 waits in sleep <- first_all_reduce_hang \(cell \[\d+\], line "
        rf"{FIRST_HANG_SLEEP_LINE}\)"
    )

    def named_in(place: str) -> str:
        return (
            re.escape(f"rank 1 ({place}) has made no progress for ")
            + r"(\d+)"
            + re.escape(
                " s: every rank is stopped before its first step, the others inside a "
                "collective, it is not"
            )
        )

    named = named_in(where[1])
    # followed: the cell, then the panel
    seen: dict[str, Any] = {}
    poll = threading.Thread(
        target=_panel_until_named, args=(panel, name, lambda: cancel(name), seen), daemon=True
    )
    poll.start()
    with pytest.raises(JobFailed, match="cancelled"):
        shell.run_cell_magic(
            "ktrain", f"{flags} --hang-after 8s --name {name}", "first_all_reduce_hang(1)\n"
        )
    poll.join(timeout=30)
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if "made no progress" in line]
    assert said, out
    both = f"[ktrain] warning: rank 0 ({where[0]}), rank 1 ({where[1]}) have made no progress for "
    assert said[0].startswith(both), said
    assert said[0].endswith(
        "every rank is stopped before its first step (a rendezvous or a first collective that "
        "does not complete?)"
    ), said
    quiet = re.fullmatch(r"\[ktrain\] warning: " + named, said[-1])
    assert quiet is not None, said
    assert 8 <= int(quiet.group(1)) <= 15, said  # named within the limit's next checks
    assert waits.search(out), out
    payload = seen.get("payload")
    assert payload is not None, out
    [warning] = [w for w in payload["warnings"] if "made no progress" in w]
    assert re.fullmatch(named, warning.splitlines()[0]), warning
    assert waits.search(warning), warning
    rank0, rank1 = re.split(r"\nrank 1[ ,]", payload["stacks"])
    assert "in all_reduce" in rank0, rank0
    assert f"line {FIRST_HANG_SLEEP_LINE}, in first_all_reduce_hang" in rank1, rank1
    assert read_hang(backend, name) is None  # ended: forgotten
    # detached: no cell follows it; the job's own watch names it for status and the panel
    alone = f"{name}-detached"
    named = named_in(where[1].replace(name, alone))  # a pod's name is the job's
    shell.run_cell_magic(
        "ktrain", f"{flags} --hang-after 8s --name {alone} --detach", "first_all_reduce_hang(1)\n"
    )
    capsys.readouterr()
    try:
        payload = _panel_warning(panel, alone, time.monotonic() + 180)
        assert payload is not None, "the panel never said the hang of a detached job"
        [warning] = [w for w in payload["warnings"] if "made no progress" in w]
        assert re.fullmatch(named, warning.splitlines()[0]), warning
        assert waits.search(warning), warning
        shell.run_line_magic("ktrain", f"status {alone}")
        status = capsys.readouterr().out
        assert re.search(r"warning: " + named, status), status
        assert waits.search(status), status
    finally:
        cancel(alone)
    deadline = time.monotonic() + 60
    while not ended(alone) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ended(alone)
    assert read_hang(backend, alone) is None
    shell.run_line_magic("ktrain", f"status {alone}")
    assert "made no progress" not in capsys.readouterr().out

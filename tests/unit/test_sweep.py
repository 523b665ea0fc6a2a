"""The pure parts of a sweep: the search space's text, the objective, the median rule, the
sweep's flags (one error each, before anything runs), the results' table, and Optuna's
samplers asked and told as the sweep does."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from jupyter_ktrain.errors import SpecError
from jupyter_ktrain.runner.options import CellOptions, RunOptions
from jupyter_ktrain.runner.source import call_source
from jupyter_ktrain.store.sweeps import SweepRecord
from jupyter_ktrain.sweep.driver import check_call
from jupyter_ktrain.sweep.prune import Pruned, prune_at
from jupyter_ktrain.sweep.record import (
    DONE,
    INTERRUPTED,
    RUNNING,
    make_record,
    row_of,
    running_row,
    seen_state,
    sweep_of,
)
from jupyter_ktrain.sweep.search import Search
from jupyter_ktrain.sweep.seen import compare_entries, list_row
from jupyter_ktrain.sweep.trials import Sweep, Trial
from jupyter_ktrain.sweep_spec.objective import Objective, as_number, parse_objective
from jupyter_ktrain.sweep_spec.space import Param, parse_param
from jupyter_ktrain.sweep_spec.sweep_options import SweepOptions


@pytest.mark.parametrize(
    ("text", "param"),
    [
        ("lr=loguniform(1e-5,1e-3)", Param("lr", "loguniform", 1e-5, 1e-3)),
        (" wd = uniform(0, 0.1) ", Param("wd", "uniform", 0.0, 0.1)),
        ("layers=intuniform(1,4)", Param("layers", "int", 1, 4)),
        ("layers=int(1,4)", Param("layers", "int", 1, 4)),
        ("batch=choice(16,32)", Param("batch", "choice", choices=(16, 32))),
        (
            "opt=choice('adam', \"sgd\", None)",
            Param("opt", "choice", choices=("adam", "sgd", None)),
        ),
    ],
)
def test_a_distribution_reads_as_its_param(text: str, param: Param) -> None:
    assert parse_param(text) == param


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("loguniform(1e-5,1e-3)", "no NAME= before the distribution"),
        ("2lr=uniform(0,1)", "'2lr' is not a Python name"),
        ("class=uniform(0,1)", "'class' is not a Python name"),
        ("lr=normal(0,1)", "unknown distribution 'normal'"),
        ("lr=uniform(0,1", "does not read as a distribution"),
        ("lr=0.1", "'0.1' is not a distribution"),
        ("lr=uniform(0,x)", "its values must be literals"),
        ("lr=uniform(0)", "uniform(a,b) takes two numbers"),
        ("lr=uniform(1,1)", "its low end 1 must be below its high end 1"),
        ("lr=loguniform(-1,1)", "loguniform(a,b) needs a > 0"),
        ("n=intuniform(1,2.5)", "intuniform(a,b) takes two integers"),
        ("b=choice()", "choice() needs at least one value"),
        ("b=choice(1,1)", "choice() lists a value twice"),
        ("b=choice(low=1)", "is not a distribution"),
    ],
)
def test_a_bad_distribution_is_one_error_naming_the_forms(text: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_param(text)
    assert said in str(caught.value)
    assert "uniform(a,b), loguniform(a,b), intuniform(a,b) or choice(v1,v2,...)" in str(
        caught.value
    )


def test_discrete_params_list_their_values_and_read_back() -> None:
    assert parse_param("n=intuniform(2,5)").values() == [2, 3, 4, 5]
    assert parse_param("b=choice(16,32)").values() == [16, 32]
    assert str(parse_param("lr=loguniform(1e-5,1e-3)")) == "lr=loguniform(1e-05, 0.001)"
    assert str(parse_param("n=int(2,5)")) == "n=intuniform(2, 5)"


def test_the_objective_names_a_metric_or_the_result_and_a_direction() -> None:
    assert parse_objective("loss:min") == Objective("loss", True)
    assert parse_objective("eval/acc:MAX") == Objective("eval/acc", False)
    assert parse_objective("result:max").of_result
    assert Objective("loss", True).better(1.0, 2.0)
    assert Objective("acc", False).better(2.0, 1.0)
    for bad in ("loss", "loss:low", ":min", "loss:"):
        with pytest.raises(SpecError, match="is not NAME:min or NAME:max"):
            parse_objective(bad)
    assert (as_number(3), as_number(2.5), as_number(True), as_number(math.nan)) == (
        3.0,
        2.5,
        None,
        None,
    )


def test_the_median_rule_prunes_a_trial_worse_than_the_others_at_a_step() -> None:
    good = {0: 1.0, 1: 0.5, 2: 0.3, 3: 0.2}
    also = {0: 1.1, 1: 0.6, 2: 0.4, 3: 0.3}
    bad = {0: 5.0, 1: 5.0, 2: 5.0, 3: 5.0}
    assert prune_at(bad, [good, also], True, 2) == Pruned(2, 5.0, 0.35)
    assert prune_at(bad, [good, also], True, 4) is None  # still warming up
    assert prune_at(bad, [good], True, 0) is None  # one other is not enough to compare
    assert prune_at(good, [also, bad], True, 0) is None  # better than the median
    assert prune_at(good, [good, good], True, 0) is None  # equal is not worse
    assert prune_at({0: 0.1, 5: 0.1}, [also, good], False, 0) == Pruned(0, 0.1, 1.05)
    assert prune_at(bad, [{7: 1.0}, {7: 1.0}], True, 0) is None  # nobody else at its steps


def _sweep(line: str) -> SweepOptions:
    options = CellOptions.from_line(line)
    assert options.sweep is not None
    return options.sweep


def test_the_cells_sweep_flags_make_one_sweep() -> None:
    sweep = _sweep(
        '--sweep "lr=loguniform(1e-5,1e-3)" --sweep "batch=choice(16,32)" --trials 16 '
        "--parallel 2 --objective loss:min --warm"
    )
    assert sweep.names == ("lr", "batch")
    assert (sweep.trials, sweep.parallel, sweep.search, sweep.prune_after) == (16, 2, "tpe", 5)
    grid = _sweep('--sweep "a=choice(1,2,3)" --sweep "b=choice(1,2)" --objective acc:max')
    assert (grid.search, grid.trials, grid.objective) == ("grid", 6, Objective("acc", False))
    capped = _sweep('--sweep "a=intuniform(1,3)" --search grid --trials 10 --objective r:max')
    assert capped.trials == 3  # a grid runs each point once
    assert _sweep('--sweep "a=uniform(0,1)" --objective r:max').trials == 10
    assert _sweep('--sweep "a=uniform(0,1)" --objective r:max --no-prune').prune_after is None
    assert _sweep('--sweep "a=uniform(0,1)" --objective r:max --prune-after 0').prune_after == 0
    assert CellOptions.from_line("--nodes 2").sweep is None


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('--sweep "a=choice(1)" --sweep "a=choice(2)" --objective r:max', "names 'a' twice"),
        ('--sweep "a=choice(1)" --objective r:max --parallel 0', "--parallel 0: it takes"),
        ('--sweep "a=choice(1)" --objective r:max --trials -1', "--trials -1: it takes"),
        ('--sweep "a=choice(1)" --objective r:max --search bayes', "invalid choice: 'bayes'"),
        ('--sweep "a=choice(1)" --objective r:max --no-prune --prune-after 3', "give one of"),
        ('--sweep "a=choice(1)" --objective r:max --prune-after -1', "(0 or more)"),
        ('--sweep "a=choice(1)" --objective r:max --dry-run', "--dry-run does not go with"),
        ("--parallel 2 --objective loss:min", "--parallel, --objective only apply to a sweep"),
    ],
)
def test_bad_sweep_flags_are_one_error(line: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        CellOptions.from_line(line)
    assert said in str(caught.value)


def test_ktrain_run_refuses_a_sweeps_arguments_and_names_ktrain_sweep() -> None:
    with pytest.raises(SpecError, match=r"trials= is an argument of a sweep: call ktrain.sweep"):
        RunOptions.from_keywords(nodes=1, trials=3)


def train(epochs: int, lr: float = 0.1, batch: int = 8) -> float:
    return epochs * lr * batch


def test_a_sweeps_call_passes_each_swept_name_by_its_variable() -> None:
    source = call_source(train, (3,), {"batch": 16}, by_name=("lr",))
    assert source.cell == "train(3, batch=16, lr=lr)\n"
    check_call(train, (3,), {}, ("lr", "batch"))
    with pytest.raises(SpecError, match=r"calls train\(\.\.\., wd=\.\.\.\) but it does not take"):
        check_call(train, (3,), {}, ("wd",))


def test_the_table_lists_every_trial_and_the_best() -> None:
    trials = (
        Trial(0, {"lr": 0.001, "b": 16}, "Succeeded", 0.5, "s-t0"),
        Trial(1, {"lr": 0.01, "b": 32}, "Pruned", 2.0, "s-w1", 3, "pruned at step 5"),
        Trial(2, {"lr": 0.1, "b": 16}, "Succeeded", 0.25, "s-t2"),
        Trial(3, {"lr": 0.2, "b": 32}, "Failed", None, "s-t3", error="rank 0 raised ValueError"),
    )
    sweep = Sweep("s", Objective("loss", True), trials)
    assert sweep.best is trials[2]
    assert Sweep("s", Objective("loss", False), trials).best is trials[0]
    assert Sweep("s", Objective("loss", True), trials[1:2]).best is None
    assert repr(sweep) == "<ktrain Sweep 's': 4 trial(s), best trial 2, loss=0.25; .table()>"
    assert sweep.table().split("\n") == [
        "Sweep 's': 2 succeeded, 1 pruned, 1 failed; best: trial 2, loss=0.25 (lr=0.1, b=16)",
        "trial  lr     b   loss:min  state      job",
        "0      0.001  16  0.5       Succeeded  s-t0",
        "1      0.01   32  2         Pruned     s-w1 run 3",
        "2      0.1    16  0.25      Succeeded  s-t2",
        "3      0.2    32  -         Failed     s-t3",
    ]


def test_the_grid_asks_every_point_once_even_when_trials_run_at_once() -> None:
    sweep = _sweep(
        '--sweep "a=choice(1,2)" --sweep "b=intuniform(0,2)" --search grid --objective r:max'
    )
    search = Search(sweep, seed=0)
    asked = [search.ask() for _ in range(sweep.trials)]  # none told yet: all running
    assert sorted((p["a"], p["b"]) for _, p in asked) == [(a, b) for a in (1, 2) for b in (0, 1, 2)]
    assert [n for n, _ in asked] == list(range(6))
    for number, params in asked:  # the last one told does not stop the study (ask-and-tell)
        search.tell(number, "Succeeded", float(params["a"] + params["b"]))
    assert search.study.best_value == 4.0


@pytest.mark.parametrize("search", ["random", "tpe"])
def test_random_and_tpe_ask_within_the_space_and_learn_from_what_they_are_told(
    search: str,
) -> None:
    sweep = _sweep(
        f'--sweep "lr=loguniform(1e-5,1e-3)" --sweep "n=intuniform(1,3)" '
        f"--sweep \"opt=choice('adam','sgd')\" --objective loss:min --search {search} "
        "--trials 12"
    )
    found = Search(sweep, seed=1)
    for state in ("Succeeded", "Pruned", "Failed", "Cancelled") * 3:
        number, params = found.ask()
        assert 1e-5 <= params["lr"] <= 1e-3
        assert params["n"] in (1, 2, 3)
        assert params["opt"] in ("adam", "sgd")
        found.tell(number, state, params["lr"] * 1000 if state == "Succeeded" else None)
    states = [t.state.name for t in found.study.trials]
    assert states == ["COMPLETE", "PRUNED", "FAIL", "FAIL"] * 3


def test_the_record_holds_every_trial_in_order_the_best_and_each_curve() -> None:
    options = SweepOptions.create(["x=choice(1,2,3)"], "loss:min", parallel=2)
    ended = [
        row_of(Trial(2, {"x": 3}, "Succeeded", 0.5, "s-t2"), 10.0, 12.0),
        row_of(Trial(0, {"x": 1}, "Failed", None, "s-t0", error="ValueError: no"), 10.0, 11.0),
    ]
    live = running_row(1, {"x": 2}, "s-t1", None, 11.0, 0.25)
    record = make_record("s", "local", options, False, 9.0, RUNNING, [*ended, live],
                         {1: {0: 1.0, 1: 0.25}})  # fmt: skip
    assert [(r.number, r.state) for r in record.rows] == [
        (0, "Failed"), (1, "Running"), (2, "Succeeded")
    ]  # fmt: skip
    assert record.best == 2  # a running trial's value so far is no result yet
    assert record.to_json()["curves"] == {"1": [[0, 1.0], [1, 0.25]]}
    assert record.space == ("x=choice(1, 2, 3)",)
    # as a reader gets it from the store
    kept = sweep_of(SweepRecord.from_json(json.loads(json.dumps(record.to_json()))))
    assert [t.state for t in kept.trials] == ["Failed", "Running", "Succeeded"]
    assert kept.best is not None
    assert kept.best.number == 2
    assert seen_state(record) == RUNNING  # its writer (this process) lives


def test_a_record_whose_writer_is_gone_reads_interrupted() -> None:
    gone = int(Path("/proc/sys/kernel/pid_max").read_text())  # no process has it: pids are below
    options = SweepOptions.create(["x=choice(1,2)"], "loss:min")
    record = replace(make_record("s", "local", options, False, 1.0, RUNNING, [], {}), pid=gone)
    assert seen_state(record) == INTERRUPTED
    assert seen_state(replace(record, host="another-host")) == RUNNING  # not ours to tell
    assert seen_state(replace(record, state=DONE)) == DONE


def test_a_sweeps_list_row_and_compare_columns_come_from_its_record() -> None:
    options = SweepOptions.create(["lr=choice(0.1,0.2,0.3)"], "loss:min", parallel=2)
    rows = [
        row_of(Trial(0, {"lr": 0.1}, "Succeeded", 0.5, "s-w0", 1), 1.0, 2.0),
        row_of(Trial(1, {"lr": 0.2}, "Pruned", 0.9, "s-w1", 1), 1.0, 2.0),
        row_of(Trial(2, {"lr": 0.3}, "Failed", None, "s-w0", None, "it could not start"), 2, 2),
        running_row(3, {"lr": 0.3}, "s-w1", 2, 2.0, 0.7),
    ]
    record = make_record("s", "local", options, True, 1.0, DONE, rows, {})
    assert list_row(record) == ("s", "local", "sweep Done · 3/3 trial(s), best trial 0 loss=0.5")
    entries, metric = compare_entries(record)
    assert metric == "loss"
    # a warm trial is its run of its job; one that never got a run has no lines to compare
    assert [(e.label, e.job, e.run) for e in entries] == [
        ("trial 0", "s-w0", 1), ("trial 1", "s-w1", 1), ("trial 3", "s-w1", 2)
    ]  # fmt: skip
    assert entries[1].params == {"lr": "0.2", "state": "Pruned"}
    one = make_record("s", "local", options, True, 1.0, DONE, rows[:1], {})
    with pytest.raises(SpecError, match="Sweep 's' has 1 trial"):
        compare_entries(one)


class _ReportingJob:
    """A job that reported ``values`` (step -> loss) on rank 0 and runs until cancelled: the
    follow loop reads it as a backend's job (no process)."""

    def __init__(self, name: str, values: dict[int, float]) -> None:
        from jupyter_ktrain.pod.protocol import format_rank_line, format_record

        self.name, self.run, self.backend = name, None, self
        self.cancelled = False
        self._lines = [
            format_rank_line(0, format_record({"type": "metric", "step": s, "loss": v}))
            for s, v in values.items()
        ]

    def log_sources(self) -> list[_ReportingJob]:
        return [self]

    replica = "trial-node-0"

    def read(self) -> list[str]:
        lines, self._lines = self._lines, []
        return lines

    def finish(self) -> list[str]:
        return self.read()

    def close(self) -> None:
        return None

    def more_log_sources(self, name: str, known: object) -> list[object]:
        return []

    def status(self) -> object:
        from jupyter_ktrain.jobs import CANCELLED, RUNNING, JobStatus

        return JobStatus(self.name, CANCELLED if self.cancelled else RUNNING)

    def cancel(self) -> None:
        self.cancelled = True


def test_a_pruned_trial_is_worth_the_value_it_was_pruned_at_not_a_later_step() -> None:
    """The verdict at step 5 (13.9422 against a median of 2); steps 6 and 7 came in the same
    read, before the cancel took: the trial's value is the one its error names."""
    from jupyter_ktrain.sweep.follow_trial import Board, follow_trial
    from jupyter_ktrain.sweep_spec.objective import Objective

    objective = Objective("loss", minimize=True)
    board = Board(objective, prune_after=5)
    for other in (1, 2):
        for step in range(8):
            board.add(other, step, 2.0)
    job = _ReportingJob("trial-3", {s: 13.9422 - 0.003 * max(0, s - 5) for s in range(8)})
    trial = follow_trial(3, {"lr": 0.1}, job, board, objective, say=lambda _: None)  # type: ignore[arg-type]
    assert trial.state == "Pruned"
    assert trial.error.startswith("pruned at step 5: loss=13.9422, worse than")
    assert trial.objective == 13.9422
    assert board.last(3) == pytest.approx(13.9362)  # what the old code showed (13.94 -> 13.93)

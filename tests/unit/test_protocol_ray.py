"""The line protocol read through Ray's prefix of what a task printed (a RayJob's driver
forwards its tasks' stdout as ``(fn pid=N, ip=A) text``)."""

from __future__ import annotations

from jupyter_ktrain.pod.protocol import format_rank_line, format_record, parse_line

RECORD = format_record({"type": "metric", "rank": 0, "t": 1.0, "step": 3, "loss": 0.5})


def test_a_task_record_through_the_driver_runtime_is_the_same_record() -> None:
    line = format_rank_line(0, f"(train_shard pid=4242, ip=10.1.2.3) {RECORD}")
    got = parse_line(line)
    assert got.record == {"type": "metric", "rank": 0, "t": 1.0, "step": 3, "loss": 0.5}
    assert (got.rank, got.source, got.text) == (0, "rank", RECORD)


def test_ray_colour_no_ip_and_dedup_note_are_read_through() -> None:
    coloured = f"\x1b[36m(f pid=7)\x1b[0m {RECORD} [repeated 2x across cluster]"
    got = parse_line(format_rank_line(0, coloured))
    assert got.record is not None
    assert got.record["step"] == 3
    assert parse_line(coloured).record == got.record  # a driver not under the runtime
    actor = parse_line(f"(Trainer pid=9, ip=10.0.0.4) {RECORD}")
    assert actor.record is not None
    assert actor.source == "node"


def test_a_task_plain_line_keeps_rays_prefix_and_the_rank() -> None:
    line = format_rank_line(0, "(f pid=12, ip=10.1.2.3) hello from worker-1")
    got = parse_line(line)
    assert (got.rank, got.record, got.text) == (
        0,
        None,
        "(f pid=12, ip=10.1.2.3) hello from worker-1",
    )


def test_lines_that_only_look_like_it_are_text() -> None:
    for text in ("(not ray) @@ktrain {}", "(pid=x) " + RECORD, "(f pid=1)" + RECORD):
        got = parse_line(format_rank_line(1, text))
        assert got.record is None
        assert got.text == text

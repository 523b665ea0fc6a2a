"""MonitorModel: what the monitor shows after a stream of protocol lines."""

from __future__ import annotations

from pathlib import Path

from jupyter_ktrain.jobs import JobShape, ReplicaStatus
from jupyter_ktrain.monitor.model import JobHeader, MonitorModel
from jupyter_ktrain.pod.protocol import format_agent_line, format_rank_line, format_record

NCCL = Path(__file__).resolve().parents[1] / "data" / "nccl"
T0 = 1_763_700_000.0


def _model(**kw: object) -> MonitorModel:
    m = MonitorModel(JobHeader(name="mnist", shape=JobShape(nodes=2, procs_per_node=2)), **kw)  # type: ignore[arg-type]
    m.set_state("Running", T0)
    return m


def test_logs_are_split_by_rank_and_records_are_not_log_lines() -> None:
    m = _model()
    m.feed_text(format_rank_line(0, "epoch 1 loss 0.52"), T0 + 1, node=0)
    m.feed_text(format_rank_line(3, "epoch 1 loss 0.61") + "\n", T0 + 1.1, node=1)
    m.feed_text(format_agent_line("GPU sampling off: NVML not available"), T0 + 1.2, node=1)
    m.feed_text("torchrun: starting 2 workers", T0 + 1.3, node=0)
    m.feed_text(format_rank_line(0, format_record({"type": "metric", "step": 1, "loss": 0.5})), T0)
    assert [(e.label, e.text) for e in m.logs] == [
        ("rank0", "epoch 1 loss 0.52"),
        ("rank3", "epoch 1 loss 0.61"),
        ("agent@1", "GPU sampling off: NVML not available"),
        ("node@0", "torchrun: starting 2 workers"),
    ]
    assert m.labels() == ["rank0", "rank3", "agent@1", "node@0"]
    assert [e.text for e in m.lines_after(2)] == [e.text for e in list(m.logs)[2:]]
    assert [e.text for e in m.lines_after(0, "rank3")] == ["epoch 1 loss 0.61"]
    assert list(m.lines_after(4)) == []
    assert (m.line_count, m.record_count) == (4, 1)


def test_ring_buffers_drop_oldest_lines_from_view_only() -> None:
    m = _model(max_lines=100, max_lines_per_rank=30)
    for i in range(1000):
        m.feed_text(format_rank_line(i % 4, f"line {i}"), T0 + i)
    assert len(m.logs) == 100
    assert m.logs[-1].text == "line 999"
    assert len(m.rank_logs["rank1"]) == 30
    assert m.rank_logs["rank1"][-1].text == "line 997"
    assert m.line_count == 1000
    # a reader that fell behind the ring gets what is still there, oldest first
    assert [e.text for e in m.lines_after(5)][:2] == ["line 900", "line 901"]


def test_metrics_series_per_rank_and_name_bounded() -> None:
    m = _model(plot_points=300)
    for step in range(20_000):
        rec = {"type": "metric", "rank": 1, "step": step, "t": T0 + step, "loss": 1 / (step + 1)}
        m.feed_text(format_rank_line(1, format_record(rec)), T0 + step)
    m.feed_text(format_rank_line(0, format_record({"type": "metric", "t": T0 + 5, "acc": 0.9})), 0)
    assert m.metric_names() == ["acc", "loss"]
    xs, ys = m.metrics[(1, "loss")].points()
    assert len(xs) <= 300
    assert (xs[0], ys[0], xs[-1]) == (0.0, 1.0, 19_999.0)
    assert m.metrics[(0, "acc")].points() == ([5.0], [0.9])  # no step: seconds since start


def test_gpu_series_and_low_utilisation_alert() -> None:
    m = _model(low_util_s=60, low_util_pct=10)
    for i in range(100):
        util = 95.0 if i < 20 else 2.0
        rec = {"type": "gpu", "node": 1, "gpu": 0, "t": T0 + i, "util": util, "mem_used": 1000.0}
        m.feed_text(format_agent_line(format_record(rec)), T0 + i, node=1)
        if i == 70:
            assert m.alerts() == []  # low for 50 s only
    assert [a.code for a in m.alerts()] == ["gpu-low-util"]
    assert "GPU 0 on node 1" in m.alerts()[0].message
    assert m.gpus[(1, 0, "util")].points()[1][-1] == 2.0
    assert m.gpu_last[(1, 0)]["mem_used"] == 1000.0
    rec = {"type": "gpu", "node": 1, "gpu": 0, "t": T0 + 101, "util": 90.0}
    m.feed_text(format_agent_line(format_record(rec)), T0 + 101, node=1)
    assert m.alerts() == []


def test_rdma_requested_but_nccl_fell_back_to_sockets() -> None:
    m = _model(rdma_requested=True)
    for line in (NCCL / "socket_fallback.log").read_text().splitlines():
        m.feed_text(format_rank_line(2, line), T0 + 3)
    alerts = m.alerts()
    assert [a.code for a in alerts] == ["rdma-fallback"]
    assert "rank2 uses TCP sockets" in alerts[0].message
    assert m.transport is not None
    assert m.transport.kind == "socket"
    # the same lines without --rdma: transport shown, no alert
    m2 = _model()
    for line in (NCCL / "roce.log").read_text().splitlines():
        m2.feed_text(format_rank_line(0, line), T0 + 3)
    assert m2.alerts() == []
    assert m2.transport is not None
    assert m2.transport.describe().startswith("NET/IB (RoCE")


def test_hung_rank_alert_only_for_ranks_that_talked_regularly() -> None:
    m = _model(hang_after=60)
    for i in range(10):
        m.feed_text(format_rank_line(0, f"step {i}"), T0 + 2 * i, node=0)
        m.feed_text(format_rank_line(1, f"step {i}"), T0 + 2 * i, node=1)
    m.feed_text(format_rank_line(2, "hello once"), T0)  # prints only at start: never "hung"
    for i in range(10, 60):
        m.feed_text(format_rank_line(0, f"step {i}"), T0 + 2 * i)
    assert [a.key for a in m.check(T0 + 70)] == []
    alerts = m.check(T0 + 120)
    assert [(a.code, a.key) for a in alerts] == [("rank-hung", "1")]
    assert (
        alerts[0].message == "rank 1 (node 1) has made no progress for 102 s while the others go on"
    )
    m.feed_text(format_rank_line(1, "back"), T0 + 121)
    assert m.alerts() == []
    m.check(T0 + 1000)
    m.set_state("Succeeded", T0 + 1001)
    assert m.alerts() == []  # a finished job has no hung ranks
    assert m.header.elapsed(T0 + 5000) == 1001


def test_state_replicas_and_version() -> None:
    m = MonitorModel(JobHeader(name="j"))
    v = m.version
    m.set_state("Pending", T0)
    assert m.version == v  # no change, no redraw
    m.set_state("Running", T0 + 5)
    m.set_replicas([ReplicaStatus("j-worker-0", "Running", 0, "node-a", last_event="Started")])
    m.set_replicas([ReplicaStatus("j-worker-0", "Running", 0, "node-a", last_event="Started")])
    assert m.version == v + 2
    assert m.header.start_time == T0 + 5
    m.set_state("Failed", T0 + 9, "exit code 1")
    assert m.header.finished
    assert m.header.elapsed(T0 + 100) == 4
    m.set_header(image_digest="sha256:abc")
    assert m.header.image_digest == "sha256:abc"


def test_single_node_jobs_show_no_network_transport() -> None:
    # NCCL 2.28 on one H100 node: it loads the socket plugin but moves no byte over it
    lines = (NCCL / "nccl228_no_ib_h100.log").read_text().splitlines()
    one = MonitorModel(JobHeader(name="one", shape=JobShape(nodes=1)), rdma_requested=True)
    two = MonitorModel(JobHeader(name="two", shape=JobShape(nodes=2)), rdma_requested=True)
    for m in (one, two):
        for line in lines:
            m.feed_text(format_rank_line(0, line), T0 + 1)
            assert m.transport is None or not m.transport.rdma  # never "InfiniBand" meanwhile
    assert one.transport is None
    assert one.alerts() == []
    assert one.transports["rank0"].kind == "socket"  # what NCCL loaded is still recorded
    assert two.transport is not None
    assert two.transport.describe() == "NET/Socket (TCP sockets)"
    assert [a.code for a in two.alerts()] == ["rdma-fallback"]


def test_a_recreated_pod_seen_first_while_initializing_is_said_to_restart_for_its_cause() -> None:
    """The operator made rank 1's pod anew after it was killed (exit 137); the watch may see
    the new pod while its container still waits (PodInitializing): the alert still says why
    it restarted, not the state it is in."""
    from jupyter_ktrain.backends.kubernetes.status.derive import build_status
    from jupyter_ktrain.words import replica_row

    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "kill-rank"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 1}}},
        "status": {"conditions": [{"type": "Running", "status": "True"}]},
    }
    waiting = {
        "metadata": {"name": "kill-rank-worker-0"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "PodInitializing"}},
                }
            ],
        },
    }
    pods = {"kill-rank-worker-0": waiting}
    status = build_status(
        job,
        pods,
        {},
        {},
        {},
        recreations={"kill-rank-worker-0": 1},
        last_exits={"kill-rank-worker-0": (137, "Error")},
    )
    m = _model()
    m.set_replicas([replica_row(r) for r in status.replicas], T0, max_restarts=3)
    texts = [a.message for a in m.alerts()]
    assert any(
        "kill-rank-worker-0 restarted after exit 137, killed by signal 9 (SIGKILL)" in t
        and "(restart 1 of at most 3)" in t
        for t in texts
    ), texts


def test_a_pod_the_operator_deleted_as_the_job_ended_reads_as_its_ranks_ended() -> None:
    """cleanPodPolicy Running: the master's success ends the job and the operator deletes the
    worker's pod before the kubelet said it ended. The replica is not "NotCreated": as its rank
    reported exit 0, it succeeded and its pod was deleted; one whose rank never said reads
    Deleted, with why."""
    from jupyter_ktrain.backends.kubernetes.status.derive import build_status
    from jupyter_ktrain.jobs import complete_exit_codes

    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "ended"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}},
        "status": {"conditions": [{"type": "Succeeded", "status": "True"}]},
    }

    def pod(name: str, phase: str, code: int | None) -> dict[str, object]:
        state = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
        return {
            "metadata": {"name": name},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "state": state}]},
        }

    pods = {"ended-master-0": pod("ended-master-0", "Succeeded", 0)}
    deleted = {n: pod(n, "Running", None) for n in ("ended-worker-0", "ended-worker-1")}
    exits = {0: (1, 0), 1: (2, 0)}  # rank 2 (worker 1) never reported
    # worker 0 as the kubelet last said: its agent stopped by SIGTERM after its rank ended
    deleted["ended-worker-0"] = pod("ended-worker-0", "Failed", 143)
    status = complete_exit_codes(build_status(job, pods, {}, exits, {}, deleted=deleted), 1)
    by_name = {r.name: r for r in status.replicas}
    w0, w1 = by_name["ended-worker-0"], by_name["ended-worker-1"]
    assert (w0.phase, w0.exit_code, w0.node, w0.deleted) == ("Succeeded", 0, "node-1", True)
    assert w0.last_event == "its ranks ended (exit 0), then its pod was deleted as the job ended"
    assert (w1.phase, w1.exit_code) == ("Deleted", None)
    assert w1.last_event == "its pod was deleted while it still ran, as the job ended"
    # while the job runs, a deleted pod is one the operator makes anew: not shown as deleted
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    running = build_status(job, pods, {}, exits, {}, deleted=deleted)
    assert {r.name: r.phase for r in running.replicas}["ended-worker-0"] == "NotCreated"


def _metric(m: MonitorModel, rank: int, step: int, loss: float, now: float) -> None:
    rec = {"type": "metric", "rank": rank, "step": step, "loss": loss}
    m.feed_text(format_rank_line(rank, format_record(rec)), now, node=rank // 2)


def test_a_resumed_run_continues_the_series_from_its_checkpoint_without_repeats() -> None:
    m = _model()
    for step in range(8):  # the first run: checkpoint at step 5, killed after step 7
        for rank in range(4):
            _metric(m, rank, step, 10.0 - step, T0 + step)
    # the restarted ranks: rank 2 reports before rank 0's resume record comes (another node)
    _metric(m, 2, 6, 4.4, T0 + 20)
    resume = {"type": "resume", "rank": 0, "step": 5, "file": "step-5.pt", "world_size": 4}
    m.feed_text(format_rank_line(0, format_record(resume)), T0 + 20.1, node=0)
    for step in range(6, 10):
        for rank in (0, 1, 3) if step == 6 else range(4):
            _metric(m, rank, step, 5.0 - step / 10, T0 + 20 + step)
    for rank in range(4):
        xs, ys = m.metrics[(rank, "loss")].points()
        assert xs == [float(s) for s in range(10)], rank  # every step once
        assert ys[:6] == [10.0 - s for s in range(6)]  # the first run's, up to the checkpoint
        assert ys[6:] == [5.0 - s / 10 for s in range(6, 10)]  # then the resumed run's
    assert [(k.x, k.text) for k in m.markers] == [(5.0, "resumed from step 5")]
    (alert,) = m.alerts()
    assert (alert.code, alert.message) == ("resume", "resumed from step 5 (checkpoint step-5.pt)")


def test_a_restart_without_a_checkpoint_starts_the_series_over_with_a_marker() -> None:
    m = _model()
    for step in (0, 1, 2, 0, 1):
        _metric(m, 0, step, float(step), T0 + step)
    assert m.metrics[(0, "loss")].points() == ([0.0, 1.0], [0.0, 1.0])
    assert [(k.x, k.text) for k in m.markers] == [(0.0, "restarted: step 0 again")]
    assert m.alerts() == []  # the replica table's restart alert says why


def test_a_resume_with_fewer_ranks_says_the_world_size_changed() -> None:
    m = _model()
    saved = {"type": "checkpoint", "rank": 0, "step": 3, "bytes": 9, "world_size": 4}
    m.feed_text(format_rank_line(0, format_record(saved)), T0, node=0)
    resume = {"type": "resume", "rank": 0, "step": 3, "file": "step-3.pt", "world_size": 2}
    m.feed_text(format_rank_line(0, format_record(resume)), T0, node=0)
    assert m.alerts()[0].message == (
        "resumed from step 3 (checkpoint step-3.pt); the world size changed from 4 to 2"
    )


def test_ray_tasks_reporting_at_once_keep_every_step_in_order_without_a_restart() -> None:
    # a RayJob's tasks report as the driver (rank 0), in whatever order they finish
    m = MonitorModel(JobHeader(name="ray", shape=JobShape(kind="RayJob")))
    m.set_state("Running", T0)
    # step 1 is reported again last: the later value replaces the first
    for step, loss in ((1, 1.0), (0, 0.0), (2, 2.0), (1, 11.0)):
        _metric(m, 0, step, loss, T0 + step)
    assert m.metrics[(0, "loss")].points() == ([0.0, 1.0, 2.0], [0.0, 11.0, 2.0])
    assert m.markers == []  # no restart is read into it

"""The nodes' word (:mod:`jupyter_ktrain.pod.agent.peers`): a node's bug stops every other
node, which then exits PEER_FAILED (not restarted); and the PyTorchJob, XGBoostJob and TFJob
that rely on it are made with cleanPodPolicy None (no pod, no log, deleted as the job ends), the
other kinds with Running (a failed job keeps no pod running). Loopback sockets and threads, no
processes."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import replace

import pytest

from jupyter_ktrain.backends.kubernetes.plans.builders import clean_pod_policy, stops_itself
from jupyter_ktrain.backends.kubernetes.plans.manifests import CodeSource, render
from jupyter_ktrain.pod.agent.peers import PEERS_ENV, Peers, parse_word, peers_address
from jupyter_ktrain.pod.agent.runner import _told
from jupyter_ktrain.pod.exits import PEER_FAILED, PEER_LOST
from jupyter_ktrain.pod.ranks import node_index
from jupyter_ktrain.spec.job import Elastic, JobSpec, RunPolicy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Node:
    """One node's Peers and what its ``on_stop`` was told."""

    def __init__(self, node: int, port: int) -> None:
        self.told: list[tuple[int, int]] = []
        self.event = threading.Event()
        self.peers = Peers(node, ("127.0.0.1", port), self._stop)

    def _stop(self, node: int, code: int) -> None:
        self.told.append((node, code))
        self.event.set()


@pytest.fixture
def three_nodes():  # type: ignore[no-untyped-def]
    port = _free_port() - 1  # peers_address adds 1 to MASTER_PORT; Peers takes the port itself
    nodes = [_Node(i, port + 1) for i in range(3)]
    nodes[0].peers.start()
    for n in nodes[1:]:
        n.peers.start()
        _linked(n)
    _linked(nodes[0], count=2)  # node 0 took both links
    yield nodes
    for n in nodes:
        n.peers.close()


def _linked(node: _Node, timeout: float = 5.0, count: int = 1) -> None:
    """Wait until a worker's link to node 0 is up (node 0: until it has ``count`` links)."""
    import time

    deadline = time.monotonic() + timeout
    while len(node.peers._conns) < count:
        assert time.monotonic() < deadline, "no link to node 0"
        time.sleep(0.01)


def test_a_workers_bug_stops_every_other_node_and_not_itself(three_nodes) -> None:  # type: ignore[no-untyped-def]
    master, bad, other = three_nodes
    for n in (bad, other):
        _linked(n)
    bad.peers.ended(1)
    assert master.event.wait(5)
    assert other.event.wait(5)
    assert master.told == [(1, 1)]
    assert other.told == [(1, 1)]
    assert bad.told == []
    assert master.peers.stopped_by == other.peers.stopped_by == (1, 1)
    master.peers.ended(1)  # a second word changes nothing: the first failure stopped the job
    assert master.told == [(1, 1)]


def test_the_masters_bug_stops_the_workers(three_nodes) -> None:  # type: ignore[no-untyped-def]
    master, one, two = three_nodes
    for n in (one, two):
        _linked(n)
    master.peers.ended(2)
    assert one.event.wait(5)
    assert two.event.wait(5)
    assert one.told == two.told == [(0, 2)]
    assert master.told == []  # its own bug: nothing to stop


def test_a_node_that_links_after_the_word_still_gets_it() -> None:
    port = _free_port()
    master = _Node(0, port)
    master.peers.start()
    try:
        master.peers._stop(3, 1, tell=True)  # node 3's word came first
        late = _Node(1, port)
        late.peers.start()
        assert late.event.wait(5)
        assert late.told == [(3, 1)]
        late.peers.close()
    finally:
        master.peers.close()


def test_a_worker_alone_is_never_stopped_and_waits_only_so_long() -> None:
    lonely = _Node(1, _free_port())  # nothing listens there
    lonely.peers.start()
    try:
        lonely.peers.ended(1)  # no one to tell: no error
        assert lonely.peers.wait_for_word(0.2) is None
        assert lonely.told == []
    finally:
        lonely.peers.close()


def test_the_verdict_with_the_word(three_nodes) -> None:  # type: ignore[no-untyped-def]
    master, bad, other = three_nodes
    for n in (bad, other):
        _linked(n)
    # a bug is told to the others and stays the node's own code
    assert _told(bad.peers, 1, "rank 2 failed") == (1, "rank 2 failed")
    assert other.event.wait(5)
    # a node stopped by it, or whose peer was lost, exits PEER_FAILED: not restarted
    code, why = _told(other.peers, 143, "stopped")
    assert code == PEER_FAILED
    assert "node 1 failed with exit code 1" in why
    assert _told(master.peers, PEER_LOST, "lost")[0] == PEER_FAILED
    # a node whose ranks all ended well keeps its 0
    assert _told(other.peers, 0, "") == (0, "")


def test_a_lost_peer_with_no_word_stays_restartable(monkeypatch: pytest.MonkeyPatch) -> None:
    import jupyter_ktrain.pod.agent.peers as peers

    monkeypatch.setattr(peers, "NEWS_S", 0.1)
    lonely = _Node(1, _free_port())
    lonely.peers.start()
    try:
        assert _told(lonely.peers, PEER_LOST, "lost") == (PEER_LOST, "lost")
    finally:
        lonely.peers.close()


def test_the_word_is_on_only_where_the_builder_turned_it_on() -> None:
    env = {"MASTER_ADDR": "j-master-0", "MASTER_PORT": "23456"}
    assert peers_address(env) is None
    assert peers_address({**env, PEERS_ENV: "1"}) == ("j-master-0", 23457)
    assert peers_address({PEERS_ENV: "1"}) is None  # no Master to reach
    # a TFJob's replicas have only TF_CONFIG: node 0 is its chief
    cluster = {"worker": ["j-worker-0.ns.svc:2222"], "chief": ["j-chief-0.ns.svc:2222"],
               "ps": ["j-ps-0.ns.svc:2222"]}  # fmt: skip
    tf = {"cluster": cluster, "task": {"type": "ps", "index": 0}}
    tf_env = {PEERS_ENV: "1", "TF_CONFIG": json.dumps(tf)}
    assert peers_address(tf_env) == ("j-chief-0.ns.svc", 2223)
    assert node_index(tf_env) == 2  # after the chief and the worker
    assert peers_address({**tf_env, "TF_CONFIG": "{not json"}) is None
    assert parse_word(b"stop 1 3\n") == ("stop", 1, 3)
    assert parse_word(b"GET / HTTP/1.1\r\n") is None
    assert parse_word(b"failed x 1") is None


def _env(job: dict, replica: str = "Master") -> dict[str, str]:  # type: ignore[type-arg]
    key = {"XGBoostJob": "xgbReplicaSpecs", "TFJob": "tfReplicaSpecs"}.get(
        job["kind"], "pytorchReplicaSpecs"
    )
    container = job["spec"][key][replica]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@pytest.mark.parametrize("kind", ["PyTorchJob", "XGBoostJob", "TFJob"])
def test_a_job_with_a_head_keeps_its_pods_and_its_nodes_stop_each_other(kind: str) -> None:
    ps = 1 if kind == "TFJob" else 0  # a TFJob's parameter servers are nodes of the word too
    spec = JobSpec(name="k", kind=kind, nodes=2, backend="kubernetes", image="py:3", ps_replicas=ps)
    job = render(spec, CodeSource()).objects[-1]
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "None"
    head = "Chief" if kind == "TFJob" else "Master"
    for replica in (head, "Worker", "PS") if kind == "TFJob" else (head, "Worker"):
        assert _env(job, replica)[PEERS_ENV] == "1", replica
    # what the user asks for wins
    asked = spec.evolve(run_policy=replace(spec.run_policy, clean_pod_policy="Running"))
    assert clean_pod_policy(asked) == "Running"


@pytest.mark.parametrize(
    "spec",
    [
        JobSpec(name="k", kind="MPIJob", nodes=2, backend="kubernetes", image="py:3"),
        JobSpec(name="k", nodes=2, backend="kubernetes", image="py:3", elastic=Elastic(1, 2)),
        JobSpec(name="k", nodes=2, backend="kubernetes", image="py:3", warm=True),
        JobSpec(
            name="k",
            nodes=2,
            backend="kubernetes",
            image="py:3",
            run_policy=RunPolicy(restart_policy="OnFailure"),
        ),
    ],
    ids=["mpijob", "elastic", "warm", "on-failure"],
)
def test_other_jobs_keep_running_as_their_clean_up(spec: JobSpec) -> None:
    assert not stops_itself(spec)
    job = render(spec, CodeSource()).objects[-1]
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"


def test_a_fault_elsewhere_wakes_a_node_that_lost_its_peer_and_it_stays_restartable(
    three_nodes,
) -> None:  # type: ignore[no-untyped-def]
    import time

    master, deleted, other = three_nodes
    for n in (deleted, other):
        _linked(n)
    # node 1's pod was deleted (SIGTERM from outside: 143): it keeps its code, says so
    assert _told(deleted.peers, PEER_LOST, "stopped from outside", outside=True)[0] == PEER_LOST
    # the nodes that lost it as a peer hear of the fault: no wait, restartable, never stopped
    began = time.monotonic()
    assert _told(master.peers, PEER_LOST, "lost") == (PEER_LOST, "lost")
    assert _told(other.peers, PEER_LOST, "lost") == (PEER_LOST, "lost")
    assert time.monotonic() - began < 2
    assert master.told == other.told == []


def test_a_node_that_only_lost_a_peer_says_nothing(three_nodes, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import jupyter_ktrain.pod.agent.peers as peers

    monkeypatch.setattr(peers, "NEWS_S", 0.3)
    master, one, two = three_nodes
    for n in (one, two):
        _linked(n)
    assert _told(one.peers, PEER_LOST, "lost") == (PEER_LOST, "lost")  # waited, no word came
    # and its silence did not wake the others: node 2 still waits for node 1's real word
    assert master.peers._word_at is None
    assert two.peers._word_at is None


def test_a_node_still_running_after_the_masters_success_is_stopped(
    three_nodes, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    import jupyter_ktrain.pod.agent.peers as peers

    monkeypatch.setattr(peers, "LINGER_S", 0.2)
    master, one, two = three_nodes
    for n in (one, two):
        _linked(n)
    assert _told(master.peers, 0, "") == (0, "")  # node 0 succeeded: the job has ended
    assert one.event.wait(5)
    assert two.event.wait(5)
    assert one.told == two.told == [(0, 0)]
    code, why = _told(one.peers, 143, "")
    assert code == 143  # the job has ended: nothing restarts it
    assert "after node 0 succeeded" in why

"""Jobs on a real node: the kubelet of the cluster's release, containerd 2.x and Debian's runc,
kube-proxy and CoreDNS (``tests/cluster/realnode.py``), running the image our packager makes
(a code layer appended to a debootstrap Debian + Python base, ``tests/cluster/node_images.py``).
Every job here tolerates the node's taint and selects its label; everything is read back with
kubectl. The node starts once for this module; its last test stops it and checks that this
machine is left as it was found."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("kubernetes")

from tests.cluster import realnode
from tests.cluster.node_host import machine_state
from tests.cluster.realnode import LABEL, RealNode
from tests.notebook_cells import reported

from .k8s_helpers import configured_shell, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.cluster]
TORCH_DISK = 12 << 30  # the torch base pushed (4.6 GB) and unpacked on the node (4.6 GB), and room
ON_NODE = f"--node-selector {LABEL}=true --toleration {LABEL}=true:NoSchedule"

CELLS = """
import os, sys, time, signal

def where():
    print(f"interpreter {sys.executable} {sys.version.split()[0]}", flush=True)
    return sys.executable

def limits():
    st = os.statvfs("/dev/shm")
    print(f"shm bytes {st.f_blocks * st.f_frsize}", flush=True)
    with open("/proc/self/status") as f:
        eff = int(next(ln for ln in f if ln.startswith("CapEff:")).split()[1], 16)
    print(f"IPC_LOCK {bool(eff >> 14 & 1)}", flush=True)

def hog():
    print("allocating", flush=True)
    held = []
    while True:
        held.append(bytearray(8 << 20))
        time.sleep(0.005)

def wait_here(seconds):
    time.sleep(seconds)

def stall():
    print("stalling", flush=True)
    wait_here(600)

def graceful(path):
    def stop(signum, frame):
        print(f"got signal {signum}, saving", flush=True)
        with open(path, "w") as f:
            f.write("saved at the last step")
        print("checkpoint written", flush=True)
        signal.signal(signal.SIGTERM, previous)  # handed on, as a well-behaved handler does
        os.kill(os.getpid(), signal.SIGTERM)
    previous = signal.signal(signal.SIGTERM, stop)
    child = os.fork()
    if child == 0:  # its child outlives it: an orphan for PID 1 to reap when it exits
        if os.fork() == 0:
            time.sleep(0.5)
            os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    for i in range(3000):
        print(f"step {i}", flush=True)
        time.sleep(0.2)
"""
TORCH_CELLS = """
import torch
import torch.distributed as dist

def ranks_where():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank} interpreter {sys.executable} {sys.version.split()[0]} "
          f"torch {torch.__version__} master {os.environ['MASTER_ADDR']} sum {t.item()}",
          flush=True)
    dist.destroy_process_group()
    return t.item()
"""
RAY_CELLS = """
import os, socket, sys, time
import jupyter_ktrain as ktrain
import ray

def ray_where(n):
    ray.init()

    @ray.remote(scheduling_strategy="SPREAD")
    def where(i):
        time.sleep(1)
        ktrain.report(step=i, task=float(i))
        print(f"task {i} on {socket.gethostname()} interpreter {sys.executable} "
              f"{sys.version.split()[0]} ray {ray.__version__}", flush=True)
        return socket.gethostname()

    return sorted(ray.get([where.remote(i) for i in range(n)]))
"""
# lists the container's processes in state Z (zombies), from /proc
ZOMBIES = (
    "import glob\n"
    "for p in glob.glob('/proc/[0-9]*/stat'):\n"
    "    try: s = open(p).read()\n"
    "    except OSError: continue\n"
    "    if s.rsplit(')', 1)[1].split()[0] == 'Z': print('zombie', s[:60])\n"
    "print('listed')\n"
)


@dataclass
class NodeHandle:
    node: RealNode
    base: str  # HOST/base/debian-python:1 in the test registry
    registry: str
    before: dict[str, Any]  # machine_state() before the node started
    torch: Future[str] | None = None  # HOST/base/debian-torch:1, pushed and pulled
    torch_skip: str = ""  # why this machine cannot have it now


@pytest.fixture(scope="module")
def real_node(ktrain_cluster_session, tmp_path_factory, request) -> Iterator[NodeHandle]:  # type: ignore[no-untyped-def]
    """The node, and a registry of this module's (its GBs of torch base removed at the end)."""
    reason = realnode.unavailable()
    if reason:
        pytest.skip(reason)
    from tests.cluster.node_images import base_images

    from .registry_tools import have_registry, start_registry

    if not have_registry():
        pytest.skip("docker-registry is not installed (.ci/run installs it)")
    root = tmp_path_factory.mktemp("node-registry")
    registry = start_registry(root)
    try:
        yield from _node(ktrain_cluster_session, registry, base_images(), tmp_path_factory, request)
    finally:
        registry.stop()
        shutil.rmtree(root, ignore_errors=True)


def _node(cluster, registry, images, tmp_path_factory, request) -> Iterator[NodeHandle]:  # type: ignore[no-untyped-def]
    from tests.cluster.node_images import push_layout

    pause = push_layout(images / "pause", registry.host, "ktrain/pause", "1")
    base = push_layout(images / "debian-python", registry.host, "base/debian-python", "1")
    # the Training Operator's PyTorchJob init container image (``alpine:3.10``, its default),
    # mirrored: the Debian base has the one command it runs (nslookup)
    push_layout(images / "debian-python", registry.host, "library/alpine", "3.10")
    before = machine_state()
    workdir = tmp_path_factory.mktemp("real-node")
    node = RealNode(cluster.plane, workdir, registry.host, pause)
    node.start()
    handle = NodeHandle(node, base, registry.host, before)
    pool = ThreadPoolExecutor(1)
    free = shutil.disk_usage(workdir).free
    if free < TORCH_DISK:  # the base in the registry, and unpacked on the node
        handle.torch_skip = (
            f"the torch base needs about {TORCH_DISK >> 30} GiB of disk for this run; "
            f"{free >> 30} GiB are free"
        )
    elif any("torch_base" in getattr(i, "fixturenames", ()) for i in request.session.items):
        # the torch base (~5 GB) is pushed and pulled onto the node while the tests that need
        # no torch run: they mostly wait, and the push and the pull mostly move bytes
        handle.torch = pool.submit(_torch_base, node, registry.host)
    try:
        yield handle
    finally:
        if handle.torch is not None:
            with contextlib.suppress(Exception):
                handle.torch.result(timeout=600)
        pool.shutdown()
        node.stop()


def _torch_base(node: RealNode, host: str) -> str:
    """Build (once per machine), push and pull onto the node the torch base image."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.cluster.node_images import push_layout

    script = realnode.BUILD / "torch-image.sh"
    out = subprocess.run([str(script), sys.executable], stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"torch-image.sh failed ({out.returncode}); its lines are above")
    ref = push_layout(Path(out.stdout.strip().splitlines()[-1]), host, "base/debian-torch", "1")
    pod = _pod("pull-torch", ref, "pass")
    pods = "/api/v1/namespaces/kube-system/pods"
    node.plane.admin.create(pods, {**pod, "metadata": {"name": "pull-torch"}})
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            got = node.plane.admin.get(f"{pods}/pull-torch")
            if got.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                break
            time.sleep(1)
    finally:
        node.plane.admin.delete(f"{pods}/pull-torch")
    return ref


@pytest.fixture
def shell(test_cluster, real_node, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(CELLS, store_history=True).success
        host = real_node.registry
        sh.run_line_magic(
            "ktrain", f"config registry={host}/ktrain/code base_image={real_node.base}"
        )
        yield sh


@pytest.fixture(scope="module")
def torch_base(real_node) -> str:  # type: ignore[no-untyped-def]
    """HOST/base/debian-torch:1: the Debian + Python base with the torch the project pins
    (made once per machine from this venv's torch), pushed to the test registry and pulled
    onto the node in the background since the node started (about 70 s for ~5 GB)."""
    if real_node.torch_skip:
        pytest.skip(real_node.torch_skip)
    assert real_node.torch is not None
    return str(real_node.torch.result(timeout=600))


@pytest.fixture(scope="module")
def ray_base(real_node) -> str:  # type: ignore[no-untyped-def]
    """HOST/base/debian-ray:1: the Debian + Python base with this venv's ``ray[default]`` (its
    ``ray`` command, which KubeRay's pods run; about 280 MB), made once per machine, pushed."""
    import subprocess
    import sys
    from pathlib import Path

    from tests.cluster.node_images import push_layout

    script = realnode.BUILD / "site-image.sh"
    out = subprocess.run(
        [str(script), sys.executable, "ray[default]"], stdout=subprocess.PIPE, text=True
    )
    if out.returncode != 0:
        raise RuntimeError(f"site-image.sh failed ({out.returncode}); its lines are above")
    layout = Path(out.stdout.strip().splitlines()[-1])
    return push_layout(layout, real_node.registry, "base/debian-ray", "1")


@pytest.fixture
def plain_shell(test_cluster, real_node, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """No registry configured: the code travels in a ConfigMap, the image is used as named."""
    for sh in configured_shell(test_cluster, tmp_path, monkeypatch):
        assert sh.run_cell(CELLS, store_history=True).success
        yield sh


def _pod(name: str, image: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {LABEL: "true"},
            "tolerations": [{"key": LABEL, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": image, "command": ["python", "-c", script]}],
        },
    }


def _phase(test_cluster, pod: str) -> str:  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}")
    return str(got.stdout)


def test_node_is_real_tainted_and_pods_find_services_by_name(real_node, test_cluster):
    node = json.loads(
        test_cluster.kubectl("get", "node", real_node.node.name, "-o", "json", admin=True).stdout
    )
    info = node["status"]["nodeInfo"]
    assert info["containerRuntimeVersion"].startswith("containerd://2."), info
    assert node["spec"]["taints"] == [realnode.TAINT]
    assert node["metadata"]["labels"][LABEL] == "true"
    script = (
        "import socket, sys\n"
        "ip = socket.gethostbyname('kubernetes.default.svc.cluster.local')\n"
        "socket.create_connection((ip, 443), timeout=10).close()\n"
        "print('kubernetes at', ip, 'reached', flush=True)\n"
        "print('interpreter', sys.executable, sys.version.split()[0], flush=True)\n"
    )
    pod = _pod("probe", real_node.base, script)
    done = test_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
    assert done.returncode == 0, done.stderr
    wait_for(lambda: _phase(test_cluster, "probe") in ("Succeeded", "Failed"), timeout=90)
    logs = test_cluster.kubectl("logs", "probe").stdout
    assert _phase(test_cluster, "probe") == "Succeeded", logs
    assert "kubernetes at 10.96.0.1 reached" in logs
    assert "interpreter /usr/bin/python 3.11" in logs


def _job_pod(test_cluster, name: str) -> str:  # type: ignore[no-untyped-def]
    got = test_cluster.kubectl(
        "get", "pods", "-l", f"ktrain.io/job={name}", "-o", "jsonpath={.items[0].metadata.name}"
    )
    return str(got.stdout)


def test_tfjob_runs_on_the_images_own_interpreter_and_logs_stay(shell, test_cluster, capsys):
    job = shell.run_cell_magic(
        "ktrain", f"--kind TFJob --name real-where {ON_NODE}", "result = where()\n"
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert "interpreter /usr/bin/python 3.11" in out, out  # Debian's, not this machine's
    assert shell.user_ns["result"] == "/usr/bin/python"
    pod = _job_pod(test_cluster, "real-where")
    node = test_cluster.kubectl("get", "pod", pod, "-o", "jsonpath={.spec.nodeName}").stdout
    assert node == "real-0"
    logs = test_cluster.kubectl("logs", pod).stdout  # after the end, from the real kubelet
    assert "interpreter /usr/bin/python 3.11" in logs, logs


def test_shm_size_and_ipc_lock_as_asked(shell, test_cluster, tmp_path, capsys):
    profile = tmp_path / "lab.yaml"
    profile.write_text("name: lab\nipc_lock: true\n")
    job = shell.run_cell_magic(
        "ktrain",
        f"--kind TFJob --name real-shm --shm 96Mi --rdma {profile} {ON_NODE}",
        "limits()\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert f"shm bytes {96 << 20}" in out, out
    assert "IPC_LOCK True" in out, out


def test_over_its_memory_limit_a_rank_is_oom_killed_by_the_cgroup(shell, test_cluster):
    from jupyter_ktrain.errors import JobFailed

    with pytest.raises(JobFailed) as info:
        shell.run_cell_magic(
            "ktrain",
            f"--kind TFJob --name real-oom --memory 128Mi --memory-limit 128Mi "
            f"--restart-policy Never {ON_NODE}",
            "hog()\n",
        )
    text = str(info.value)
    pod = _job_pod(test_cluster, "real-oom")
    reason = test_cluster.kubectl(
        "get", "pod", pod, "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.reason}",
    ).stdout  # fmt: skip
    assert reason == "OOMKilled", text  # the kubelet's own reason, from the real cgroup
    assert "OOMKilled" in text, text
    assert "rank 0" in text, text
    assert "128Mi" in text, text


def test_a_wrong_image_tag_is_said_in_one_line_and_does_not_wait_for_ever(
    plain_shell, test_cluster, real_node
):
    from jupyter_ktrain.errors import KtrainError

    wrong = real_node.base.rsplit(":", 1)[0] + ":no-such-tag"
    started = time.monotonic()
    with pytest.raises(KtrainError) as info:
        plain_shell.run_cell_magic(
            "ktrain", f"--kind TFJob --name real-pull --image {wrong} {ON_NODE}", "where()\n"
        )
    text = str(info.value)
    assert time.monotonic() - started < 120
    line = next((ln for ln in text.splitlines() if "ImagePull" in ln or "ErrImage" in ln), "")
    assert line, text
    assert wrong in line, text


def test_deleting_the_job_sigterms_pid_1_which_passes_it_on_and_reaps(
    shell, test_cluster, tmp_path
):
    import subprocess

    saved = tmp_path / "ckpt"
    saved.mkdir()
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{test_cluster.namespace}-ckpt"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "hostPath": {"path": str(saved)},
            "claimRef": {"namespace": test_cluster.namespace, "name": "ckpt"},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "ckpt"},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": pv["metadata"]["name"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    made = test_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pv), admin=True)
    assert made.returncode == 0, made.stderr
    try:
        assert test_cluster.kubectl("apply", "-f", "-", stdin=json.dumps(pvc)).returncode == 0
        shell.run_cell_magic(
            "ktrain",
            f"--kind TFJob --name real-term --volume ckpt:/ckpt --detach {ON_NODE}",
            "graceful('/ckpt/saved')\n",
        )
        wait_for(lambda: _job_pod(test_cluster, "real-term"), timeout=60)
        pod = _job_pod(test_cluster, "real-term")
        wait_for(lambda: "step 5" in test_cluster.kubectl("logs", pod).stdout, timeout=90)
        listed = test_cluster.kubectl("exec", pod, "--", "python", "-c", ZOMBIES)
        assert listed.stdout.strip() == "listed", (listed.stdout, listed.stderr)
        follow = subprocess.Popen(
            [str(test_cluster.kubectl_path), "--kubeconfig", str(test_cluster.kubeconfig),
             "logs", "-f", pod], stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(0.5)
        assert test_cluster.kubectl("delete", "tfjob", "real-term", "--wait=false").returncode == 0
        tail, _ = follow.communicate(timeout=60)
        assert "got signal 15, saving" in tail, tail[-2000:]
        assert "checkpoint written" in tail, tail[-2000:]
        assert (saved / "saved").read_text() == "saved at the last step"
    finally:
        test_cluster.kubectl("delete", "pv", pv["metadata"]["name"], "--wait=false", admin=True)


def test_warm_runs_are_delivered_through_pods_exec_and_stacks_read_there(
    shell, test_cluster, capsys
):
    flags = f"--warm --nodes 1 --procs-per-node 1 --name real-warm {ON_NODE}"
    first = shell.run_cell_magic("ktrain", flags, "result = where()\n")
    assert first.state == "Succeeded", capsys.readouterr().out
    pod = _job_pod(test_cluster, "real-warm")
    second = shell.run_cell_magic("ktrain", flags, "result = where()\n")
    assert (second.run, shell.user_ns["result"]) == (2, "/usr/bin/python")
    assert _job_pod(test_cluster, "real-warm") == pod  # the same pod, the run delivered to it
    job = shell.run_cell_magic("ktrain", flags + " --detach", "stall()\n")
    wait_for(lambda: "stalling" in job.logs(), timeout=60, every=0.5)
    capsys.readouterr()
    shell.run_line_magic("ktrain", "stacks real-warm")
    out = capsys.readouterr().out
    assert "in wait_here" in out, out
    assert "in stall" in out, out
    job.cancel()


def _ranks(out: str, n: int) -> list[str]:
    return [next(ln for ln in out.splitlines() if f"rank {r} interpreter" in ln) for r in range(n)]


def test_two_node_pytorchjob_meets_through_the_master_service_name(
    shell, test_cluster, torch_base, capsys
):
    shell.run_line_magic("ktrain", f"config base_image={torch_base}")
    assert shell.run_cell(TORCH_CELLS, store_history=True).success
    job = shell.run_cell_magic(
        "ktrain",
        f"--nodes 2 --procs-per-node 1 --name real-ddp {ON_NODE}",
        "result = ranks_where()\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for line in _ranks(out, 2):  # the image's own interpreter, met at the Service's name
        assert "interpreter /usr/bin/python 3.11" in line, line
        assert "torch 2.13.0" in line, line
        assert "master real-ddp-master-0 sum 3.0" in line, line
    assert shell.user_ns["result"] == 3.0
    for pod in ("real-ddp-master-0", "real-ddp-worker-0"):  # every rank's log, after the end
        logs = test_cluster.kubectl("logs", pod).stdout
        assert "interpreter /usr/bin/python 3.11" in logs, (pod, logs[-2000:])


def test_trainjob_meets_through_jobsets_headless_service(shell, test_cluster, torch_base, capsys):
    shell.run_line_magic("ktrain", f"config base_image={torch_base}")
    assert shell.run_cell(TORCH_CELLS, store_history=True).success
    job = shell.run_cell_magic(
        "ktrain",
        f"--kind TrainJob --runtime torch-distributed --nodes 2 --procs-per-node 1 "
        f"--name real-tj {ON_NODE}",
        "result = ranks_where()\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for line in _ranks(out, 2):
        assert "interpreter /usr/bin/python 3.11" in line, line
        assert "sum 3.0" in line, line
    pods = test_cluster.kubectl(
        "get", "pods", "-l", "ktrain.io/job=real-tj", "-o", "jsonpath={.items[*].metadata.name}"
    ).stdout.split()
    assert len(pods) == 2, pods
    for pod in pods:
        assert "interpreter /usr/bin/python" in test_cluster.kubectl("logs", pod).stdout


def test_rayjob_meets_through_the_heads_service(shell, test_cluster, ray_base, capsys):
    """KubeRay's own pods on a real runtime: ``ray start`` from the image's ``ray`` command,
    the worker joins the head at its Service's name (CoreDNS, kube-proxy), the submitter's
    ``ray job submit`` reaches the head's dashboard the same way, and KubeRay probes the pods
    over HTTP because the job names its Ray (the image has no ``wget`` for the older probes)."""
    ray = pytest.importorskip("ray")
    shell.run_line_magic("ktrain", f"config base_image={ray_base}")
    assert shell.run_cell(RAY_CELLS, store_history=True).success
    job = shell.run_cell_magic(
        "ktrain", f"--kind RayJob --nodes 2 --name real-ray {ON_NODE}", "hosts = ray_where(3)\n"
    )
    out = capsys.readouterr().out
    state = test_cluster.kubectl("get", "rayjob", "real-ray", "-o", "json").stdout
    assert job.state == "Succeeded", (out[-3000:], state[-3000:])
    hosts = shell.user_ns["hosts"]  # the driver's result, from the submitter's log
    assert len(set(hosts)) == 2, (hosts, out[-3000:])  # the head's and the worker's
    # KubeRay's own pods: a head and a worker, each its own address and Ready by KubeRay's
    # probes, and KubeRay's submitter Job ran the driver
    pods = json.loads(test_cluster.kubectl("get", "pods", "-o", "json").stdout)["items"]
    ray_pods = [p for p in pods if "ray.io/node-type" in p["metadata"]["labels"]]
    assert set(hosts) <= {p["metadata"]["name"] for p in ray_pods}, (hosts, out[-3000:])
    types = sorted(p["metadata"]["labels"]["ray.io/node-type"] for p in ray_pods)
    assert types == ["head", "worker"], types
    assert all(p["status"]["containerStatuses"][0]["ready"] for p in ray_pods), ray_pods
    assert len({p["status"]["podIP"] for p in ray_pods}) == 2, [p["status"] for p in ray_pods]
    assert any("job-name" in p["metadata"]["labels"] for p in pods), [p["metadata"] for p in pods]
    assert "Ray dashboard: http://real-ray-" in out, out[
        -3000:
    ]  # the head Service's, as KubeRay says
    # a report from inside a task is the driver's record (Ray's prefix read through)
    values = sorted(v for vs in reported(job, "task").values() for v in vs)
    assert values == [0.0, 1.0, 2.0], (values, out[-3000:])
    tasks = [ln for ln in out.splitlines() if "task " in ln and " interpreter " in ln]
    assert len(tasks) == 3, out[-3000:]
    for line in tasks:  # Debian's Python, with the image's Ray (not this machine's)
        assert re.search(rf"interpreter /usr/bin/python3? 3\.11\.\d+ ray {ray.__version__}$", line)
    assert json.loads(state)["spec"]["rayClusterSpec"]["rayVersion"], state[-2000:]
    # the driver's output stays in the submitter's log after the Ray cluster is gone
    logs = test_cluster.kubectl("logs", "-l", "ktrain.io/job=real-ray", "--tail", "-1").stdout
    assert "task 0 on " in logs, logs[-2000:]


def test_stop_leaves_the_machine_as_found(real_node):
    """Last: the node stops (its processes, cgroups, veth, namespaces with their mounts,
    iptables rules and sockets) and this machine reads as it did before it started."""
    real_node.node.stop()
    deadline = time.monotonic() + 10
    while machine_state() != real_node.before and time.monotonic() < deadline:
        time.sleep(0.5)
    after = machine_state()
    changed = {k: (real_node.before[k], after[k]) for k in after if after[k] != real_node.before[k]}
    assert not changed

"""Real jobs on the test cluster through the kubernetes backend, driven by %%ktrain in an
IPython shell configured with %ktrain config (kubeconfig of the test cluster)."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from .k8s_helpers import configured_shell

pytestmark = pytest.mark.slow


@pytest.fixture
def k8s_shell(test_cluster, tmp_path, monkeypatch):
    yield from configured_shell(test_cluster, tmp_path, monkeypatch)


def test_two_by_two_configmap_route_logs_state_and_result(k8s_shell, test_cluster, capsys):
    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 2 --procs-per-node 2 --image local/python --name ddp-cm",
        "result = train(10)\n",
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for rank in range(4):
        assert f"[rank{rank}]: rank {rank} of 4 sum 10.0" in out
    assert k8s_shell.user_ns["result"] == 100.0
    assert job.result == 100.0
    cm = test_cluster.kubectl("get", "configmap", "ddp-cm-code", "-o", "json")
    assert cm.returncode == 0, cm.stderr
    import json

    owners = json.loads(cm.stdout)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("PyTorchJob", "ddp-cm")]


def _free(path) -> bool:  # type: ignore[no-untyped-def]
    return not path.exists() or (path.is_dir() and not any(path.iterdir()))


class _Puller:
    """The test cluster's puller, except that a top-level image directory is also mounted over
    an empty host directory (the one the kubelet made as a mount point for an earlier pod)."""

    def __new__(cls, registry: str, cache):  # type: ignore[no-untyped-def]
        from tests.cluster.images import Puller

        class Mounting(Puller):
            def image(self, ref):  # type: ignore[no-untyped-def]
                from pathlib import Path

                img = super().image(ref)
                if img.rootfs is not None:
                    img.mounts = [
                        (p, "/" + p.name)
                        for p in sorted(img.rootfs.iterdir())
                        if p.is_dir()
                        and (
                            not Path("/" + p.name).exists() or not any(Path("/" + p.name).iterdir())
                        )
                    ]
                return img

        return Mounting(registry, cache)


@pytest.fixture
def cluster_registry(test_cluster, registry, tmp_path):
    """The test cluster's kubelet pulls code layers from the real registry fixture; the base
    image's PATH finds this Python (its layers stand in for an OS with torch)."""
    import sys
    from pathlib import Path

    from .registry_tools import push_base_image

    kubelet = test_cluster.cluster.kubelet
    old = kubelet.puller
    kubelet.puller = _Puller(f"http://{registry.host}", tmp_path / "images")
    venv_bin = str(Path(sys.executable).parent)
    push_base_image(
        registry.host,
        "base/py",
        [{"/etc/base-release": b"py-base 1\n"}],
        tag="1",
        env=[f"PATH={venv_bin}:/usr/local/bin:/usr/bin:/bin"],
    )
    yield registry
    kubelet.puller = old


def test_two_by_two_registry_route_pins_digest(k8s_shell, test_cluster, cluster_registry, capsys):
    host = cluster_registry.host
    k8s_shell.run_line_magic(
        "ktrain", f"config registry={host}/ktrain/code base_image={host}/base/py:1"
    )
    job = k8s_shell.run_cell_magic(
        "ktrain", "--nodes 2 --procs-per-node 2 --name ddp-reg", "result = train(3)\n"
    )
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    for rank in range(4):
        assert f"[rank{rank}]: rank {rank} of 4 sum 10.0" in out
    assert k8s_shell.user_ns["result"] == 30.0
    # the master's pod: the operator's cleanPodPolicy (Running) deletes a worker still running
    # when the master's success ends the job
    pod = test_cluster.kubectl(
        "get", "pod", "ddp-reg-master-0", "-o", "jsonpath={.spec.containers[0].image}"
    )
    assert pod.stdout.startswith(f"{host}/ktrain/code@sha256:"), pod.stdout
    assert test_cluster.kubectl("get", "configmap", "ddp-reg-code").returncode != 0


def test_reattach_from_fresh_shell_then_delete_leaves_nothing(k8s_shell, test_cluster, capsys):
    from .k8s_helpers import make_shell

    job = k8s_shell.run_cell_magic(
        "ktrain",
        "--nodes 2 --procs-per-node 1 --image local/python --name again --detach",
        "numbered(30, 0.1)\n",
    )
    assert job.state in ("Pending", "Running")
    fresh = make_shell(test_cluster)  # a new kernel: only %ktrain config survives (on disk)
    capsys.readouterr()
    fresh.run_line_magic("ktrain", "list")
    assert "again" in capsys.readouterr().out
    attached = fresh.run_line_magic("ktrain", "attach again")
    out = capsys.readouterr().out
    assert attached.state == "Succeeded", out
    for rank in range(2):
        got = [line for line in out.splitlines() if line.startswith(f"[rank{rank}]: line ")]
        assert got == [f"[rank{rank}]: line {i}" for i in range(30)], out
    fresh.run_line_magic("ktrain", "delete again")
    for kind in ("pytorchjobs", "pods", "configmaps", "services"):
        left = test_cluster.kubectl("get", kind, "-l", "ktrain.io/job=again", "-o", "name")
        assert left.returncode == 0, left.stderr
        assert left.stdout.strip() == "", (kind, left.stdout)
    assert test_cluster.kubectl("get", "configmap", "again-code").returncode != 0
    assert "again" not in test_cluster.kubectl("get", "pods", "-o", "name").stdout


def test_each_submit_renders_its_objects_once_on_either_route(
    k8s_shell, test_cluster, cluster_registry, monkeypatch, capsys
):
    """The dry run renders the objects; the submit creates exactly those: nothing is
    rendered again after the code image is pushed (its digest is pinned into a new plan)."""
    from jupyter_ktrain.backends.kubernetes.plans import manifests

    rendered: list[str] = []
    real = manifests.job_objects

    def counted(spec, *args, **kwargs):  # type: ignore[no-untyped-def]
        rendered.append(spec.name)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(manifests, "job_objects", counted)
    job = k8s_shell.run_cell_magic(
        "ktrain", "--image local/python --name once-cm", "result = train(1)\n"
    )
    assert job.state == "Succeeded", capsys.readouterr().out
    assert rendered == ["once-cm"]

    host = cluster_registry.host
    k8s_shell.run_line_magic(
        "ktrain", f"config registry={host}/ktrain/code base_image={host}/base/py:1"
    )
    job = k8s_shell.run_cell_magic("ktrain", "--name once-reg", "result = train(2)\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded", out
    assert rendered == ["once-cm", "once-reg"]
    digest = job.plan.request.image_digest
    assert digest is not None
    assert digest.startswith("sha256:")
    assert set(digest[7:]) != {"0"}  # the pushed image's, not the dry run's placeholder
    pods = test_cluster.kubectl(
        "get", "pods", "-l", "ktrain.io/job=once-reg", "-o",
        "jsonpath={.items[*].spec.containers[0].image}",
    )  # fmt: skip
    assert pods.stdout.split() == [f"{host}/ktrain/code@{digest}"], pods.stdout
    assert "0" * 64 in job.plan.describe()  # what the dry run showed, kept as it was
    from jupyter_ktrain.monitor.live import model_for

    assert model_for(job).header.image_digest == digest  # what the monitor's header shows

"""Ranks started by mpirun (MPIJob): the env:// variables from Open MPI's, rank 0's address as
the launcher finds it, and one agent per rank that samples GPUs once per pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_ktrain.pod import mpi
from jupyter_ktrain.pod.launch import node_command

HOSTFILE = "job-worker-0 slots=2\n# a comment\n\njob-worker-1 slots=2\n"


def ompi(rank: int, size: int, local: int, local_size: int) -> dict[str, str]:
    return {
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": str(size),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
    }


def test_a_rank_of_mpirun_gets_what_env_init_needs() -> None:
    assert mpi.torch_env(ompi(3, 4, 1, 2), HOSTFILE) == {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "job-worker-0",  # rank 0's host under -map-by slot
        "MASTER_PORT": "29500",
    }


def test_the_address_the_launcher_passed_wins_over_the_hostfile() -> None:
    env = {**ompi(1, 4, 1, 2), "MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "23456"}
    out = mpi.torch_env(env, HOSTFILE)
    assert out["RANK"] == "1"
    assert "MASTER_ADDR" not in out
    assert "MASTER_PORT" not in out


def test_one_host_and_no_hostfile_is_loopback_several_hosts_leave_it_unset() -> None:
    assert mpi.torch_env(ompi(1, 2, 1, 2))["MASTER_ADDR"] == "127.0.0.1"
    assert "MASTER_ADDR" not in mpi.torch_env(ompi(3, 4, 1, 2))


@pytest.mark.parametrize(
    "env",
    [
        {},  # not under mpirun
        {**ompi(1, 4, 1, 2), "RANK": "7"},  # torchrun's (or the user's) values stay
        {**ompi(1, 4, 1, 2), "WORLD_SIZE": "8"},
        {**ompi(1, 4, 1, 2), "OMPI_COMM_WORLD_LOCAL_SIZE": ""},
    ],
)
def test_nothing_changes_outside_mpirun_or_when_torch_vars_are_set(env: dict[str, str]) -> None:
    assert mpi.torch_env(env, HOSTFILE) == {}


def test_node_and_local_rank_under_map_by_slot() -> None:
    assert mpi.node_index(ompi(5, 8, 1, 4)) == 1
    assert mpi.local_rank(ompi(5, 8, 1, 4)) == 1
    assert mpi.node_index({}) is None
    assert mpi.local_rank({}) is None


def test_rank_env_reads_the_hostfile_mpirun_was_given(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text(HOSTFILE)
    env = {**ompi(2, 4, 0, 2), "OMPI_MCA_orte_default_hostfile": str(path)}
    assert mpi.rank_env(env)["MASTER_ADDR"] == "job-worker-0"


class Pods:
    """The launcher's view of the cluster through kubectl: worker pods come up over time."""

    def __init__(self, answers: list[dict[str, tuple[str, str]]]) -> None:
        self.answers = answers
        self.asked: list[list[str]] = []

    def __call__(self, names: list[str]) -> dict[str, tuple[str, str]]:
        self.asked.append(names)
        return self.answers[min(len(self.asked), len(self.answers)) - 1]


def test_launcher_waits_for_the_workers_and_passes_rank_0s_pod_ip() -> None:
    pods = Pods([
        {},
        {"job-worker-0": ("Pending", "")},
        {"job-worker-0": ("Running", "10.0.0.7"), "job-worker-1": ("Pending", "10.0.0.8")},
        {"job-worker-0": ("Running", "10.0.0.7"), "job-worker-1": ("Running", "10.0.0.8")},
    ])  # fmt: skip
    said: list[str] = []
    slept: list[float] = []
    seen = mpi.wait_for_hosts(["job-worker-0", "job-worker-1"], pods, sleep=slept.append)
    assert len(pods.asked) == 4
    assert len(slept) == 3
    assert seen["job-worker-1"] == ("Running", "10.0.0.8")
    pods.asked.clear()
    out = mpi.launcher_env(
        {}, hostfile=HOSTFILE, pods=pods, resolve=lambda _h: None, say=said.append
    )
    assert out == {"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29500"}
    assert pods.asked[0] == ["job-worker-0", "job-worker-1"]
    assert "MASTER_ADDR=10.0.0.7" in said[-1]


def test_launcher_gives_up_waiting_at_the_deadline_and_says_who_is_late() -> None:
    now = [0.0]
    pods = Pods([{"job-worker-0": ("Running", "10.0.0.7")}])
    seen = mpi.wait_for_hosts(
        ["job-worker-0", "job-worker-1"],
        pods,
        wait_s=5,
        sleep=lambda s: now.__setitem__(0, now[0] + s),
        clock=lambda: now[0],
    )
    assert "job-worker-1" not in seen
    assert 5 <= now[0] <= 6
    said: list[str] = []
    mpi.launcher_env({}, hostfile=HOSTFILE, pods=pods, say=said.append, wait_s=0)
    assert any("not running after 0s: job-worker-1" in s for s in said)


def test_launcher_does_not_wait_when_kubectl_cannot_answer() -> None:
    """No access to pods (RBAC), or no API server: say so and start mpirun, no 5-minute wait."""
    asked: list[list[str]] = []

    def forbidden(names: list[str]) -> None:
        asked.append(names)

    said: list[str] = []
    out = mpi.launcher_env(
        {}, hostfile=HOSTFILE, pods=forbidden, resolve=lambda _h: "10.0.0.9", say=said.append
    )
    assert len(asked) == 1
    assert out["MASTER_ADDR"] == "10.0.0.9"
    assert any("cannot list the worker pods" in s for s in said)


def test_launcher_without_kubectl_resolves_the_name_or_passes_it_as_is() -> None:
    out = mpi.launcher_env({}, hostfile="localhost slots=2\n", pods=None)
    assert out["MASTER_ADDR"] in ("127.0.0.1", "::1")
    out = mpi.launcher_env({}, hostfile=HOSTFILE, pods=None, resolve=lambda _h: None)
    assert out["MASTER_ADDR"] == "job-worker-0"
    env = {"MASTER_ADDR": "10.9.9.9", "MASTER_PORT": "1234"}
    assert mpi.launcher_env(env, hostfile=HOSTFILE, pods=None) == env


def test_mpirun_starts_every_rank_through_the_agent() -> None:
    argv = node_command("/ktrain", launcher="mpirun", processes=8)
    cut = argv.index("mpirun")
    launcher, ranks = argv[:cut], argv[cut:]
    assert launcher == ["python", "-m", "jupyter_ktrain.pod.agent", "--gpu-sampling", "off",
                        "--mpi-launcher", "--"]  # fmt: skip
    assert ranks[ranks.index("-np") + 1] == "8"
    assert ranks[8:12] == ["-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    rank = ranks[ranks.index("python") :]
    assert rank == ["python", "-m", "jupyter_ktrain.pod.agent", "--code-dir", "/ktrain", "--",
                    "python", "-m", "jupyter_ktrain.pod.runtime", "/ktrain/program.py"]  # fmt: skip


def test_rank_env_reads_open_mpi_5s_hostfile_variable(tmp_path: Path) -> None:
    path = tmp_path / "hostfile"
    path.write_text(HOSTFILE)
    env = {**ompi(2, 4, 0, 2), "PRTE_MCA_prte_default_hostfile": str(path)}
    assert mpi.rank_env(env)["MASTER_ADDR"] == "job-worker-0"


def _env(flags: str) -> tuple[dict[str, str], set[str]]:
    from jupyter_ktrain.backends.kubernetes.plans.builders import mpijob
    from jupyter_ktrain.backends.kubernetes.plans.podtemplate import CodeSource
    from jupyter_ktrain.flags import parse_flags, spec_from_args

    spec = spec_from_args(parse_flags(f"--kind MPIJob --nodes 2 --image py:3 {flags}"))
    job = mpijob(spec, CodeSource(), {})
    launcher = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    names = [e["name"] for e in launcher["env"]]
    assert len(names) == len(set(names))
    return {e["name"]: e.get("value", "") for e in launcher["env"]}, {
        e["name"] for e in worker.get("env", [])
    }


def test_the_launcher_gives_open_mpi_5_the_hostfile_and_rsh_agent_under_its_names() -> None:
    env, worker = _env("")
    assert not worker & {k for k, _ in mpi.OPEN_MPI_5_ENV}  # mpirun runs on the launcher only
    # the controller sets Open MPI 4's (OMPI_MCA_orte_default_hostfile, OMPI_MCA_plm_rsh_agent)
    assert env["PRTE_MCA_prte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["PRTE_MCA_plm_ssh_agent"] == "/etc/mpi/kubexec.sh"
    # the user's --env wins, and is there once
    mine, _ = _env("--env PRTE_MCA_plm_ssh_agent=/opt/my-agent.sh")
    assert mine["PRTE_MCA_plm_ssh_agent"] == "/opt/my-agent.sh"


def test_mpirun_takes_the_long_options_open_mpi_5_reads() -> None:
    argv = node_command(launcher="mpirun", processes=4)
    assert {"--bind-to", "--map-by"} <= set(argv)
    assert not {"-bind-to", "-map-by"} & set(argv)  # a program's name to Open MPI 5

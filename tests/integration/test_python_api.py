"""``ktrain.run``/``ktrain.submit`` from a plain ``python script.py`` (a real process, no
IPython): the function travels with its helpers, class and constants; every rank's lines are
printed; rank 0's return value comes back; a failing job raises ``JobFailed``; bad options
create nothing. On the local backend and on the test cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
import jupyter_ktrain as ktrain

SCALE = 10


class Box:
    value = 2


def helper(x):
    return x * SCALE * Box.value


def train(epochs, lr=0.1):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()} sum {t.item()} lr {lr}", flush=True)
    dist.destroy_process_group()
    return helper(epochs) + t.item()


def broken(n):
    import os
    if os.environ["RANK"] == "1":
        raise ValueError(f"no data for shard {n}")
    return n


if __name__ == "__main__":
    what = sys.argv[1]
    options = json.loads(sys.argv[2])
    if what == "run":
        job = ktrain.run(train, args=(3,), kwargs={"lr": 2e-5}, **options)
        print("RESULT", json.dumps([job.name, job.state, job.result]))
    elif what == "submit":
        job = ktrain.submit(train, args=(4,), **options)
        print("SUBMITTED", job.name, flush=True)
        print("RESULT", json.dumps([job.name, job.wait(timeout=600), job.result]))
    elif what == "broken":
        try:
            ktrain.run(broken, args=(7,), **options)
        except ktrain.JobFailed as exc:
            print("FAILED", json.dumps(str(exc)))
    elif what == "bad":
        try:
            ktrain.run(train, args=(3,), **options)
        except ktrain.SpecError as exc:
            print("REFUSED", json.dumps(str(exc)))
    print("IPYTHON", "IPython" in sys.modules)
"""


def _script(tmp_path: Path) -> Path:
    path = tmp_path / "train_script.py"
    path.write_text(textwrap.dedent(SCRIPT))
    return path


def _python(
    script: Path, what: str, options: dict[str, object], timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), what, json.dumps(options)],
        cwd=script.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )


def _result(out: str, word: str = "RESULT") -> object:
    """What the script printed after ``word``, read back from JSON."""
    line = next((x for x in out.splitlines() if x.startswith(word + " ")), None)
    assert line is not None, f"no {word} line in:\n{out}"
    return json.loads(line.split(" ", 1)[1])


LOCAL = {"backend": "local", "nodes": 2, "procs_per_node": 1}


def test_run_from_a_plain_script_on_the_local_backend(tmp_path: Path) -> None:
    script = _script(tmp_path)
    done = _python(script, "run", {**LOCAL, "name": "py-run"})
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for rank in range(2):
        assert f"[rank{rank}]: rank {rank} of 2 sum 3.0 lr 2e-05" in out, out
    # train(3): helper(3) = 3 * SCALE * Box.value = 60, plus the all-reduced sum
    assert _result(out) == ["py-run", "Succeeded", 63.0]
    assert "Started 'py-run': 2 node(s) x 1 process(es) on local" in out
    assert "IPYTHON False" in out  # a script stays a script


def test_a_job_turns_the_fork_server_off_and_runs_as_before(tmp_path: Path) -> None:
    """``--env KTRAIN_FORK_SERVER=0`` (a node short of memory: the server holds about 0.4 GB
    with torch imported, ``bench/pod_memory.py``): each node says so and its ranks start as
    plain torchrun starts them; the job is the same."""
    script = _script(tmp_path)
    options = {**LOCAL, "name": "py-nofork", "env": ["KTRAIN_FORK_SERVER=0"]}
    done = _python(script, "run", options)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert _result(out) == ["py-nofork", "Succeeded", 63.0]
    said = "ranks start without a fork server (KTRAIN_FORK_SERVER=0 turns it off)"
    assert out.count(said) == 2, out  # each node's agent


def test_submit_returns_at_once_and_the_job_finishes_alone(tmp_path: Path) -> None:
    script = _script(tmp_path)
    done = _python(script, "submit", {**LOCAL, "name": "py-submit"})
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "SUBMITTED py-submit" in out
    assert "[rank0]:" not in out  # not followed: no line printed
    assert _result(out) == ["py-submit", "Succeeded", 83.0]


def test_a_failing_job_raises_and_bad_options_create_nothing(
    tmp_path: Path, ktrain_home: Path
) -> None:
    script = _script(tmp_path)
    done = _python(script, "broken", {**LOCAL, "name": "py-broken"})
    assert done.returncode == 0, done.stdout + done.stderr
    message = _result(done.stdout, "FAILED")
    assert isinstance(message, str)
    assert "rank 1" in message, message
    assert "ValueError: no data for shard 7" in message, message
    before = sorted(p.name for p in ktrain_home.rglob("*"))
    done = _python(script, "bad", {**LOCAL, "name": "py-bad", "node": 3})
    refused = _result(done.stdout, "REFUSED")
    assert "unknown option node=" in str(refused)
    assert "Did you mean nodes=?" in str(refused)
    done = _python(script, "bad", {**LOCAL, "name": "py-bad", "elastic": "two"})
    assert "--elastic" in str(_result(done.stdout, "REFUSED"))
    assert sorted(p.name for p in ktrain_home.rglob("*")) == before  # nothing was made


def test_run_from_a_plain_script_on_the_test_cluster(test_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The same script against the real API server and Training Operator: configured with the
    console script, as a user without a notebook would."""
    config = subprocess.run(
        [
            str(Path(sys.executable).parent / "ktrain"),
            "config",
            "backend=kubernetes",
            f"kubeconfig={test_cluster.kubeconfig}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert config.returncode == 0, config.stdout + config.stderr
    script = _script(tmp_path)
    options = {"name": "py-cluster", "nodes": 2, "procs_per_node": 2, "image": "local/python"}
    done = _python(script, "run", options)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    for rank in range(4):
        assert f"[rank{rank}]: rank {rank} of 4 sum 10.0 lr 2e-05" in out, out
    assert _result(out) == ["py-cluster", "Succeeded", 70.0]
    job = test_cluster.kubectl("get", "pytorchjob", "py-cluster", "-o", "json")
    assert job.returncode == 0, job.stderr
    assert json.loads(job.stdout)["metadata"]["labels"]["ktrain.io/job"] == "py-cluster"

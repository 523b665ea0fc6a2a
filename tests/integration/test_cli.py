"""The ``ktrain`` console script as a shell user meets it: shell wording, exit statuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KTRAIN = str(Path(sys.executable).parent / "ktrain")


def _run(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KTRAIN_HOME": str(home)}
    return subprocess.run([KTRAIN, *args], env=env, capture_output=True, text=True, timeout=60)


def test_exit_statuses_and_shell_wording(tmp_path: Path) -> None:
    done = _run("list", home=tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "No jobs yet on local.")
    missing = _run("status", "nope", home=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "ktrain: No local job named 'nope'. `ktrain list` shows the jobs this machine knows."
    )
    for bad in (["frobnicate"], ["logs"], ["config", "registry=::x"]):
        run = _run(*bad, home=tmp_path)
        assert run.returncode == 2, (bad, run.stderr)
        assert run.stderr.count("\n") >= 1
        assert "%ktrain" not in run.stderr, run.stderr
    assert _run(home=tmp_path).returncode == 2  # no command: the usage, as a usage error

"""Every fenced ``ktrain ...`` line of the README runs as written (from the repository root,
with a private job registry) and succeeds: a reader who copies one gets what it promises."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KTRAIN = str(Path(sys.executable).parent / "ktrain")


def readme_commands() -> list[str]:
    """``ktrain ...`` lines inside fenced code blocks of README.md (comments dropped)."""
    text = (ROOT / "README.md").read_text()
    out: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("ktrain "):
                out.append(line.split("  #", 1)[0].strip())
    return out


def test_the_readme_has_shell_examples() -> None:
    commands = readme_commands()
    assert any(c.startswith("ktrain render --name") for c in commands), commands
    assert "ktrain list" in commands


@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_as_written(command: str, tmp_path: Path) -> None:
    argv = shlex.split(command)
    env = {**os.environ, "KTRAIN_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [KTRAIN, *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "error" not in run.stderr.lower(), run.stderr
    assert "%ktrain" not in run.stdout + run.stderr  # a shell user is told shell commands

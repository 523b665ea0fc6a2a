"""A configured cluster that cannot be reached (a kubeconfig pointing at a closed local port):
`%ktrain list` in a notebook and `ktrain list` in a shell answer within seconds with one line
naming the server, the kubeconfig and the context, and still list the local jobs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from jupyter_ktrain.config import set_config
from tests.panel_jobs import run_job
from tests.unreachable import CONTEXT, closed_kubeconfig

pytestmark = pytest.mark.slow

KTRAIN = str(Path(sys.executable).parent / "ktrain")


def test_list_with_a_dead_cluster_is_one_line_and_keeps_local_jobs(
    ktrain_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_job(ktrain_home, "here", nodes=1, steps=2)
    kubeconfig, url = closed_kubeconfig(tmp_path)
    set_config(["backend=kubernetes", f"kubeconfig={kubeconfig}", f"context={CONTEXT}"])
    line = f"ktrain: kubernetes: cannot reach {url}: connection refused "
    where = f"(kubeconfig {kubeconfig}, context {CONTEXT})"

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("jupyter_ktrain")
    capsys.readouterr()
    started = time.monotonic()
    # the local jobs are listed, then the cell fails with the one line: an incomplete list
    # is not a success (Run All stops, a script sees it)
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("ktrain", "list")
    took = time.monotonic() - started
    out = capsys.readouterr().out
    assert took < 5, took
    rows = out.splitlines()
    assert rows[0].split() == ["NAME", "BACKEND", "STATE"]
    assert rows[1].split()[:3] == ["here", "local", "Succeeded"]
    [problem] = str(info.value).splitlines()
    assert problem.startswith(line), problem
    assert where in problem
    assert "Max retries" not in out + problem
    assert "HTTPSConnectionPool" not in out + problem

    # the same from a shell, worded for a shell, with a non-zero exit status
    run = subprocess.run([KTRAIN, "list"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1, run
    assert "here" in run.stdout
    assert line in run.stderr
    assert "`ktrain config kubeconfig=PATH context=NAME`" in run.stderr
    assert "%ktrain" not in run.stdout + run.stderr

"""Warnings reach the user through the same path as the logs: a local job started with
``--rdma roce`` whose NCCL reports a socket fallback (real NCCL INFO lines) gets the RDMA
warning in the cell's text view; the replicas were told RDMA was asked for."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

pytestmark = pytest.mark.slow

NCCL = Path(__file__).resolve().parents[1] / "data" / "nccl"


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("KTRAIN_HOME", str(tmp_path / "ktrain-home"))
    sh = InteractiveShell.instance()
    sh.reset(new_session=True)
    sh.extension_manager.load_extension("jupyter_ktrain")
    yield sh
    sh.reset(new_session=True)


def test_rdma_job_that_falls_back_to_sockets_is_flagged_in_the_text_view(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    fallback = (NCCL / "socket_fallback.log").read_text().splitlines()
    setup = (
        f"NCCL_LINES = {fallback!r}\n"
        "def fake_nccl():\n"
        "    import os\n"
        "    print('KTRAIN_RDMA', os.environ.get('KTRAIN_RDMA'), 'NCCL_DEBUG',"
        " os.environ.get('NCCL_DEBUG'), flush=True)\n"
        "    for line in NCCL_LINES:\n"
        "        print(line, flush=True)\n"
    )
    assert shell.run_cell(setup, store_history=True).success
    job = shell.run_cell_magic("ktrain", "--procs-per-node 2 --rdma roce", "fake_nccl()\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded"
    # the agent turned NCCL's INFO output on because the replica was told RDMA was asked for
    assert "[rank1]: KTRAIN_RDMA roce NCCL_DEBUG INFO" in out
    assert "[ktrain] NCCL transport: NET/Socket (TCP sockets)" in out
    warnings = [line for line in out.splitlines() if line.startswith("[ktrain] warning: ")]
    assert warnings, out
    assert all("RDMA was requested but NCCL on rank" in w for w in warnings)
    assert "NET/Socket" in warnings[0]


def test_without_rdma_the_same_lines_are_no_warning(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (NCCL / "socket_fallback.log").read_text().splitlines()
    setup = f"LINES = {lines!r}\ndef plain():\n    print(*LINES, sep='\\n', flush=True)\n"
    assert shell.run_cell(setup, store_history=True).success
    job = shell.run_cell_magic("ktrain", "", "plain()\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded"
    assert "[ktrain] NCCL transport: NET/Socket (TCP sockets)" in out
    assert "warning" not in out

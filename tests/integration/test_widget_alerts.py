"""What a local job's cell says about NCCL's transport (real NCCL INFO lines): ``--rdma``
locally is a note, never an RDMA warning (issue 11, D4); a two-node job shows the socket
transport; a one-node job shows none, since nothing crosses a network."""

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


def test_rdma_on_a_local_run_is_a_note_not_a_warning(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    # --rdma configures a pod's network; local nodes talk over loopback. The run says so once,
    # does not turn NCCL's debug output on, and real socket lines raise no RDMA warning.
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
    flags = "--nodes 2 --procs-per-node 1 --rdma roce"
    job = shell.run_cell_magic("ktrain", flags, "fake_nccl()\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded"
    assert "--rdma apply on --backend kubernetes only" in out
    assert "[rank1]: KTRAIN_RDMA None NCCL_DEBUG None" in out
    assert "[ktrain] NCCL transport: NET/Socket (TCP sockets)" in out  # two nodes: a network
    assert "warning" not in out


def test_without_rdma_the_same_lines_are_no_warning_and_one_node_shows_no_network(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (NCCL / "socket_fallback.log").read_text().splitlines()
    setup = f"LINES = {lines!r}\ndef plain():\n    print(*LINES, sep='\\n', flush=True)\n"
    assert shell.run_cell(setup, store_history=True).success
    job = shell.run_cell_magic("ktrain", "--nodes 2", "plain()\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded"
    assert "[ktrain] NCCL transport: NET/Socket (TCP sockets)" in out
    assert "warning" not in out
    # one node: NCCL names the network it loaded, but no byte crosses it
    job = shell.run_cell_magic("ktrain", "", "plain()\n")
    out = capsys.readouterr().out
    assert job.state == "Succeeded"
    assert f"[rank0]: {lines[-1]}" in out  # the lines came through
    assert "NCCL transport" not in out

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
from jupyter_ktrain.errors import ClusterError
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


def test_a_server_that_answered_and_drops_for_a_second_is_waited_for(tmp_path: Path) -> None:
    """An API server that restarts (its port closed for a second, as under a rolling restart
    or a busy machine's late accept) does not fail a cell that reached it before: a server
    that never answered is one line within a second, one that did gets seconds to return."""
    import http.server
    import json
    import threading

    from jupyter_ktrain.backends.kubernetes.client.kube_api import Api

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps({"kind": "NamespaceList", "items": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    def serve(port: int) -> http.server.ThreadingHTTPServer:
        http.server.ThreadingHTTPServer.allow_reuse_address = True
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Answer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    kubeconfig, url = closed_kubeconfig(tmp_path)
    kubeconfig.write_text(kubeconfig.read_text().replace("https://", "http://"))
    port = int(url.rsplit(":", 1)[1])
    server = serve(port)
    api = Api.connect(str(kubeconfig), CONTEXT)  # it probes the port
    server.shutdown()
    server.server_close()
    started = time.monotonic()
    with pytest.raises(ClusterError, match="connection refused"):
        api.get("/api/v1/namespaces")  # never answered a request: one line at once
    assert time.monotonic() - started < 1
    server = serve(port)
    assert api.get("/api/v1/namespaces")["kind"] == "NamespaceList"
    server.shutdown()
    server.server_close()
    api.close()  # the pool's kept connection is gone with the server, as on a restart
    again: list[http.server.ThreadingHTTPServer] = []
    back = threading.Timer(1.0, lambda: again.append(serve(port)))
    back.start()
    started = time.monotonic()
    try:
        assert api.get("/api/v1/namespaces")["kind"] == "NamespaceList"
    finally:
        back.join()
        for s in again:
            s.shutdown()
            s.server_close()
    assert 0.9 < time.monotonic() - started < 5

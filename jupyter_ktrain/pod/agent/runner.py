"""The per-replica runner: starts the node's command (torchrun), samples its GPUs, forwards
signals, returns the command's exit code. Everything it prints itself goes out as
``[agent]: `` lines.

Usage: ``python -m jupyter_ktrain.pod.agent [--gpu-sampling on|off|auto] [--interval S]
[--metrics-port N [--metrics-host H]] -- CMD...``

- ``--gpu-sampling auto`` (default) samples NVML when it is there and says so in one line
  otherwise; ``on`` does the same but words a missing NVML as a warning; ``off`` never loads
  NVML. Sampling runs on a thread of this process, never in the training processes.
- When RDMA is requested (``KTRAIN_RDMA`` set to a profile other than ``tcp``/``off``), the
  child gets ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=INIT,NET`` unless the user set
  ``NCCL_DEBUG``, so the monitor can read which transport NCCL picked.
- ``--metrics-port N`` (default ``$KTRAIN_METRICS_PORT``; 0 or unset: off) serves the GPU
  samples and the ranks' ``ktrain.report`` metrics for Prometheus at ``http://H:N/metrics``
  (:mod:`.metrics`; ``--metrics-host``, default ``$KTRAIN_METRICS_HOST`` or all interfaces).
  Labels: ``job`` (``$KTRAIN_JOB_NAME``), ``replica`` (``$KTRAIN_REPLICA``, else the pod's
  host name), ``node``. A port that cannot be opened is one warning; the job runs anyway.
- MPIJob: the launcher runs ``agent --mpi-launcher -- mpirun ... agent --code-dir D -- python -m
  jupyter_ktrain.pod.runtime ...``, so an agent runs where every rank runs. ``--mpi-launcher``
  waits for the hostfile's pods and sets ``MASTER_ADDR``/``MASTER_PORT`` for mpirun to pass on
  (:mod:`..mpi`). Under mpirun, the ranks of a pod install requirements one at a time (a file
  lock: the first installs, the others find them there) and only local rank 0 samples the GPUs.
- What a rank leaves running when it ends (a killed rank's DeepSpeed checkpoint writer, its
  DataLoader workers) is adopted by the agent and stopped at once (:mod:`.orphans`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import mpi
from ..exits import (
    EXIT_DIR_ENV,
    PEER_FAILED,
    PEER_LOST,
    STOP_WHY_ENV,
    node_exit,
    read_rank_codes,
    stopped_node_exit,
)
from ..protocol import format_agent_line
from ..ranks import node_index
from ..report import METRICS_UDP_ENV
from ..stacks import STACKS_DIR_ENV, stacks_dir
from .forks import FORK_SOCKET_ENV, Server, forked_command, forks_ranks, is_warm, start_server
from .metrics import MetricsEndpoint, MetricsStore, ReportListener
from .orphans import Orphans
from .peers import LINGER_S, Peers, start_peers
from .relaunch import forward_signals, relaunch_mpirun
from .rendezvous import await_store
from .sampler import Nvml, Sampler

__all__ = ["METRICS_HOST_ENV", "METRICS_PORT_ENV", "child_env", "main", "parse_args"]

METRICS_PORT_ENV = "KTRAIN_METRICS_PORT"
STOP_KILL_S = 5.0  # a node told to stop: its command's time to end on SIGTERM
METRICS_HOST_ENV = "KTRAIN_METRICS_HOST"

_NO_RDMA = ("", "tcp", "off", "none", "false", "0")


def _say(text: str) -> None:
    sys.stdout.write(format_agent_line(text) + "\n")
    sys.stdout.flush()


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise _UsageError(message)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """Split ``[options] -- CMD...``; raises ``ValueError`` with a usage message."""
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        raise ValueError("missing the node command after '--'")
    cut = argv.index("--")
    parser = _Parser(prog="python -m jupyter_ktrain.pod.agent", add_help=False)
    parser.add_argument("--gpu-sampling", choices=("on", "off", "auto"), default="auto")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--code-dir", default=None, help="install its requirements.txt first")
    parser.add_argument("--metrics-port", type=int, default=None)
    parser.add_argument("--metrics-host", default=None)
    parser.add_argument("--mpi-launcher", action="store_true", help="set MASTER_ADDR for mpirun")
    try:
        opts = parser.parse_args(argv[:cut])
    except _UsageError as exc:
        raise ValueError(str(exc)) from None
    if not opts.interval > 0:
        raise ValueError(f"--interval must be a positive number of seconds, got {opts.interval}")
    if opts.metrics_port is None:
        raw = os.environ.get(METRICS_PORT_ENV, "").strip()
        if raw and not raw.isdigit():
            raise ValueError(f"{METRICS_PORT_ENV}={raw!r} is not a port number")
        opts.metrics_port = int(raw or 0)
    if not 0 <= opts.metrics_port <= 65535:
        raise ValueError(f"--metrics-port must be 0 (off) to 65535, got {opts.metrics_port}")
    if opts.metrics_host is None:
        opts.metrics_host = os.environ.get(METRICS_HOST_ENV) or "0.0.0.0"
    return opts, argv[cut + 1 :]


def child_env(env: Mapping[str, str]) -> dict[str, str]:
    """The node command's environment: ``env`` plus NCCL debug output when RDMA is asked."""
    out = dict(env)
    if out.get("KTRAIN_RDMA", "").strip().lower() not in _NO_RDMA and "NCCL_DEBUG" not in out:
        out["NCCL_DEBUG"] = "INFO"
        out.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
    return out


@dataclass
class _Metrics:
    store: MetricsStore
    endpoint: MetricsEndpoint
    listener: ReportListener

    def stop(self) -> None:
        self.listener.stop()
        self.endpoint.stop()


def _start_metrics(port: int, host: str, env: Mapping[str, str]) -> _Metrics | None:
    """The Prometheus endpoint and the report listener, or None (off, or the port is taken)."""
    if not port:
        return None
    replica = env.get("KTRAIN_REPLICA") or env.get("HOSTNAME") or socket.gethostname()
    labels = {"job": env.get("KTRAIN_JOB_NAME", ""), "replica": replica}
    store = MetricsStore({**labels, "node": str(node_index(env))})
    try:
        endpoint = MetricsEndpoint(store, host, port).start()
    except OSError as exc:
        _say(f"warning: metrics endpoint off: cannot listen on {host}:{port} ({exc})")
        return None
    listener = ReportListener(store).start()
    _say(f"metrics for Prometheus at http://{host}:{endpoint.port}/metrics")
    return _Metrics(store, endpoint, listener)


def _start_sampler(
    mode: str,
    interval: float,
    env: Mapping[str, str],
    nvml: Nvml | None,
    store: MetricsStore | None = None,
) -> Sampler | None:
    if mode == "off" or mpi.local_rank(env) not in (None, 0):  # one sampler per pod
        return None
    prefix = "warning: " if mode == "on" else ""

    def emit(text: str) -> None:
        _say(prefix + text if text.startswith("GPU sampling off") else text)

    sampler = Sampler(
        nvml,
        interval=interval,
        node=node_index(env),
        env=env,
        emit=emit,
        on_sample=store.gpu if store is not None else None,
    )
    try:
        return sampler if sampler.start() else None
    except Exception as exc:  # never let sampling keep the job from starting
        _say(f"{prefix}GPU sampling off: {type(exc).__name__}: {exc}")
        return None


def main(
    argv: list[str],
    *,
    nvml: Nvml | None = None,
    popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen,
    adopt_orphans: bool = False,
) -> int:
    """Run ``argv`` after ``--``; exit with its code (128+signal when it was killed).
    ``adopt_orphans`` (the agent's own process: ``python -m jupyter_ktrain.pod.agent``) stops
    what a rank that ended left running (:mod:`.orphans`); a process that runs this function
    among other work (a test) must not adopt and stop its unrelated orphans."""
    try:
        opts, cmd = parse_args(argv)
    except ValueError as exc:
        sys.stderr.write(
            f"jupyter_ktrain.pod.agent: {exc}\nusage: python -m jupyter_ktrain.pod.agent "
            "[--gpu-sampling on|off|auto] [--interval SECONDS] [--code-dir DIR] "
            "[--metrics-port N] [--metrics-host HOST] [--mpi-launcher] -- CMD [ARGS...]\n"
        )
        return 2
    if opts.code_dir:
        from ..install import ensure_requirements, install_lock

        with install_lock():
            code = ensure_requirements(opts.code_dir)
        if code != 0:
            _say(f"requirements could not be installed (pip exit code {code}); not starting")
            return code
    env = child_env(os.environ)
    if env.get("NCCL_DEBUG") == "INFO" and "NCCL_DEBUG" not in os.environ:
        _say("RDMA requested: NCCL_DEBUG=INFO set so the transport can be reported")
    metrics = _start_metrics(opts.metrics_port, opts.metrics_host, os.environ)
    if metrics is not None:
        env[METRICS_UDP_ENV] = metrics.listener.address
    if opts.mpi_launcher:
        try:
            return relaunch_mpirun(cmd, env, _say, popen=popen)
        finally:
            if metrics is not None:
                metrics.stop()
    if forks_ranks(cmd) and _torch_missing(cmd[0]):
        _say(
            f"torch is not installed in this node's Python ({cmd[0]}), and torchrun, which "
            "starts the ranks, comes with it: use a base image with torch (--base-image), or "
            "`pip install torch` where the job runs; not starting"
        )
        return 1
    exit_dir = tempfile.mkdtemp(prefix="ktrain-exits-")
    env[EXIT_DIR_ENV] = exit_dir
    env[STACKS_DIR_ENV] = stacks_dir(env)  # where the ranks answer `ktrain stacks`
    orphans = Orphans(_say)
    forks = _start_forks(cmd, env)
    if forks is not None:
        orphans.keep(forks.proc.pid)
    if adopt_orphans:
        orphans.start()  # from here on, what a rank leaves running ends with it
    sys.stdout.flush()
    launch = _through_warm_server(cmd, env)
    if forks_ranks(cmd):
        await_store(env)  # torchrun's first reach for the host's store then succeeds
    child = orphans.popen(popen)(launch, env=env)
    stopped = forward_signals(lambda: child)
    peers = start_peers(_stopper(child))
    store = metrics.store if metrics is not None else None
    sampler = _start_sampler(opts.gpu_sampling, opts.interval, os.environ, nvml, store)
    try:
        code = child.wait()
    finally:
        if sampler is not None:
            sampler.stop()
        if metrics is not None:
            metrics.stop()
        if forks is not None:
            forks.stop()
        orphans.close()
    code, why = _verdict(code, exit_dir, stopped)
    if peers is not None:
        code, why = _told(peers, code, why, outside=bool(stopped))
        peers.close()
    _say(f"node command exited with code {code}" + (f": {why}" if why else ""))
    return code


def _torch_missing(python: str) -> bool:
    """Whether ``python`` (torchrun's interpreter) has no torch: looked up, not imported, when
    it is this agent's own interpreter (the usual case); another one is not asked (False)."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return False
    try:
        return importlib.util.find_spec("torch") is None
    except (ImportError, ValueError):
        return True


def _start_forks(cmd: list[str], env: dict[str, str]) -> Server | None:
    """A fork server for the ranks torchrun starts (:mod:`.forks`), its socket in ``env``;
    None for another launcher, or where a server already serves the node (the local
    supervisor's, which outlives a restart of the node)."""
    if not forks_ranks(cmd) or env.get(FORK_SOCKET_ENV):
        return None
    try:
        server = start_server(cmd[0], env)
    except OSError as exc:  # the ranks then start as they always did
        _say(f"ranks start without a fork server ({exc})")
        return None
    env[FORK_SOCKET_ENV] = server.path
    return server


def _through_warm_server(cmd: list[str], env: Mapping[str, str]) -> list[str]:
    """``cmd`` (torchrun) through the node's fork server (:func:`.forks.forked_command`):
    forked from it once it has imported torch (at once when it is warm already: a local node
    started again after a fault), so the node imports torch once, there, before its ranks fork
    from it too; run in its own process where no server listens. ``cmd`` itself for another
    launcher."""
    path = env.get(FORK_SOCKET_ENV)
    if not forks_ranks(cmd) or not path:
        return cmd
    if is_warm(path):
        _say("torchrun starts forked from the job's fork server, where the node imports torch once")
    return forked_command(cmd)


def _stopper(child: subprocess.Popen[bytes]) -> Callable[[int, int], None]:
    """What a node told that another node failed does: end its command (torchrun stops its
    ranks on SIGTERM), and kill it :data:`STOP_KILL_S` later if it still runs (a process
    waiting in C code, as XGBoost's tracker does, may not act on SIGTERM until it returns)."""

    def stop(node: int, code: int) -> None:
        if code == 0:
            _say(f"node 0 succeeded (the job has ended) {LINGER_S:.0f} s ago: stopping this node")
        else:
            _say(f"node {node} failed with exit code {code}: stopping this node, the job failed")
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            timer = threading.Timer(STOP_KILL_S, _kill_if_running, args=(child,))
            timer.daemon = True
            timer.start()

    return stop


def _kill_if_running(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        _say(f"the node's command did not end {STOP_KILL_S:.0f} s after SIGTERM: killing it")
        with contextlib.suppress(OSError):
            child.kill()


def _told(peers: Peers, code: int, why: str, outside: bool = False) -> tuple[int, str]:
    """The verdict with what the other nodes said (:mod:`.peers`): a node that failed by
    itself tells them (a bug stops them; a fault, a killed rank or the pod deleted
    (``outside``), only wakes those that lost it as a peer); one stopped by another's bug
    exits PEER_FAILED (not restarted); one that lost a peer first waits a moment for how that
    peer ended."""
    if code != PEER_LOST or outside:
        peers.ended(code)
    if 0 < code < 128 or outside:
        return code, why
    if code == PEER_LOST:
        peers.wait_for_word()
    by = peers.stopped_by
    if code == 0 or by is None:
        return code, why
    if by == (0, 0):
        return code, f"stopped {LINGER_S:.0f} s after node 0 succeeded (the job had ended)"
    return PEER_FAILED, (
        f"stopped because node {by[0]} failed with exit code {by[1]}: not restarted (the job "
        "failed)"
    )


def _verdict(child_code: int, exit_dir: str, stopped: list[int]) -> tuple[int, str]:
    """The replica's exit code: a bug < 128 (fails the job once), a fault >= 128 (restartable,
    the operator's ExitCode rule), from what its ranks left in ``exit_dir``; a node stopped
    from outside (SIGTERM: its pod deleted, preempted or evicted) exits 128 + that signal."""
    ranks = read_rank_codes(exit_dir)
    shutil.rmtree(exit_dir, ignore_errors=True)
    code, why = node_exit(child_code, ranks)
    if stopped and code:
        outside = 128 + stopped[0]
        code = stopped_node_exit(outside, list(ranks.values()))
        if code == 0:  # the master's success ended the job while this node tore down
            return 0, "stopped from outside after its ranks had all finished (exit 0)"
        if code != outside:  # its ranks had all ended: a bug's code reads as the bug
            return code, why
        name = signal.Signals(stopped[0]).name
        told = _stop_why(os.environ)
        if told:  # the stopper said why: the job's own end, not a pod taken away
            return code, f"stopped by {name}: {told}"
        why = f"stopped from outside by {name} (its pod deleted, preempted or evicted, or the "
        why += "job cancelled): restartable"
    return code, why


def _stop_why(env: Mapping[str, str]) -> str:
    """Why whoever stopped this node did (:data:`~..exits.STOP_WHY_ENV`'s file); "" when none
    said."""
    path = env.get(STOP_WHY_ENV)
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(500).strip()
    except OSError:
        return ""

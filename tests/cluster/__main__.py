"""``python -m tests.cluster --kubeconfig PATH [--registry URL]``: serve until interrupted.

The kubeconfig is the admin's (system:masters); ``--user-kubeconfig`` also writes one for the
``notebook`` service account of ``--namespace`` (a namespaced Role: what a notebook user has).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from .cluster import Cluster, Node


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__)
    p.add_argument("--kubeconfig", required=True, type=Path, help="where to write the kubeconfig")
    p.add_argument("--user-kubeconfig", type=Path, help="also write the notebook user's")
    p.add_argument("--namespace", default="ai-training", help="the notebook user's namespace")
    p.add_argument("--registry", help="registry URL the kubelet pulls image layers from")
    p.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu capacity of node-0")
    p.add_argument("--rdma", type=int, default=0, help="rdma/rdma_shared_device_a capacity")
    p.add_argument("--workdir", type=Path, help="state, logs and pod sandboxes (default: temp)")
    args = p.parse_args(argv)
    rdma = {"rdma/rdma_shared_device_a": args.rdma} if args.rdma else {}
    cluster = Cluster(args.workdir, args.registry, [Node(gpus=args.gpus, rdma=rdma)])
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    with cluster:
        cluster.admin_kubeconfig(args.kubeconfig)
        if args.user_kubeconfig:
            cluster.create_namespace(args.namespace)
            cluster.user_kubeconfig(args.user_kubeconfig, args.namespace)
        print(f"test cluster ready at {cluster.url} (kubeconfig: {args.kubeconfig})", flush=True)
        done.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

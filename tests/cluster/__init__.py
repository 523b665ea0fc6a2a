"""A protocol-faithful Kubernetes test cluster (test infrastructure, not part of the package).

``python -m tests.cluster --kubeconfig PATH`` or the ``test_cluster`` pytest fixture
(``tests/cluster/pytest_plugin.py``). Modules: ``server``/``api`` (HTTP API server),
``store`` (resourceVersions, watch, GC), ``schema`` (CRD validation and pruning),
``scheduler``, ``kubelet``/``sandbox``/``logs``/``images`` (process kubelet), ``operator``
(Kubeflow Training Operator), ``faults`` (fault injection).
"""

from .api import Rule
from .cluster import Cluster, Node

__all__ = ["Cluster", "Node", "Rule"]

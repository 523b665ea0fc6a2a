"""The test cluster (test infrastructure, not part of the package): the real Kubernetes control
plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and the real Kubeflow
controllers (Training Operator v1, Trainer v2, JobSet), built from source by ``build/build.sh``,
with our process kubelet as the only stand-in and a fault proxy in front of the API server.

``python -m tests.cluster --kubeconfig PATH`` or the ``test_cluster`` pytest fixture
(``tests/cluster/pytest_plugin.py``). Modules: ``controlplane`` (the real components),
``kubelet``/``kubelet_server``/``sandbox``/``logs``/``images`` (the process kubelet),
``proxy``/``faults`` (fault injection), ``pki``, ``rest``.
"""

from .cluster import Cluster, Node, Rule

__all__ = ["Cluster", "Node", "Rule"]

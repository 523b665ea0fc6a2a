"""Warm jobs on a cluster: ``orders.py`` (the objects a warm PyTorchJob adds, a run's order
and how it is read back), ``runs.py`` (the backend's warm verbs), ``delivery.py`` (an order
reaches the pods) and ``ledger.py`` (the order in the code ConfigMap, as the cluster tells
it)."""

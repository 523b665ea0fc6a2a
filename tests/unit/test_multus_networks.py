"""The networks a ``k8s.v1.cni.cncf.io/networks`` annotation names, in both of Multus's forms,
so preflight looks up each NetworkAttachmentDefinition where Multus would."""

from __future__ import annotations

from jupyter_ktrain.backends.kubernetes.plans.preflight import multus_networks


def test_comma_separated_names_with_namespaces_and_interfaces() -> None:
    assert multus_networks("rdma-net") == [(None, "rdma-net")]
    assert multus_networks("net-a, infra/net-b@net2,") == [(None, "net-a"), ("infra", "net-b")]


def test_json_selection_list() -> None:
    text = '[{"name": "rdma-net", "interface": "net1"}, {"name": "b", "namespace": "infra"}]'
    assert multus_networks(text) == [(None, "rdma-net"), ("infra", "b")]


def test_unreadable_json_names_nothing_to_look_up() -> None:
    assert multus_networks("[{oops") == []

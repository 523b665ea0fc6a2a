"""The API client decides what an HTTP status means, once: its verbs raise :class:`Forbidden`
(403, saying which verb on which resource in which namespace), :class:`Conflict` (409) and
:class:`Unauthorized` (401), and say "already gone" (404) themselves; every other part catches
those types and reads no status (a test reads every module for a status compared)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

import jupyter_ktrain
from jupyter_ktrain.backends.kubernetes.client.kube_api import Api
from jupyter_ktrain.backends.kubernetes.client.retries import (
    ApiFailure,
    Conflict,
    Forbidden,
    Unauthorized,
)

PACKAGE = Path(jupyter_ktrain.__file__).resolve().parent
CLIENT = "backends/kubernetes/client/"
DENIED = 'pytorchjobs.kubeflow.org is forbidden: User "ann" cannot list resource "pytorchjobs"'


def _answering(status: int, message: str = "no", reason: str = "") -> Api:
    """An Api whose server answers every request with ``status`` and a Status body."""

    def request(*_args: Any, **_kwargs: Any) -> Any:
        exc = ApiException(status=status, reason="Refused")
        exc.body = json.dumps({"kind": "Status", "message": message, "reason": reason})
        raise exc

    client = SimpleNamespace(
        update_params_for_auth=lambda *_args: None,
        configuration=SimpleNamespace(host="https://k8s"),
        rest_client=SimpleNamespace(request=request),
    )
    return Api(client, "ml", "kubeconfig k, context c")


def test_a_403_is_forbidden_naming_the_verb_the_resource_and_the_namespace() -> None:
    api = _answering(403, DENIED, "Forbidden")
    path = "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs"
    with pytest.raises(Forbidden) as info:
        api.find(path, {"labelSelector": "a=b"})
    denied = info.value
    assert (denied.verb, denied.resource, denied.namespace) == (
        "list",
        "pytorchjobs.kubeflow.org",
        "ml",
    )
    assert denied.said == DENIED
    assert denied.status == 403
    assert str(denied) == f"GET {path}: 403 {DENIED}"  # the message as before: the server's
    with pytest.raises(Forbidden) as info:
        api.delete("/api/v1/namespaces/ml/pods/p-0")
    assert (info.value.verb, info.value.resource) == ("delete", "pods")
    with pytest.raises(Forbidden) as info:
        api.items("/api/v1/nodes")
    assert (info.value.verb, info.value.resource, info.value.namespace) == ("list", "nodes", "")
    with pytest.raises(Forbidden) as info:
        list(api.logs("/api/v1/namespaces/ml/pods/p-0/log", {"follow": "true"}))
    assert (info.value.verb, info.value.resource) == ("get", "pods/log")


def test_a_409_is_a_conflict_a_401_unauthorized_and_a_404_already_gone() -> None:
    with pytest.raises(Conflict):
        _answering(409, "the object has been modified", "Conflict").replace(
            "/api/v1/namespaces/ml/configmaps/w-code", {}
        )
    with pytest.raises(Unauthorized):
        _answering(401, "Unauthorized").get("/apis/kueue.x-k8s.io/v1beta2/topologies/t")
    gone = _answering(404, "not found", "NotFound")
    assert gone.find("/api/v1/namespaces/ml/configmaps/x") is None
    assert gone.delete("/api/v1/namespaces/ml/configmaps/x") is False
    with pytest.raises(ApiFailure) as info:
        _answering(422, "invalid").create("/api/v1/namespaces/ml/configmaps", {})
    assert type(info.value) is ApiFailure
    assert not info.value.transient


# -- no part outside the client reads an HTTP status ---------------------------------------------
def _is_status(node: ast.AST) -> bool:
    """``x.status`` or ``getattr(x, "status", ...)``."""
    if isinstance(node, ast.Attribute):
        return node.attr == "status"
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and node.args[1].value == "status"
    )


def _is_code(node: ast.AST) -> bool:
    """An int literal (``403``), or a tuple, list or set of them (``(401, 403)``)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_code(e) for e in node.elts)
    return isinstance(node, ast.Constant) and type(node.value) is int


def status_reads(source: str) -> list[int]:
    """The lines of ``source`` that compare a ``status`` with an HTTP code (``exc.status ==
    403``, ``getattr(exc, "status", None) in (401, 403)``, ``409 != exc.status``)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_status(s) for s in sides) and any(_is_code(s) for s in sides):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_outside_the_client_reads_an_http_status() -> None:
    """Forbidden (403), conflict (409) and already gone (404) are decided in the client
    (``backends/kubernetes/client/``); the rest catch its types. A failure names each
    comparison (file:line)."""
    offenders = [
        f"{rel}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if not (rel := path.relative_to(PACKAGE).as_posix()).startswith(CLIENT)
        for line in status_reads(path.read_text())
    ]
    assert not offenders, "catch the client's Forbidden, Conflict, ... instead:\n" + "\n".join(
        offenders
    )


def test_the_status_check_sees_each_way_of_comparing() -> None:
    source = (
        "if exc.status != 403:\n"
        "    pass\n"
        "if getattr(exc, 'status', None) == 404:\n"
        "    pass\n"
        "x = exc.status in (401, 403)\n"
        "y = 409 == self.exc.status\n"
        "z = status.state == 'Running'\n"  # a job's status: no HTTP code
        "w = job.status == STATUS\n"  # a name, not a literal code
    )
    assert status_reads(source) == [1, 3, 5, 6]

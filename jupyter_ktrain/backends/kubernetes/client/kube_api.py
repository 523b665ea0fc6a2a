"""A thin adapter over the official ``kubernetes`` client: raw JSON requests, streams, retries.

``Api.connect(kubeconfig, context)`` loads a kubeconfig (``$KUBECONFIG``, ``~/.kube/config``)
or, inside a pod, the service account. Every request goes through
:func:`~.retries.with_retries`, the one retry policy; anything it does not retry becomes one
:class:`ClusterError` carrying the server's message. The ``kubernetes`` package is imported
only here and only when connecting.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....errors import ClusterError
from .probe import CONNECT_TIMEOUT_S, probe_server
from .retries import (
    ApiFailure,
    api_failure,
    connection_errors,
    connection_problem,
    unreachable_line,
    with_retries,
)

__all__ = [
    "Api",
    "ExecLost",
    "ExecResult",
    "WatchExpired",
    "in_cluster",
]

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster() -> bool:
    """Whether this process runs in a pod with an API token: the kubelet's
    ``KUBERNETES_SERVICE_HOST`` and the service account's projected token (a Kubeflow notebook
    pod runs as its profile's ``default-editor``)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and (SA_DIR / "token").is_file()


class WatchExpired(ClusterError):
    """A watch's ``resourceVersion`` is too old (``410 Gone``, on open or as an ERROR event):
    list the collection again and watch from there."""


class ExecLost(ClusterError):
    """A ``pods/exec`` connection that failed or dropped before the command's exit status
    came: whether the command ran, and how far, is unknown."""


def _shutdown(resp: Any) -> None:
    """End a streaming response from another thread: its blocked read returns."""
    with contextlib.suppress(Exception):  # ended already, or released to the pool
        resp.shutdown()


def _failure(exc: Any, what: str, asked: tuple[str, str, str]) -> ApiFailure:
    """An ApiFailure from the client's ApiException, with the server's Status message, typed by
    its status (:func:`~.retries.api_failure`; ``asked``: see :func:`_asked`)."""
    status = int(getattr(exc, "status", 0) or 0)
    body: dict[str, Any] = {}
    try:
        parsed = json.loads(exc.body or "{}")
        body = parsed if isinstance(parsed, dict) else {}
    except (TypeError, ValueError):
        pass
    body["_headers"] = dict(getattr(exc, "headers", None) or {})
    message = body.get("message") or getattr(exc, "reason", "") or "error"
    return api_failure(
        f"{what}: {status} {message}",
        status=status,
        asked=asked,
        said=message,
        reason=body.get("reason", ""),
        body=body,
    )


#: RBAC's verb of a request by its method, on one object (on a collection: ``_ON_ALL``)
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
_ON_ALL = {"get": "list", "delete": "deletecollection"}


def _asked(method: str, path: str, query: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """What a request asks, in RBAC's words: (verb, resource, namespace). ``GET
    /apis/kubeflow.org/v1/namespaces/ns/pytorchjobs`` asks ("list", "pytorchjobs.kubeflow.org",
    "ns"); ``GET /api/v1/namespaces/ns/pods/p/log``, ("get", "pods/log", "ns"); a
    cluster-scoped resource's namespace is "", a discovery path is its own resource."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else ("/".join(parts[1:2]), parts[3:])
    if not rest:  # discovery (/apis/GROUP/VERSION): a non-resource URL
        return "get", path, ""
    namespace = ""
    if len(rest) > 2 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    verb = _VERBS.get(method, method.lower())
    if (query or {}).get("watch"):
        verb = "watch"
    elif len(rest) < 2:
        verb = _ON_ALL.get(verb, verb)
    resource = f"{rest[0]}.{group}" if group else rest[0]
    return verb, "/".join([resource, *rest[2:3]]), namespace


class Api:
    """Raw JSON access to one cluster. ``namespace`` is the default from kubeconfig/pod."""

    def __init__(self, client: Any, namespace: str, where: str):
        self.client = client  # kubernetes.client.ApiClient
        self.namespace = namespace
        self.where = where  # "kubeconfig PATH, context NAME" or "in-cluster service account"
        self.requests = 0
        self.answered = False  # the server answered a request: a later drop is a blip

    def close(self) -> None:
        """Close this client's connections (the sockets its pool keeps alive); a later
        request opens new ones."""
        with contextlib.suppress(Exception):
            self.client.rest_client.pool_manager.clear()

    def unreachable(self, exc: BaseException) -> str:
        """The one line for a server that cannot be reached: which server, why, and which
        kubeconfig and context pointed there."""
        return unreachable_line(self.client.configuration.host, exc, self.where)

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> Api:
        """kubeconfig (file, ``$KUBECONFIG``, ``~/.kube/config``) or the in-cluster account."""
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        default = Path.home() / ".kube" / "config"
        if path is None and default.exists():
            path = str(default)
        if path is None and in_cluster():
            from kubernetes import client, config

            cfg = client.Configuration()
            config.load_incluster_config(client_configuration=cfg)
            cfg.retries = 0  # with_retries is the one retry policy
            # the pod's own namespace (a Kubeflow profile's): its account's rights are there
            ns_file = SA_DIR / "namespace"
            ns = ns_file.read_text().strip() if ns_file.is_file() else "default"
            return cls(client.ApiClient(cfg), ns, f"in-cluster service account of {ns!r}")
        if path is None:
            raise ClusterError(
                "No Kubernetes credentials: no kubeconfig and not running in a pod. Set one "
                "with `%ktrain config kubeconfig=PATH` (and context=NAME), or $KUBECONFIG."
            )
        probe_server(path, context)  # before the slow client import: an unreachable server is quick
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        try:
            contexts, active = config.list_kube_config_contexts(config_file=path)
            chosen = (
                next((c for c in contexts if c["name"] == context), None) if context else active
            )
            if context and chosen is None:
                names = ", ".join(c["name"] for c in contexts)
                raise ClusterError(
                    f"Context {context!r} is not in {path} (it has: {names}). Fix it with "
                    "`%ktrain config context=NAME`."
                )
            cfg = client.Configuration()
            cfg.retries = 0  # with_retries is the one retry policy (urllib3 would add 3 more)
            api_client = config.new_client_from_config(
                config_file=path, context=context, client_configuration=cfg
            )
        except ConfigException as exc:
            raise ClusterError(
                f"Cannot use kubeconfig {path}: {exc}. Point `%ktrain config kubeconfig=` at a "
                "working file."
            ) from None
        ns = ((chosen or {}).get("context") or {}).get("namespace") or "default"
        where = f"kubeconfig {path}, context {(chosen or {}).get('name', '?')}"
        return cls(api_client, ns, where)

    # -- requests ---------------------------------------------------------------------------
    def _raw(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Any = (CONNECT_TIMEOUT_S, 30),
        stream: bool = False,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        headers: dict[str, str] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params: list[tuple[str, Any]] = []
        self.client.update_params_for_auth(headers, params, ["BearerToken"])
        query_list = [(k, _q(v)) for k, v in (query or {}).items() if v is not None] + params
        url = self.client.configuration.host + path
        self.requests += 1
        try:
            resp = self.client.rest_client.request(
                method,
                url,
                query_params=query_list,
                headers=headers,
                body=body,
                _preload_content=False,
                _request_timeout=timeout,
            )
        except ApiException as exc:
            self.answered = self.answered or bool(exc.status)  # an HTTP status is an answer
            raise _failure(exc, f"{method} {path}", _asked(method, path, query)) from None
        self.answered = True
        return resp

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        retry: bool = True,
    ) -> Any:
        """One JSON request (retried per policy); returns the decoded body."""

        def once() -> Any:
            resp = self._raw(method, path, query, body, content_type)
            try:
                data = resp.data
            finally:
                resp.release_conn()
            return json.loads(data) if data else {}

        what = f"{method} {path}"
        if not retry:
            return once()
        return with_retries(once, what, unreachable=self.unreachable, reached=self.answered)

    # -- the verbs: "already gone" (404) is said once, here -------------------------------
    def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        """The object (or collection) at ``path``; a 404 raises (:meth:`find` says None)."""
        return self.request("GET", path, query)

    def find(self, path: str, query: Mapping[str, Any] | None = None) -> Any | None:
        """The object at ``path``, None when there is none (404)."""
        try:
            return self.get(path, query)
        except ApiFailure as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, query: Mapping[str, Any] | None = None) -> list[Any]:
        """The items of the collection at ``path`` (a list)."""
        return list(self.get(path, query).get("items") or [])

    def create(self, path: str, body: Any) -> Any:
        """POST ``body`` to the collection at ``path``; the object created."""
        return self.request("POST", path, body=body)

    def patch(self, path: str, body: Any) -> Any:
        """A JSON merge patch of the object at ``path``; the object patched."""
        return self.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def delete(self, path: str, query: Mapping[str, Any] | None = None) -> bool:
        """Delete the object at ``path``; False when it was gone already (no error)."""
        try:
            self.request("DELETE", path, query)
        except ApiFailure as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def replace(self, path: str, body: Any) -> Any:
        """PUT ``body`` over the object at ``path`` (a 409 when its resourceVersion is not the
        server's any more); the object as now."""
        return self.request("PUT", path, body=body)

    def exists(self, path: str) -> bool:
        return self.find(path) is not None

    def logs(
        self,
        path: str,
        query: Mapping[str, Any],
        read_timeout: float | None = None,
        partial: bool = False,
    ) -> Iterator[bytes]:
        """The lines of a pod's ``pods/log`` at ``path`` (see :meth:`stream_lines`); none when
        the pod is gone (404) or its container has no log to give (400: not running yet, or
        no previous instance)."""
        for batch in self.log_batches(path, query, read_timeout, partial):
            yield from batch

    def log_batches(
        self,
        path: str,
        query: Mapping[str, Any],
        read_timeout: float | None = None,
        partial: bool = False,
    ) -> Iterator[list[bytes]]:
        """:meth:`logs`, the lines that came in one read together (a flood's hundreds, a
        trickle's one): what a follow keeps is written once per batch, not once per line."""
        try:
            yield from self.stream_batches(path, query, read_timeout, partial)
        except ApiFailure as exc:
            if exc.status not in (400, 404):
                raise

    def watch(
        self,
        path: str,
        query: Mapping[str, Any],
        read_timeout: float | None = None,
        opened: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """WATCH the collection at ``path``: (type, object) of each event, bookmarks too, until
        the server ends the stream. :class:`WatchExpired` when the version asked for is too
        old; another ERROR event is a ClusterError. ``opened``: see :meth:`stream_lines`."""
        try:
            for raw in self.stream_lines(path, query, read_timeout=read_timeout, opened=opened):
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                kind, obj = str(event.get("type")), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(f"watch {path}: {obj.get('message', obj)}")
                    raise ClusterError(f"watch {path}: {obj.get('message', obj)}")
                yield kind, obj
        except ApiFailure as exc:
            if exc.status == 410:
                raise WatchExpired(str(exc)) from None
            raise

    def stream_lines(
        self,
        path: str,
        query: Mapping[str, Any],
        read_timeout: float | None = None,
        partial: bool = False,
        opened: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[bytes]:
        """:meth:`stream_batches`, line by line."""
        for batch in self.stream_batches(path, query, read_timeout, partial, opened):
            yield from batch

    def stream_batches(
        self,
        path: str,
        query: Mapping[str, Any],
        read_timeout: float | None = None,
        partial: bool = False,
        opened: Callable[[Callable[[], None]], None] | None = None,
    ) -> Iterator[list[bytes]]:
        """Open a streaming GET (watch, follow logs; retried while opening) and yield its
        lines, those of each read together.

        A last line without its newline is yielded only with ``partial``. Ends when the
        server ends it; a dropped connection ends it too (callers resume from what they saw).
        ``opened`` is given a function that ends the stream from another thread (the read
        blocked in this one returns; the connection is closed)."""
        resp = with_retries(
            lambda: self._raw(
                "GET", path, query, timeout=(CONNECT_TIMEOUT_S, read_timeout), stream=True
            ),
            f"GET {path}",
            unreachable=self.unreachable,
            reached=self.answered,
        )
        if opened is not None:
            opened(lambda: _shutdown(resp))
        buf = b""
        try:
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if lines:
                    yield lines
        except (OSError, connection_errors()):
            pass
        finally:
            resp.release_conn()
            resp.close()
        if buf and partial:
            yield [buf]

    def exec(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: list[str],
        stdin: bytes = b"",
        timeout: float = 30.0,
    ) -> ExecResult:
        """Run ``command`` in ``container`` of ``pod`` (``pods/exec``, over the WebSocket
        that the client's ``kubernetes.stream`` speaks), ``stdin`` written first; its exit
        status and output. Not retried: a command may not be safe to run twice (a connection that
        drops raises :class:`ExecLost`, for a caller whose command is). Safe to call
        from several threads at once."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import stream

        # stream() swaps its ApiClient's request method while it runs: a client of its own
        # per call keeps parallel calls (and this Api's other requests) apart
        core = client.CoreV1Api(client.ApiClient(self.client.configuration))
        self.requests += 1
        what = f"exec in pod {pod}"
        asked = ("create", "pods/exec", namespace)
        try:
            ws = stream(
                core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                container=container,
                command=command,
                stdin=bool(stdin),
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except ApiException as exc:
            if not exc.status:  # the client's wrapping of a WebSocket that failed or dropped
                raise ExecLost(f"{what}: {exc.reason or 'the connection was lost'}") from None
            raise _failure(exc, what, asked) from None
        except (OSError, _websocket_errors()) as exc:
            status = int(getattr(exc, "status_code", 0) or 0)  # the upgrade was refused
            if status:
                raise api_failure(f"{what}: {status} {exc}", status=status, asked=asked) from None
            raise ExecLost(f"{what}: {connection_problem(exc)}") from None
        try:
            if stdin:  # a text frame: the command reads what it needs (no EOF in v4)
                ws.write_stdin(stdin.decode())
            ws.run_forever(timeout=timeout)  # the channels are buffered until it ends
            if ws.is_open():
                raise ClusterError(f"{what}: no answer within {timeout:.0f} s")
            out, err, status = ws.read_channel(1), ws.read_channel(2), ws.read_channel(3)
        except (OSError, _websocket_errors()) as exc:
            raise ExecLost(f"{what}: {connection_problem(exc)}") from None
        finally:
            ws.close()
            # close() is a no-op once the server closed first: the socket is ours to close
            with contextlib.suppress(OSError, AttributeError):
                ws.sock.shutdown()
        return ExecResult(_exit_status(status, what), out, err)


@dataclass(frozen=True)
class ExecResult:
    """What a command run through ``pods/exec`` ended with."""

    code: int
    stdout: str
    stderr: str


def _exit_status(text: str, what: str) -> int:
    """The exit status in an exec's closing ``metav1.Status``; ClusterError when the command
    did not run (no such container, the runtime failed)."""
    try:
        status = json.loads(text or "{}")
    except ValueError:
        status = {}
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if c.get("reason") == "ExitCode"), None)
    if status.get("reason") == "NonZeroExitCode" and code is not None:
        return int(code)
    raise ClusterError(f"{what}: {status.get('message') or 'the command ended without a status'}")


def _websocket_errors() -> type[Exception]:
    from websocket import WebSocketException

    return WebSocketException


def _q(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)

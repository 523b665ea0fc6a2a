"""How a request to the API server fails, and the one retry policy every request goes through.

:func:`with_retries`: 429 waits ``Retry-After`` (capped), 5xx and dropped connections back off
exponentially, both bounded; a server that cannot be reached is one line
(:func:`unreachable_line`: which server, why, which kubeconfig and context). A failure with an
HTTP status the caller may handle is an :class:`ApiFailure` (:func:`api_failure`), typed where
a caller decides on it: :class:`Forbidden` (403: RBAC refuses it), :class:`Conflict` (409),
:class:`Unauthorized` (401). The client's verbs decide "already gone" (404) themselves; no
caller reads a status.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ....errors import ClusterError

__all__ = [
    "ApiFailure",
    "Conflict",
    "Forbidden",
    "RetryPolicy",
    "Unauthorized",
    "api_failure",
    "connection_errors",
    "connection_problem",
    "unreachable_line",
    "with_retries",
]

T = TypeVar("T")
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ApiFailure(ClusterError):
    """A request failed with an HTTP status (``status``) the caller may handle (404, 410...)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", body: Any = None):
        super().__init__(message, status=status, reason=reason)
        self.body = body

    @property
    def transient(self) -> bool:
        """Whether the server may answer otherwise soon: too many requests (429), or its own
        trouble (5xx)."""
        return self.status == 429 or self.status >= 500


class Unauthorized(ApiFailure):
    """401: the server does not take this client's credentials."""


class Forbidden(ApiFailure):
    """403: RBAC refuses the request: ``verb`` (``list``, ``create``...) on ``resource``
    (``pytorchjobs.kubeflow.org``, ``pods/exec``) in ``namespace`` ("" for a cluster-scoped
    one); ``said`` is the server's message."""

    def __init__(
        self,
        message: str,
        *,
        verb: str = "",
        resource: str = "",
        namespace: str = "",
        said: str = "",
        reason: str = "",
        body: Any = None,
    ):
        super().__init__(message, status=403, reason=reason, body=body)
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        self.said = said


class Conflict(ApiFailure):
    """409: the object changed since it was read (a replace with an old ``resourceVersion``),
    or one of its name exists already (a create)."""


def api_failure(
    message: str,
    *,
    status: int,
    asked: tuple[str, str, str] = ("", "", ""),
    said: str = "",
    reason: str = "",
    body: Any = None,
) -> ApiFailure:
    """The failure of a request the server answered with ``status``: a :class:`Forbidden`
    (carrying ``asked``: verb, resource, namespace; and ``said``, the server's message), a
    :class:`Conflict`, an :class:`Unauthorized`, else a plain :class:`ApiFailure`."""
    if status == 403:
        verb, resource, namespace = asked
        return Forbidden(
            message,
            verb=verb,
            resource=resource,
            namespace=namespace,
            said=said,
            reason=reason,
            body=body,
        )
    typed = {401: Unauthorized, 409: Conflict}.get(status, ApiFailure)
    return typed(message, status=status, reason=reason, body=body)


class RetryPolicy:
    """Bounded retries: at most ``attempts`` tries and ``budget_s`` seconds of waiting."""

    def __init__(
        self,
        attempts: int = 6,
        base_s: float = 0.1,
        cap_s: float = 5.0,
        budget_s: float = 20.0,
        connect_budget_s: float = 0.3,
        reconnect_budget_s: float = 10.0,
    ):
        self.attempts = attempts
        self.base_s = base_s
        self.cap_s = cap_s
        self.budget_s = budget_s
        # a server that refuses or drops connections is answered within seconds, not after
        # the whole budget: a user waiting on `%ktrain list` needs the one line quickly
        self.connect_budget_s = connect_budget_s
        # ...but one that answered before and drops now (it restarts, its load balancer fails
        # over, or the machine is too busy to accept in time) is given seconds to come back: a
        # cell following a job for an hour must not fail on a blip
        self.reconnect_budget_s = reconnect_budget_s

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return float(min(max(retry_after, 0.0), self.cap_s))
        return float(min(self.base_s * (2**attempt), self.cap_s))


DEFAULT_POLICY = RetryPolicy()


def with_retries(
    call: Callable[[], T],
    what: str,
    policy: RetryPolicy = DEFAULT_POLICY,
    sleep: Callable[[float], None] = time.sleep,
    unreachable: Callable[[BaseException], str] | None = None,
    reached: bool = False,
) -> T:
    """Run ``call``; retry 429 (after Retry-After), 5xx and connection errors, bounded.

    A connection error that outlasts ``policy.connect_budget_s`` (``reconnect_budget_s`` when
    the server ``reached`` answered this client before) becomes one ClusterError line:
    ``unreachable(error)`` when given (the server, kubeconfig and context)."""
    waited = 0.0
    for attempt in range(policy.attempts):
        budget = policy.budget_s
        try:
            return call()
        except ApiFailure as exc:
            if exc.status not in RETRYABLE:
                raise
            retry_after = _retry_after(exc)
            error: Exception = exc
        except (OSError, connection_errors()) as exc:
            retry_after, error = None, exc
            budget = policy.reconnect_budget_s if reached else policy.connect_budget_s
        delay = policy.delay(attempt, retry_after)
        if attempt == policy.attempts - 1 or waited + delay > budget:
            break
        sleep(delay)
        waited += delay
    if isinstance(error, ApiFailure):
        raise ApiFailure(
            f"{what}: the API server kept failing ({error}); gave up after {attempt + 1} tries.",
            status=error.status,
            reason=error.reason,
        ) from None
    if unreachable is not None:
        raise ClusterError(unreachable(error)) from None
    why = connection_problem(error)
    raise ClusterError(f"{what}: cannot reach the API server ({why}).") from None


def unreachable_line(server: str, exc: BaseException, where: str) -> str:
    """``cannot reach https://...: connection refused (kubeconfig ..., context ...)`` + fix."""
    return (
        f"cannot reach {server}: {connection_problem(exc)} ({where}). Start the cluster or "
        "point `%ktrain config kubeconfig=PATH context=NAME` at one that runs."
    )


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def connection_problem(exc: BaseException) -> str:
    """Why a connection failed, in a few words (``connection refused``, ``timed out``),
    not urllib3's ``HTTPSConnectionPool(...): Max retries exceeded ...`` text."""
    text = str(exc)
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip().rstrip(".").lower()
    lowered = text.lower()
    for needle in ("timed out", "certificate verify failed", "name or service not known"):
        if needle in lowered:
            return needle
    return text.split(": ")[-1][:200] if text else type(exc).__name__


def _retry_after(exc: ApiFailure) -> float | None:
    headers = exc.body.get("_headers", {}) if isinstance(exc.body, dict) else {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def connection_errors() -> type[Exception]:
    """urllib3's errors of a connection that failed or dropped (imported when first needed)."""
    import urllib3.exceptions

    return urllib3.exceptions.HTTPError

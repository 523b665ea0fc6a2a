"""Tornado handlers: parse the request, call :class:`~.core.PanelCore`, write JSON.

Authenticated like every Jupyter API (token or cookie, XSRF on POST) through
``APIHandler`` and ``@tornado.web.authenticated``. Errors: :meth:`_BaseHandler.write_error`
is the one place that turns an exception into ``{"error": message}`` with the status from
:func:`~.core.http_status`. Backend calls block (files, the Kubernetes API), so they run in a
thread and never stall the server's event loop.
"""

from __future__ import annotations

import json
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.ioloop import IOLoop

from .. import __version__
from ..errors import KtrainError
from .core import PanelCore, http_status

__all__ = ["API_ROOT", "setup_handlers"]

API_ROOT = "ktrain/api"
_NAME = r"(?P<name>[^/]+)"


class _BaseHandler(APIHandler):
    core: PanelCore

    def initialize(self, core: PanelCore) -> None:
        self.core = core

    async def _reply(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            payload = await IOLoop.current().run_in_executor(None, lambda: fn(*args, **kwargs))
        except KtrainError as exc:
            self._error(http_status(exc), str(exc))
            return
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(payload))

    def _error(self, status: int, message: str) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Unexpected exceptions and tornado's own errors (403 without a token...) as JSON."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = str(exc) if isinstance(exc, KtrainError) else self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message}))

    def _backend(self) -> str | None:
        return self.get_query_argument("backend", None) or None


class RootHandler(_BaseHandler):
    """``GET /ktrain/api``: says the extension is there (the panel's install check)."""

    @tornado.web.authenticated
    async def get(self) -> None:
        self.finish(json.dumps({"version": __version__}))


class JobsHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        await self._reply(self.core.jobs)


class JobHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        await self._reply(self.core.job, name, self._backend())


def _rank(arg: str | None) -> int | str | None:
    """A ``rank=`` query argument: its number, None when absent, else the one line (400)."""
    if arg is None:
        return None
    if not arg.isdigit():
        return f"rank={arg!r} is not a rank number: pass rank=0, rank=1, ..."
    return int(arg)


class LogsHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        rank = _rank(self.get_query_argument("rank", "") or None)
        if isinstance(rank, str):
            self._error(400, rank)
            return
        ranks = self.get_query_argument("ranks", None)
        if ranks is not None and not all(r.isdigit() for r in ranks.split(",") if r):
            self._error(400, f"ranks={ranks!r} is not a list of ranks: pass ranks=0,3,5")
            return
        await self._reply(
            self.core.logs,
            name,
            rank=rank,
            grep=self.get_query_argument("grep", "") or None,
            offset=self.get_query_argument("offset", "") or None,
            backend=self._backend(),
            ranks=None if ranks is None else {int(r) for r in ranks.split(",") if r},
        )


class MetricsHandler(_BaseHandler):
    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        await self._reply(self.core.metrics, name, self._backend())


class CompareHandler(_BaseHandler):
    """``GET /ktrain/api/compare?jobs=A,B[&metric=M]``: several jobs' metric overlaid."""

    @tornado.web.authenticated
    async def get(self) -> None:
        names = [n for n in self.get_query_argument("jobs", "").split(",") if n]
        metric = self.get_query_argument("metric", "") or None
        await self._reply(self.core.compare, names, metric, self._backend())


class StacksHandler(_BaseHandler):
    """``GET /ktrain/api/jobs/NAME/stacks[?rank=R]``: every running rank's stack, taken now."""

    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        rank = _rank(self.get_query_argument("rank", "") or None)
        if isinstance(rank, str):
            self._error(400, rank)
            return
        await self._reply(self.core.stacks, name, rank=rank, backend=self._backend())


class TraceHandler(_BaseHandler):
    """``GET /ktrain/api/jobs/NAME/profile/rankR.trace.json.gz``: a rank's Chrome trace of the
    job's last ``%ktrain profile``, as a download."""

    @tornado.web.authenticated
    async def get(self, name: str, rank: str) -> None:
        try:
            path = await IOLoop.current().run_in_executor(
                None, lambda: self.core.trace(name, int(rank), self._backend())
            )
            data = await IOLoop.current().run_in_executor(None, path.read_bytes)
        except KtrainError as exc:
            self._error(http_status(exc), str(exc))
            return
        except OSError as exc:  # removed meanwhile (a newer profile, the job deleted)
            self._error(404, f"{name!r}'s trace of rank {rank} is gone ({exc.strerror}).")
            return
        self.set_header("Content-Type", "application/gzip")
        self.set_header(
            "Content-Disposition", f'attachment; filename="{name}-rank{rank}.trace.json.gz"'
        )
        self.finish(data)


class SweepsHandler(_BaseHandler):
    """``GET /ktrain/api/sweeps``: every sweep of the job store."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await self._reply(self.core.sweeps)


class SweepHandler(_BaseHandler):
    """``GET /ktrain/api/sweeps/NAME``: a sweep's trials and curves, as its cell shows them."""

    @tornado.web.authenticated
    async def get(self, name: str) -> None:
        await self._reply(self.core.sweep, name)


class CancelHandler(_BaseHandler):
    @tornado.web.authenticated
    async def post(self, name: str) -> None:
        await self._reply(self.core.cancel, name, self._backend())


def setup_handlers(web_app: Any, core: PanelCore) -> None:
    base = url_path_join(web_app.settings["base_url"], API_ROOT)
    routes: list[tuple[str, type[_BaseHandler]]] = [
        (r"/?", RootHandler),
        (r"/jobs/?", JobsHandler),
        (r"/compare/?", CompareHandler),
        (rf"/jobs/{_NAME}/?", JobHandler),
        (rf"/jobs/{_NAME}/logs/?", LogsHandler),
        (rf"/jobs/{_NAME}/metrics/?", MetricsHandler),
        (rf"/jobs/{_NAME}/stacks/?", StacksHandler),
        (rf"/jobs/{_NAME}/cancel/?", CancelHandler),
        (rf"/jobs/{_NAME}/profile/rank(?P<rank>\d+)\.trace\.json\.gz", TraceHandler),
        (r"/sweeps/?", SweepsHandler),
        (rf"/sweeps/{_NAME}/?", SweepHandler),
    ]
    web_app.add_handlers(".*$", [(base + path, h, {"core": core}) for path, h in routes])

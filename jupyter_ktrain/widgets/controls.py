"""Keep the monitor's controls (Cancel, rank selector, filter, follow) live while the
``%%ktrain`` cell blocks on its job.

Why this works: ipykernel 7 runs each kernel *subshell* in its own thread with its own event
loop, and its shell channel thread routes every incoming ``comm_msg`` by asking the target
comm ``_reply_subshell_for(data, default)``. We create one subshell per kernel (on the shell
channel thread's loop, where ipykernel creates them for a frontend's
``create_subshell_request``) and route the monitor's control comms to it. A click on Cancel is
then handled in that thread while the main thread runs the follow loop, and the cell still
ends with the job's final state and its results.

Where this is not possible (ipykernel < 7, no subshell support, the internals changed), the
cell still blocks and the widget still updates live; clicks are handled when the cell ends.
Interrupt the kernel to detach, and ``%ktrain cancel NAME`` to cancel. Everything here is
best effort and never raises.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["control_subshell", "kernel_busy", "route_to_subshell"]

_subshells: dict[int, str] = {}  # id(kernel) -> subshell id
_lock = threading.Lock()


def _kernel() -> Any:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return None
    shell = get_ipython()
    return getattr(shell, "kernel", None) if shell is not None else None


def control_subshell(timeout: float = 5.0) -> str | None:
    """This kernel's subshell for monitor controls (created once), or None if unsupported."""
    kernel = _kernel()
    if kernel is None or not getattr(kernel, "_supports_kernel_subshells", False):
        return None
    with _lock:
        found = _subshells.get(id(kernel))
        if found is not None:
            return found
        try:
            manager = kernel.shell_channel_thread.manager
            loop = manager._shell_channel_io_loop
            create = manager._create_subshell
        except AttributeError:
            return None
        done = threading.Event()
        box: dict[str, str] = {}

        def make() -> None:
            try:
                box["id"] = create()
            except Exception:
                pass
            finally:
                done.set()

        loop.add_callback(make)
        if not done.wait(timeout) or "id" not in box:
            return None
        _subshells[id(kernel)] = box["id"]
        return box["id"]


def route_to_subshell(widgets: Iterable[Any], subshell_id: str) -> int:
    """Send the frontend's messages for ``widgets`` to ``subshell_id``; returns how many
    widgets are routed (those with a comm that the kernel routes per message)."""
    routed = 0
    for widget in widgets:
        comm = getattr(widget, "comm", None)
        if comm is None or not hasattr(comm, "_reply_subshell_for"):
            continue

        def route(data: Any, default: Any, _sid: str = subshell_id) -> str:
            return _sid

        comm._reply_subshell_for = route
        routed += 1
    return routed


class _Batch:
    """Stands in for the kernel's iopub socket while ``Session.send`` serialises messages, so
    that several messages reach the IO thread as one scheduled event (nothing between them)."""

    def __init__(self) -> None:
        self.sends: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def send_multipart(self, *args: Any, **kwargs: Any) -> None:
        self.sends.append((args, kwargs))


class _BusyHook:
    """Wraps one kernel's ``_publish_status`` for the kernel's lifetime (installed once, never
    removed, so no thread can hold a stale copy). While a ``%%ktrain`` cell runs (``parent``
    set), an ``idle`` that another thread publishes is followed at once by ``busy`` with the
    cell's request as parent. The lock makes "publish idle, then check" and "start the cell,
    then publish busy" exclusive: whichever comes second, the last status is ``busy``.

    "At once" means adjacent on iopub: the pair goes to the IO thread as one event, so none of
    the widget updates the cell's thread sends all the time can fall between them. JupyterLab
    handles iopub messages one after another and awaits each comm message's handler (a widget
    redraw), so one that fell between would keep the status bar at idle for as long as that
    redraw took (seen: several polls, under load)."""

    def __init__(self, kernel: Any):
        self.kernel = kernel
        self.original = kernel._publish_status
        self.lock = threading.RLock()
        self.parent: Any = None
        self.depth = 0
        self.main: threading.Thread | None = None

    def publish(self, status: str, channel: str, parent: Any = None) -> None:
        with self.lock:
            if status == "idle" and self.depth and threading.current_thread() is not self.main:
                if not self._idle_then_busy(channel, parent):
                    self.original(status, channel, parent)
                    self.original("busy", "shell", self.parent)
            else:
                self.original(status, channel, parent)

    def _idle_then_busy(self, channel: str, parent: Any) -> bool:
        """Publish the idle and the cell's busy as one IO-thread event, as ipykernel's own
        ``_publish_status`` builds each; False (nothing sent) where its internals differ."""
        kernel = self.kernel
        io = getattr(getattr(kernel, "iopub_socket", None), "io_thread", None)
        send = getattr(io, "_really_send", None)
        if io is None or send is None or not callable(getattr(io, "schedule", None)):
            return False
        try:
            batch = _Batch()
            topic = kernel._topic("status")
            for state, parent_msg in (
                ("idle", parent or kernel.get_parent(channel)),
                ("busy", self.parent),
            ):
                kernel.session.send(
                    batch, "status", {"execution_state": state}, parent=parent_msg, ident=topic
                )
        except Exception:
            return False
        if len(batch.sends) != 2:
            return False

        def flush() -> None:
            for args, kwargs in batch.sends:
                send(*args, **kwargs)

        io.schedule(flush)
        return True

    def enter(self, parent: Any) -> None:
        with self.lock:
            self.depth += 1
            if self.depth == 1:
                self.parent, self.main = parent, threading.current_thread()
                # an idle that came before this point (a control request answered while the
                # cell was starting) is overruled now
                self.original("busy", "shell", parent)

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if not self.depth:
                self.parent = self.main = None


def _busy_hook(kernel: Any) -> _BusyHook | None:
    """``kernel``'s hook, installed on first use; None where the kernel has no subshells."""
    if kernel is None or not getattr(kernel, "_supports_kernel_subshells", False):
        return None
    with _lock:
        hook = getattr(kernel, "_ktrain_busy_hook", None)
        if isinstance(hook, _BusyHook):
            return hook
        if not callable(getattr(kernel, "_publish_status", None)):
            return None
        hook = _BusyHook(kernel)
        kernel._ktrain_busy_hook = hook
        kernel._publish_status = hook.publish
        return hook


@contextlib.contextmanager
def kernel_busy() -> Iterator[None]:
    """Keep the kernel reported busy while the cell runs (enter it before any widget exists).

    A request handled in another thread ends with an iopub ``status: idle`` of its own parent:
    a control message such as the ``create_subshell_request`` JupyterLab 4.6 sends when a
    widget's first comm opens, or a widget's comm message handled in a subshell. JupyterLab's
    status bar and the server's kernel API take any status as the kernel's, so the kernel would
    read idle while the cell still runs. Inside this block each such idle is followed at once
    by ``busy`` with the cell's execute request as parent, and entering it publishes ``busy``
    (overruling an idle that came while the cell started). Nested use is fine. Nothing happens
    outside a kernel or without subshells."""
    kernel = _kernel()
    hook = _busy_hook(kernel)
    if hook is None:
        yield
        return
    try:
        parent = kernel.get_parent("shell")
    except Exception:
        yield
        return
    hook.enter(parent)
    try:
        yield
    finally:
        hook.leave()

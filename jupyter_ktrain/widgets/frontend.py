"""Where the cell's monitor runs: in a kernel with widgets or not, and the kernel's half of the
widget's "Open in side panel" button."""

from __future__ import annotations

__all__ = ["in_kernel", "open_in_panel", "widgets_available"]


def open_in_panel() -> None:
    """The kernel's half of the "Open in side panel" button: nothing to do here.

    Pass it as ``on_open_panel`` to enable the button. The kernel cannot run JupyterLab
    commands (and is busy while the cell follows the job), so the browser does the work: the
    button carries the DOM classes ``ktrain-open-panel`` and ``ktrain-job-NAME``, and the
    jupyter-ktrain JupyterLab extension's document click listener sees the click, reveals the
    "ktrain jobs" panel, highlights the job and opens its tab (``ktrain:open-job``). Without
    that extension (classic Notebook, VS Code) the click does nothing.
    """


def in_kernel() -> bool:
    """True in a Jupyter kernel (a shell with a kernel, so with comms for widgets)."""
    from IPython import get_ipython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def widgets_available() -> bool:
    """True in a kernel with a comm when ipywidgets and anywidget import."""
    try:
        import anywidget  # noqa: F401
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return in_kernel()

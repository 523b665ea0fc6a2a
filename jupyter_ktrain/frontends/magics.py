"""``%%ktrain`` (run a cell as a job) and ``%ktrain`` (list, attach, logs, cancel, delete).

Argument parsing and wiring only: capture, backends and views do the work. The line commands
are the table of :mod:`.commands`; here their replies are shown in the notebook.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ..errors import JobFailed, KtrainError
from ..flags import build_parser
from ..runner.follow import follow
from ..runner.front import in_kernel
from ..runner.options import CellOptions
from ..runner.run import run
from ..runner.source import cell_source
from ..runner.verbs import Job
from ..sweep.driver import run_sweep
from ..sweep.trials import Sweep
from ..widgets.controls import kernel_busy
from . import commands
from .notebook import NotebookFront, say

__all__ = [
    "KtrainMagics",
    "help_alone",
    "run_job_cell",
    "run_line_command",
]

_CELL_HELP = (
    "%%ktrain [FLAGS] on a cell's first line runs the cell as a job; "
    "`%%ktrain --help` alone in a cell lists the flags."
)


def join_continued(line: str, cell: str) -> tuple[str, str]:
    """Flags continued over several lines with a trailing backslash (IPython hands a cell
    magic only its first line): move the continuation lines from the body to the flags."""
    body = cell.split("\n")
    while line.rstrip().endswith("\\") and body:
        line = line.rstrip()[:-1] + " " + body.pop(0)
    return line, "\n".join(body)


def run_job_cell(line: str, cell: str, shell: Any) -> Job | Sweep | None:
    """The whole ``%%ktrain`` cell: its flags parsed once into the runner's options, the
    cell's body over the kernel's namespace, the notebook as the front; with ``--sweep``,
    many runs of it (:func:`~jupyter_ktrain.sweep.driver.run_sweep`)."""
    line, cell = join_continued(line, cell)
    options = CellOptions.from_line(line)
    if options.run.help:
        say(build_parser().format_help())
        return None
    if options.sweep is not None:
        return run_sweep(cell_source(cell, shell), options.run, options.sweep, NotebookFront(shell))
    return run(cell_source(cell, shell), options.run, NotebookFront(shell))


_CELL_LINE = re.compile(r"%%ktrain(\s|$)")


def help_alone(lines: list[str]) -> list[str]:
    """An IPython input transformer: a cell that is only its ``%%ktrain`` line (``%%ktrain
    --help``) gets a blank body. IPython refuses a cell magic with an empty body before the
    magic runs ("the cell body is empty"); with a blank one, ours prints the help, or says
    that the cell has no code."""
    if not lines or not _CELL_LINE.match(lines[0]) or any(x.strip() for x in lines[1:]):
        return lines
    return [lines[0].rstrip("\n") + "\n", "\n"]


@magics_class
class KtrainMagics(Magics):
    """The magics. Each keeps the kernel reported busy while it runs (see
    :func:`~jupyter_ktrain.widgets.controls.kernel_busy`), from before any widget exists.

    A failed or cancelled job raises :class:`JobFailed` as it is: IPython shows its own
    rendering (``JobFailed: rank 1 raised ValueError: ...`` and rank 1's last lines, see
    :meth:`KtrainError.render`). Other errors are one ``UsageError`` line: no traceback."""

    @cell_magic
    def ktrain(self, line: str, cell: str) -> Job | Sweep | None:
        """Run this cell as a distributed job. `%%ktrain --help` lists the flags."""
        with kernel_busy():
            try:
                return run_job_cell(line, cell, self.shell)
            except JobFailed:
                raise
            except KtrainError as exc:  # one message, no traceback; the cell counts as failed
                raise UsageError(f"ktrain: {exc}") from None

    @line_magic("ktrain")  # type: ignore[arg-type]
    def ktrain_line(self, line: str) -> Any:
        """Manage jobs: list, attach, logs, status, cancel, delete."""
        with kernel_busy():
            try:
                return run_line_command(shlex.split(line), self.shell)
            except JobFailed:
                raise
            except KtrainError as exc:
                raise UsageError(f"ktrain: {exc}") from None


def run_line_command(argv: list[str], shell: Any = None) -> Any:
    """``%ktrain COMMAND ...``: the command of :data:`~jupyter_ktrain.frontends.commands.COMMANDS`,
    its reply shown in the notebook (a compare's figure in a kernel, a followed job in the
    monitor, its outputs set in ``shell``); the followed :class:`Job`, else the reply's value
    (an attached sweep's :class:`~jupyter_ktrain.sweep.trials.Sweep`), else None."""
    if not argv or argv[0] in commands.HELP_WORDS:  # in a notebook, the cell magic too
        say(commands.help_text("%ktrain ") + _CELL_HELP)
        return None
    reply = commands.run(argv)
    if reply.text:
        say(reply.text)
    if reply.figure is not None and in_kernel():
        from IPython.display import display

        display(reply.figure())  # type: ignore[no-untyped-call]
    if reply.error is not None:
        raise reply.error
    if reply.follow is None:
        return reply.value
    follow(reply.follow, NotebookFront(shell))
    return reply.follow

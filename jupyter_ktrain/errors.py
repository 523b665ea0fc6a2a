"""One exception tree for everything jupyter-ktrain raises on purpose.

    KtrainError                  base: message says what was wrong and what to do
    ├── SpecError                bad input (flags, YAML, names); raised before anything starts
    ├── CaptureError             something the cell needs cannot travel to the job
    │   └── SecretError          a secret would be written into the job's code
    ├── BackendError             a backend could not do what was asked
    │   ├── JobNotFound          no job of that name
    │   └── JobFailed            a followed job failed (the cell fails)
    │       └── JobCancelled     a followed job was cancelled (the cell fails)
    ├── PackagingError           building or pushing the code image/ConfigMap failed
    │   └── RegistryError        the registry said no (keeps its own error code)
    └── ClusterError             the Kubernetes API said no (keeps the server's message)
        └── PreflightError       the cluster cannot run this job (one line per problem)

Every message is a full sentence a user can act on: what was expected, what was found, and the
flag, option or command that fixes it. In IPython an error that reaches the user shows as
``ClassName: message`` with no traceback of ours (``_render_traceback_``, which IPython's
``showtraceback`` uses in place of its own traceback).
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "CaptureError",
    "ClusterError",
    "JobCancelled",
    "JobFailed",
    "JobNotFound",
    "KtrainError",
    "MissingPackage",
    "PackagingError",
    "PreflightError",
    "RegistryError",
    "SecretError",
    "SpecError",
]


_RED, _RESET = "\x1b[0;31m", "\x1b[0m"  # the colour IPython gives an exception's name


class KtrainError(Exception):
    """Base of every error jupyter-ktrain raises on purpose."""

    def render(self) -> list[str]:
        """What a notebook shows: ``ClassName: message``, and nothing of our own stack."""
        first, *rest = str(self).split("\n")
        return [f"{_RED}{type(self).__name__}{_RESET}: {first}", *rest]

    def _render_traceback_(self) -> list[str]:  # IPython's hook for a custom traceback
        return self.render()


class SpecError(KtrainError, ValueError):
    """The job description is invalid. Raised before any process or object is created."""


class MissingPackage(SpecError):
    """A part of jupyter-ktrain the job needs is not installed (an extra, or torch for the
    local backend). Raised before anything is created; the message names the ``pip install``."""


class CaptureError(KtrainError):
    """A name the cell needs cannot be shipped to the job."""


class SecretError(CaptureError):
    """A token, password or key would be written into the job's code (program, ConfigMap,
    code image, job folder). ``name`` is what ``--allow-secret`` takes to ship it anyway."""

    def __init__(self, message: str, *, name: str = ""):
        super().__init__(message)
        self.name = name


class BackendError(KtrainError):
    """A backend failed to launch, watch or cancel a job."""


class JobNotFound(BackendError, LookupError):
    """No job with the given name is known to the backend."""


class JobFailed(BackendError):
    """A job the cell followed ended Failed (or Cancelled: :class:`JobCancelled`). Raised so
    that Run All and headless runs (nbclient, papermill) stop at this cell.

    ``headline`` says what happened in one line (``rank 1 raised ValueError: bad shard``); the
    message is ``Job 'NAME' failed: {headline}`` and the lines under it (the first failing
    rank's last lines, what to do). A notebook shows ``JobFailed: {headline}`` and those lines.
    ``state`` is the job's final state."""

    def __init__(self, message: str, *, state: str = "Failed", headline: str = ""):
        super().__init__(message)
        self.state = state
        self.headline = headline or message.split("\n", 1)[0]

    def render(self) -> list[str]:
        return [f"{_RED}{type(self).__name__}{_RESET}: {self.headline}", *str(self).split("\n")[1:]]


class JobCancelled(JobFailed):
    """A job the cell followed was cancelled (Cancel button, ``%ktrain cancel``, deleted)."""

    def __init__(self, message: str, *, headline: str = ""):
        super().__init__(message, state="Cancelled", headline=headline)


class PackagingError(KtrainError):
    """Building or uploading the job's code failed."""


class RegistryError(PackagingError):
    """An OCI registry refused a request.

    ``code`` is the registry's own error code (e.g. ``UNAUTHORIZED``, ``NAME_UNKNOWN``) and
    ``retryable`` says whether trying again later may succeed.
    """

    def __init__(self, message: str, *, code: str = "", status: int = 0, retryable: bool = False):
        super().__init__(message)
        self.code = code
        self.status = status
        self.retryable = retryable


class ClusterError(KtrainError):
    """The Kubernetes API refused a request; ``status`` and ``reason`` are the server's."""

    def __init__(self, message: str, *, status: int = 0, reason: str = ""):
        super().__init__(message)
        self.status = status
        self.reason = reason


class PreflightError(ClusterError):
    """The cluster cannot run the job. ``problems`` holds one actionable line per problem."""

    def __init__(self, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"The cluster cannot run this job yet:\n{lines}")
        self.problems = problems

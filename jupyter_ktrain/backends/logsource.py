"""One replica's log stream, read as it grows: :class:`LogSource`, which every backend's log
reader is (the local backend's node log files, the Kubernetes backend's pod log streams), below
:mod:`.base` and :mod:`.capabilities`, which both hand them out."""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["LogSource"]


class LogSource(ABC):
    """One replica's log stream, read incrementally: ``read()`` returns the complete lines
    that arrived since the last call (never blocks for long); ``done`` once the stream ended."""

    replica: str

    @abstractmethod
    def read(self) -> list[str]: ...

    @property
    @abstractmethod
    def done(self) -> bool: ...

    def finish(self) -> list[str]:
        """Called once the job ended: whatever is left, including a last partial line."""
        return self.read()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the source holds (threads, connections)."""

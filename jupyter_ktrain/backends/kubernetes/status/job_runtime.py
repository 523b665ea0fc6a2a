"""What this process learnt of a cluster job from its logs (:class:`JobRuntime`): each rank's
exit record and last lines, the progress the ranks reported, a warm job's runs. The lines come
from the streams a follow reads (:class:`~.logs.PodLogSource`) or from the stored logs."""

from __future__ import annotations

import collections
import threading
import time

from ....pod.progress import JobProgress
from ....pod.protocol import Exit, Metric, Resume, parse_line
from ..logs.pod import FollowedLines
from ..warm.orders import RunBook

__all__ = ["TAIL_LINES", "JobRuntime", "Runtimes"]

TAIL_LINES = 50


class Runtimes:
    """The cluster context's registry of what each job's logs told this process: job ->
    :class:`JobRuntime`, made when first asked for. Written here only."""

    def __init__(self) -> None:
        self._jobs: dict[str, JobRuntime] = {}

    def of(self, name: str) -> JobRuntime:
        """The job's runtime; a new, empty one when this process has none yet."""
        found = self._jobs.get(name)
        if found is None:
            found = self._jobs.setdefault(name, JobRuntime())
        return found

    def get(self, name: str) -> JobRuntime | None:
        """The job's runtime if this process has one (none is made)."""
        return self._jobs.get(name)

    def forget(self, name: str) -> None:
        """Drop what the job's logs told (it was deleted)."""
        self._jobs.pop(name, None)


class JobRuntime:
    """What the logs told us about one job: exit records, each rank's tail, last output."""

    def __init__(self) -> None:
        self.exits: dict[int, tuple[int, int]] = {}
        self.tails: dict[int, collections.deque[str]] = collections.defaultdict(
            lambda: collections.deque(maxlen=TAIL_LINES)
        )
        self.last_progress: float | None = None
        self.progress = JobProgress()  # percent done / ETA from records with a total
        self.loaded = False
        self.lock = threading.Lock()
        self.book = RunBook()  # a warm job's runs, from the same lines
        self.followers = 0  # run streams that feed ``book`` now
        self.aborted: set[int] = set()  # runs this process asked every node to stop
        self.followed: FollowedLines | None = None  # kept in the job store (cleanPodPolicy)

    def on_followed(self, pod: str, stamped: list[tuple[int, str]]) -> None:
        """Lines a follow read together: kept (one write), then read like any other."""
        if self.followed is not None:
            self.followed.add(pod, stamped)
        for ts, raw in stamped:
            self.on_line(pod, ts, raw)

    def followed_end(self, pod: str) -> None:
        """A follow's stream of ``pod`` ended: what it read is all kept."""
        if self.followed is not None:
            self.followed.flush(pod)

    def on_line(self, pod: str, ts: int, raw: str) -> None:
        line = parse_line(raw)
        with self.lock:
            self.book.feed(pod, line)
            self.last_progress = time.time()
            if line.rank is None:
                return
            record = line.typed
            if line.record is None:
                self.tails[line.rank].append(line.text)
            elif isinstance(record, Exit):
                self.exits.setdefault(line.rank, (ts, record.code))
            elif isinstance(record, (Metric, Resume)):  # a resume measures the rate anew
                self.progress.feed(line.rank, record, time.time())

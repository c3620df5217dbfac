"""The memory backend's per-key concurrency slots (conveyor.rules.concurrency)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from conveyor.backends.memory.ordered_ids import Lanes, Order, OrderedIds
from conveyor.model.job import Job, JobState

Lane = tuple[str, str | None]  # a lane of the store's `available`: (queue, rate limit bucket)


class KeySlots:
    """The slots of each concurrency key (conveyor.rules.concurrency): which jobs hold one
    (running, or available and unparked: in `available`, the claim's index) and which
    available jobs are parked (per key, in claim order, out of the claim's sight)."""

    def __init__(self, available: Lanes) -> None:
        self.available = available
        self.holders: dict[str, dict[str, None]] = {}
        self.parked: defaultdict[str, OrderedIds[Order]] = defaultdict(OrderedIds)
        # A parked job's lane to go to when unparked, and its own limit.
        self._unpark_to: dict[str, tuple[Lane, int]] = {}
        # A key's limit set by its adaptive controller (conveyor.rules.adaptive), in place of
        # its jobs' own concurrency_limit.
        self.overrides: dict[str, int] = {}

    def set_limit(self, key: str, limit: int | None) -> None:
        if limit is None:
            self.overrides.pop(key, None)
        else:
            self.overrides[key] = limit
        self.rebalance(key)

    def filed(self, job_id: str, job: Job, order: Order | None) -> None:
        """A job of a key was filed under its state (`order`: its claim order, when
        available): an available one is parked, a running one (just claimed) keeps the
        slot it held, and after any other move the key is rebalanced."""
        key = job.concurrency_key
        if key is None:
            return
        if job.state is JobState.RUNNING:
            self.hold(key, job_id)
            return
        if order is not None:
            self.park(key, job_id, order, (job.queue, job.rate_key), job.concurrency_limit or 1)
        self.rebalance(key)

    def park(self, key: str, job_id: str, order: Order, lane: Lane, limit: int) -> None:
        """`lane`: where the job goes when unparked, (queue, rate limit bucket)."""
        self.parked[key][job_id] = order
        self._unpark_to[job_id] = (lane, limit)

    def hold(self, key: str, job_id: str) -> None:
        self.holders.setdefault(key, {})[job_id] = None

    def leave(self, key: str | None, job_id: str) -> None:
        if key is None:
            return
        self.holders.get(key, {}).pop(job_id, None)
        parked = self.parked.get(key)
        if parked is not None and parked.pop(job_id, None) is not None:
            del self._unpark_to[job_id]
            if not parked:  # a deleted job is not rebalanced after: no empty index per key
                del self.parked[key]

    def parked_jobs(self) -> Iterator[tuple[str, str]]:
        """(key, queue) of every parked job."""
        for key, jobs in self.parked.items():
            for job_id in jobs:
                yield key, self._unpark_to[job_id][0][0]

    def holding(self, key: str) -> int:
        return len(self.holders.get(key, {}))

    def rebalance(self, key: str) -> None:
        """Unpark the key's next jobs while fewer hold a slot than the key's limit: its
        override if it has one, else the next job's own."""
        parked = self.parked.get(key)
        while parked:
            [job_id] = parked.first(1)
            lane, limit = self._unpark_to[job_id]
            if self.holding(key) >= self.overrides.get(key, limit):
                break
            order = parked.pop(job_id)
            del self._unpark_to[job_id]
            self.hold(key, job_id)
            self.available[lane][job_id] = order
        if parked is not None and not parked:
            del self.parked[key]
        if not self.holders.get(key, True):
            self.holders.pop(key, None)

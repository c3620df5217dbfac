"""The memory backend's per-key concurrency slots (conveyor.concurrency)."""

from __future__ import annotations

import heapq

from ...job import Job, JobState
from .ordered import Lanes, Order


class KeySlots:
    """The slots of each concurrency key (conveyor.concurrency): which jobs hold one
    (running, or available and unparked: in `available`, the claim's index) and which
    available jobs are parked (in a heap per key, in claim order, out of the claim's
    sight). Entries of jobs that left are dropped from a heap as they surface."""

    def __init__(self, available: Lanes) -> None:
        self.available = available
        self.holders: dict[str, dict[str, None]] = {}
        self.parked: dict[str, dict[str, tuple[Order, tuple[str, str | None], int]]] = {}
        self._heaps: dict[str, list[tuple[Order, str]]] = {}
        # A key's limit set by its adaptive controller (conveyor.adaptive), in place of
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

    def park(self, key: str, job_id: str, order: Order, lane: tuple[str, str | None],
             limit: int) -> None:
        """`lane`: where the job goes when unparked, (queue, rate limit bucket)."""
        self.parked.setdefault(key, {})[job_id] = (order, lane, limit)
        heapq.heappush(self._heaps.setdefault(key, []), (order, job_id))

    def hold(self, key: str, job_id: str) -> None:
        self.holders.setdefault(key, {})[job_id] = None

    def leave(self, key: str | None, job_id: str) -> None:
        if key is None:
            return
        self.holders.get(key, {}).pop(job_id, None)
        self.parked.get(key, {}).pop(job_id, None)

    def holding(self, key: str) -> int:
        return len(self.holders.get(key, {}))

    def rebalance(self, key: str) -> None:
        """Unpark the key's next jobs while fewer hold a slot than the key's limit: its
        override if it has one, else the next job's own."""
        parked, heap = self.parked.get(key, {}), self._heaps.get(key, [])
        while heap:
            order, job_id = heap[0]
            entry = parked.get(job_id)
            if entry is None or entry[0] != order:
                heapq.heappop(heap)  # left, or parked again under another order
                continue
            _, lane, limit = entry
            if self.holding(key) >= self.overrides.get(key, limit):
                break
            heapq.heappop(heap)
            del parked[job_id]
            self.hold(key, job_id)
            self.available[lane][job_id] = order
        if not heap:
            self._heaps.pop(key, None)
            self.parked.pop(key, None)
        if not self.holders.get(key, True):
            self.holders.pop(key, None)

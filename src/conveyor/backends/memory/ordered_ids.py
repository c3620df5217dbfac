"""Ids kept in an order, for the memory store's indexes: a claim reads the first jobs of
a lane and a claim's staging reads the scheduled jobs that became due, each in time that
grows with what it reads, not with what waits (the SQL backends' index walks, Redis's
sorted sets)."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable
from typing import TypeAlias, TypeVar

Order: TypeAlias = tuple[int, int, float, int]  # a claim order: -priority, vtime, run_at, seq
Key = TypeVar("Key", Order, float)  # a claim order, or a run_at


class OrderedIds(dict[str, Key]):
    """id -> its order key, as a dict (membership, removal and re-filing in O(1)), with
    a heap beside it for the first ones. An id removed or filed again under another key
    leaves its old heap entry behind; such entries are dropped as they come to the top,
    and all at once when they outnumber the live ones."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        super().__init__()
        self._heap: list[tuple[Key, str]] = []

    def __setitem__(self, job_id: str, order: Key) -> None:
        dict.__setitem__(self, job_id, order)
        heapq.heappush(self._heap, (order, job_id))
        if len(self._heap) > 2 * len(self) + 64:
            self._heap = [(o, i) for i, o in self.items()]
            heapq.heapify(self._heap)

    def _live_top(self) -> tuple[Key, str] | None:
        heap = self._heap
        while heap:
            order, job_id = heap[0]
            if self.get(job_id) == order:
                return heap[0]
            heapq.heappop(heap)  # left, or filed again under another key
        return None

    def first(self, n: int) -> list[str]:
        """The ids of the first `n` in order; they stay in."""
        return self._leading(lambda taken, _: taken < n)

    def up_to(self, limit: Key) -> list[str]:
        """The ids whose key is at most `limit`, in order; they stay in."""
        return self._leading(lambda _, top: top[0] <= limit)

    def _leading(self, more: Callable[[int, tuple[Key, str]], bool]) -> list[str]:
        """The live entries from the top, while `more(how many so far, the next one)`."""
        taken: list[tuple[Key, str]] = []
        while (top := self._live_top()) is not None and more(len(taken), top):
            taken.append(heapq.heappop(self._heap))
            # The same id filed twice under the same key has two equal entries: one is
            # dropped here, its twin put back below.
            while self._heap and self._heap[0] == taken[-1]:
                heapq.heappop(self._heap)
        for entry in taken:
            heapq.heappush(self._heap, entry)
        return [job_id for _, job_id in taken]


# (queue, rate limit bucket or None) -> its available jobs in claim order (rate_lanes.py).
Lanes: TypeAlias = defaultdict[tuple[str, str | None], OrderedIds[Order]]

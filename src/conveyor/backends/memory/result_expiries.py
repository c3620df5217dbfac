"""The memory backend's index of result expiries (result_ttl, conveyor.rules.results): a
heap of (expires_at, job id), so the prune loop pops the results due instead of
walking every completed job. An entry is checked against its row when popped (the
job may have been deleted, or its expiry written anew): stale entries cost a pop."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any


class ResultExpiries:
    def __init__(self) -> None:
        self._heap: list[tuple[float, str]] = []

    def add(self, job_id: str, expires_at: float) -> None:
        heapq.heappush(self._heap, (expires_at, job_id))

    def expire(
        self, rows: dict[str, dict[str, Any]], now: float, limit: int, clear: Callable[[str], None]
    ) -> list[str]:
        """Clear (by `clear`) up to `limit` results due by `now`; their ids."""
        cleared: list[str] = []
        while self._heap and self._heap[0][0] <= now and len(cleared) < limit:
            expires_at, job_id = heapq.heappop(self._heap)
            row = rows.get(job_id)
            if (
                row is not None
                and row.get("result_expires_at") == expires_at
                and row.get("result") is not None
            ):
                clear(job_id)
                cleared.append(job_id)
        return cleared

"""Bounded queues on SQLite (conveyor.rules.backpressure): the enqueue capacity check."""

from __future__ import annotations

import sqlite3

from conveyor.backends.sqlite.connection import Q
from conveyor.backends.sqlite.dependants import SqliteDependants
from conveyor.model.errors import RefusedJob
from conveyor.model.job import JobState, QueueBound
from conveyor.rules.backpressure import shed_error
from conveyor.rules.dependencies import release_dependants


class EnqueueCapacity:
    """The capacity left in the bounded queues of one enqueue (conveyor.rules.backpressure), in
    its write transaction: SQLite serialises writers, so the count cannot go stale."""

    def __init__(self, db: sqlite3.Connection, now: float, bounds: dict[str, QueueBound]) -> None:
        self.db, self.now, self.bounds = db, now, bounds
        self.depth: dict[str, int] = {}
        self.excess: dict[str, int] = {}

    def admit(self, queue: str) -> RefusedJob | None:
        """Capacity for one new job in `queue`, or why not (the id is filled in later)."""
        bound = self.bounds.get(queue)
        if bound is None:
            return None
        if queue not in self.depth:
            self.depth[queue] = int(
                self.db.execute(Q["count_waiting"], {"queue": queue}).fetchone()[0]
            )
        if self.depth[queue] >= bound.max_waiting and not bound.shed_oldest:
            return RefusedJob("", queue, self.depth[queue], bound.max_waiting)
        self.depth[queue] += 1
        return None

    def shed(self) -> None:
        """Cancel the oldest waiting jobs of each shedding queue past its bound."""
        for queue, depth in self.depth.items():
            bound = self.bounds[queue]
            if bound.shed_oldest and depth > bound.max_waiting:
                shed = self.db.execute(
                    Q["shed_oldest_waiting"],
                    {
                        "queue": queue,
                        "n": depth - bound.max_waiting,
                        "now": self.now,
                        "error": shed_error(queue, bound.max_waiting, self.now),
                    },
                ).fetchall()
                self.db.execute(Q["count_shed"], {"queue": queue, "n": len(shed)})
                for job_id, has_dependants in shed:  # a workflow member's dependants follow
                    if has_dependants:
                        release_dependants(
                            SqliteDependants(self.db, self.now),
                            job_id,
                            JobState.CANCELLED,
                            self.now,
                        )

"""Tenant fairness (docs/flow-control.md): within a queue, claims rotate across the
jobs' fairness keys (a tenant, say), so a key with 100,000 waiting jobs delays a key
with 10 by a bounded number of claims.

Virtual-time fair queuing, decided at enqueue so that the claim stays an index walk.
Each (queue, key) keeps the virtual time of its last enqueued job, each queue the
virtual time its claims reached. A new job of key k gets

    vtime = max(last[k], queue_vtime) + step(weight)

and the claim orders jobs of one priority level by vtime (then run_at, then
insertion), and moves queue_vtime up to the largest vtime it claimed. A key with a
backlog has spent its turns ahead; a newcomer starts at the queue's present, so the
two alternate. Jobs without a key have no vtime and rank as vtime 0: first within
their priority level, in the order they had before fairness existed.

Virtual times are whole numbers (`VTIME_UNIT` per turn at weight 1; a job of weight w
costs `VTIME_UNIT / w`, rounded), so the SQL backends, the Lua scripts and Python
agree to the unit, and Redis can write them as fixed-width digits of an index member.
This module is the rule for the backends that assign in Python (memory, SQLite);
PostgreSQL's `assign_fair_vtimes` and Redis's `fair_vtime` in _lib.lua say the same.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from conveyor.model.job import NewJob
from conveyor.model.validation import WEIGHT_MAX, WEIGHT_MIN

__all__ = [
    "FAIRNESS_META_KEY",
    "VTIME_UNIT",
    "WEIGHT_MAX",
    "WEIGHT_MIN",
    "VtimeAssigner",
    "as_vtime",
    "claimed_vtime",
    "next_vtime",
    "spread",
    "vtime_step",
]

FAIRNESS_META_KEY = "fairness_key"  # the rendered key, shown with the job
VTIME_UNIT = 1000  # one turn of a weight-1 key
VTIME_MAX = 2**53 - 1  # what Lua counts exactly (Redis); 9 * 10**12 turns of a queue


def vtime_step(weight: float | None) -> int:
    """The virtual time one job of this weight costs its key."""
    return VTIME_UNIT if weight is None else max(1, round(VTIME_UNIT / weight))


def next_vtime(last_of_key: int, queue_vtime: int, step: int) -> int:
    """The vtime of a key's next job: after its last one, never before the queue's
    present (an idle key gets no credit for the turns it did not use)."""
    return min(VTIME_MAX, max(last_of_key, queue_vtime) + step)


@dataclass
class VtimeAssigner:
    """Assigns the vtimes of a batch, reading each (queue, key)'s last vtime and each
    queue's vtime once (`read_last`, `read_queue`), and collects what to write back
    (`last`: the new last vtime of each (queue, key) it assigned)."""

    read_last: Callable[[str, str], int]
    read_queue: Callable[[str], int]

    def __post_init__(self) -> None:
        self.last: dict[tuple[str, str], int] = {}
        self._queue: dict[str, int] = {}

    def assign(self, job: NewJob) -> int | None:
        if job.fairness_key is None:
            return None
        at = (job.queue, job.fairness_key)
        if at not in self.last:
            self.last[at] = self.read_last(*at)
        if job.queue not in self._queue:
            self._queue[job.queue] = self.read_queue(job.queue)
        vtime = next_vtime(self.last[at], self._queue[job.queue], vtime_step(job.fairness_weight))
        self.last[at] = vtime
        return vtime


def spread(jobs: Sequence[NewJob], last: Mapping[tuple[str, str], int]) -> list[int]:
    """Each job's vtime (0 without a key) when the store reserved a batch's turns at
    once: `last` is each (queue, key)'s last vtime after the reservation, which took
    the sum of its jobs' steps; they are handed out in batch order (PostgreSQL)."""
    keyed = [
        ((j.queue, j.fairness_key), vtime_step(j.fairness_weight))
        for j in jobs
        if j.fairness_key is not None
    ]
    reached = dict(last)
    for at, step in keyed:
        reached[at] -= step
    out = []
    for job in jobs:
        if job.fairness_key is None:
            out.append(0)
            continue
        at = (job.queue, job.fairness_key)
        reached[at] += vtime_step(job.fairness_weight)
        out.append(reached[at])
    return out


def as_vtime(stored: object) -> int:
    """A stored vtime as a number; one that is not a whole number (written by
    something else) counts as 0, so a corrupt row never fails a claim."""
    return stored if type(stored) is int and 0 <= stored <= VTIME_MAX else 0


def claimed_vtime(vtimes: Sequence[int | None]) -> int | None:
    """What a claim moves its queue's vtime up to: the largest vtime it claimed."""
    return max((v for v in vtimes if v is not None), default=None)

"""Bounded queues at enqueue (docs/flow-control.md): the rule every backend applies as
it stores a batch, and the producer's wait when a queue's policy is `block`.

The rule (`over_bound`): after the batch's new jobs are stored (duplicates returned
by dedup are not new and take no room), a queue holding more than its `max_waiting`
waiting jobs either refuses its newest jobs of the batch, the excess, or (shed_oldest)
cancels that many of its oldest waiting jobs, by insertion order, recording why
(`shed_error`). The SQL backends apply it inside the enqueue's transaction, under a
per-queue lock on PostgreSQL; the Redis enqueue script applies it job by job. Jobs
already admitted that come back to waiting (a retry, a snooze, a rescue, a redrive)
are never refused, so retries can take a queue past its bound by at most the jobs
running from it; the next enqueue then finds it full.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from conveyor.model.errors import QueueFull, RefusedJob
from conveyor.model.job import AttemptError, Job, NewJob, QueueBound
from conveyor.model.version import __version__

if TYPE_CHECKING:
    from conveyor.rules.queues import QueueSettingsRegistry

SHED_ERROR_TYPE = "QueueFull"
_LONGEST_PAUSE = 0.25  # between offers of a blocked job: the most a producer oversleeps room


def shed_error(queue: str, max_waiting: int, now: float) -> str:
    """The error record (AttemptError's JSON) a shed job keeps: why it was cancelled."""
    return AttemptError(
        attempt=0,
        at=now,
        type=SHED_ERROR_TYPE,
        message=f"shed: queue {queue!r} held {max_waiting} waiting jobs (max_waiting) "
        "when a newer job came, and its policy is shed_oldest",
        version=__version__,
    ).to_json()


def bounds_of(jobs: Sequence[NewJob]) -> dict[str, QueueBound]:
    """Each bounded queue of the batch and its bound (the first job's, if they differ)."""
    bounds: dict[str, QueueBound] = {}
    for job in jobs:
        if job.bound is not None:
            bounds.setdefault(job.queue, job.bound)
    return bounds


def over_bound(
    new_positions: Mapping[str, Sequence[int]],
    depths: Mapping[str, int],
    bounds: Mapping[str, QueueBound],
) -> tuple[dict[int, RefusedJob], dict[str, int], dict[str, int]]:
    """For a stored batch: the new jobs (position -> RefusedJob) to take back, the
    number of oldest waiting jobs to shed per queue, and each bounded queue's waiting
    jobs once that is done. `new_positions`: the batch positions of each queue's new
    jobs, in batch order; `depths`: each bounded queue's waiting jobs, new ones in."""
    refuse_at: list[tuple[str, int]] = []
    shed: dict[str, int] = {}
    after = dict(depths)
    for queue, bound in bounds.items():
        excess = depths.get(queue, 0) - bound.max_waiting
        if excess <= 0:
            continue
        if bound.shed_oldest:
            shed[queue] = excess
            after[queue] = bound.max_waiting
        else:
            newest = list(new_positions.get(queue, ()))[-excess:]
            refuse_at += [(queue, pos) for pos in newest]
            after[queue] = depths[queue] - len(newest)
    refused = {
        pos: RefusedJob("", queue, after[queue], bounds[queue].max_waiting)
        for queue, pos in refuse_at
    }
    return refused, shed, after


def raise_if_refused(
    jobs: Sequence[NewJob], stored: Sequence[Job | None], refused: Mapping[int, RefusedJob]
) -> list[Job]:
    """The stored jobs, or QueueFull naming the refused ones (ids filled in here)."""
    if not refused:
        return [job for job in stored if job is not None]
    named = [
        RefusedJob(jobs[pos].id, r.queue, r.depth, r.max_waiting)
        for pos, r in sorted(refused.items())
    ]
    raise QueueFull(named, stored)


async def enqueue_offering(
    enqueue: Callable[[Sequence[NewJob]], Awaitable[list[Job]]],
    batch: Sequence[NewJob],
    queues: QueueSettingsRegistry,
    clock: Callable[[], float] = time.monotonic,
) -> list[Job]:
    """`enqueue(batch)`; the jobs a full queue refused whose queue's policy is `block`
    are offered again, with growing pauses, until they fit or the queue's
    `block_timeout` passed. Then QueueFull for what is still refused (`jobs` in batch
    order: stored Jobs, None where refused)."""
    try:
        return await enqueue(batch)
    except QueueFull as full:
        results: list[Any] = list(full.jobs)
        latest = {r.id: r for r in full.refused}  # each refused job's latest refusal
    started, pause = clock(), 0.01
    waiting = [
        i
        for i, job in enumerate(results)
        if job is None and queues.get(batch[i].queue).on_full == "block"
    ]
    while waiting:
        elapsed = clock() - started
        waiting = [i for i in waiting if elapsed < queues.get(batch[i].queue).block_timeout]
        if not waiting:
            break
        await asyncio.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)
        try:
            stored: Sequence[Any] = await enqueue([batch[i] for i in waiting])
        except QueueFull as again:
            stored = again.jobs
            latest.update((r.id, r) for r in again.refused)
        for i, job in zip(waiting, stored, strict=True):
            results[i] = job
        waiting = [i for i in waiting if results[i] is None]
    refused = [latest[batch[i].id] for i, job in enumerate(results) if job is None]
    if refused:
        raise QueueFull(refused, results)
    return results

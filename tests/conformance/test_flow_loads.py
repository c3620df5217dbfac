"""`flow_loads` (docs/flow-control.md, Operations): what holds a queue's jobs back, as
operators see it: the concurrency keys with the most running and most held (parked)
jobs, the totals, and the rate limit buckets throttled jobs wait for."""

from __future__ import annotations

import asyncio
from typing import Any

from helpers import complete, new_job

from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, FlowLoads, FlowQuery, KeyLoad
from conveyor.model.job import JobState, NewJob


def keyed(key: str, limit: int, queue: str = "default", **fields: Any) -> NewJob:
    return new_job(queue=queue, concurrency_key=key, concurrency_limit=limit, **fields)


async def fill_and_claim(backend: Backend) -> None:
    """default: user:1 (limit 1) x3, user:2 (limit 2) x4, task:export (limit 3) x1, three
    jobs of bucket stripe (not declared by the claims: they wait); other: user:1 x2.
    Two claimers at once take every job a slot lets through."""
    await backend.enqueue_jobs(
        [
            *(keyed("user:1", 1, id=f"u1-{i}") for i in range(3)),
            *(keyed("user:2", 2, id=f"u2-{i}") for i in range(4)),
            keyed("task:export", 3, id="export"),
            *(new_job(rate_key="stripe", id=f"charge-{i}") for i in range(3)),
            *(keyed("user:1", 1, queue="other", id=f"o1-{i}") for i in range(2)),
        ]
    )
    claims = await asyncio.gather(
        *(
            backend.fetch_jobs(strict_claim(["default", "other"], 10, f"w{n}", 30.0))
            for n in range(2)
        )
    )
    claimed = sorted(job.id for jobs in claims for job in jobs)
    assert claimed == ["export", "u1-0", "u2-0", "u2-1"]


async def test_the_top_keys_by_running_and_by_held_jobs_of_a_queue(backend: Backend) -> None:
    await fill_and_claim(backend)
    assert await backend.flow_loads(FlowQuery(queue="default", top=1)) == FlowLoads(
        by_running=(KeyLoad("user:2", running=2, held=2),),
        by_held=(KeyLoad("user:1", running=1, held=2),),  # a tie with user:2: by key
        running=4,
        held=4,
        keys=3,
        buckets=(("stripe", 3),),
    )
    everywhere = await backend.flow_loads(FlowQuery())
    assert everywhere.by_running == (
        KeyLoad("user:2", 2, 2),
        KeyLoad("task:export", 1, 0),
        KeyLoad("user:1", 1, 4),
    )
    assert everywhere.by_held == (KeyLoad("user:1", 1, 4), KeyLoad("user:2", 2, 2))
    assert (everywhere.running, everywhere.held, everywhere.keys) == (4, 6, 3)
    assert await backend.flow_loads(FlowQuery(queue="other")) == FlowLoads(
        by_held=(KeyLoad("user:1", 0, 2),), held=2, keys=1
    )
    assert await backend.flow_loads(FlowQuery(queue="nowhere")) == FlowLoads()


async def test_a_finished_job_leaves_the_loads_and_its_keys_next_job_moves_up(
    backend: Backend,
) -> None:
    await fill_and_claim(backend)
    first = await backend.get_job("u1-0")
    assert first is not None and first.state is JobState.RUNNING
    assert await backend.settle_jobs([complete(first)]) == []
    loads = await backend.flow_loads(FlowQuery(queue="default"))
    # u1-1 took the slot: unparked, available, neither running nor held.
    assert loads.by_held == (KeyLoad("user:2", 2, 2), KeyLoad("user:1", 0, 1))
    assert (loads.running, loads.held, loads.keys) == (3, 3, 3)


async def test_every_job_a_full_queue_sheds_is_counted_once(backend: Backend) -> None:
    """Four producers at once over a queue of 20 that sheds: 120 jobs, 20 left waiting,
    so exactly 100 shed, counted by the enqueues that shed them; deleting the shed jobs
    (as pruning does) leaves the count."""
    from conveyor.backends.params import JobFilter
    from conveyor.model.job import QueueBound

    bound = QueueBound(20, shed_oldest=True)

    async def producer(n: int) -> None:
        for batch in range(6):
            await backend.enqueue_jobs(
                [new_job(queue="mail", bound=bound, id=f"m{n}-{batch}-{i}") for i in range(5)]
            )

    await asyncio.gather(*(producer(n) for n in range(4)))
    await backend.enqueue_jobs([new_job(queue="other", id="plain")])
    stats = {s.queue: s for s in await backend.queue_stats()}
    assert (stats["mail"].shed, stats["mail"].counts[JobState.AVAILABLE]) == (100, 20)
    assert stats["other"].shed == 0
    cancelled = JobFilter(states=(JobState.CANCELLED,), queues=("mail",))
    assert (
        len(await backend.delete_jobs(BulkAction(where=cancelled, limit=1000, dry_run=False)))
        == 100
    )
    assert {s.queue: s.shed for s in await backend.queue_stats()}["mail"] == 100

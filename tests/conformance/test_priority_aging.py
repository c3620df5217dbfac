"""Priority aging (docs/flow-control.md): with aging A, a waiting job of priority p ranks
as p + waited / A, kept as the static key run_at - p * A, so claims stay index walks."""

from __future__ import annotations

import asyncio
import itertools

from helpers import claim_one, new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState

A = 60.0  # one priority level per minute waited


async def claim_order(backend: Backend, queue: str = "default") -> list[str]:
    order = []
    while jobs := await backend.fetch_jobs(strict_claim([queue], 1, "w1", 30)):
        order.append(jobs[0].id)
    return order


async def test_a_waiting_job_rises_one_level_per_aging_period(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id="low", priority=0, aging=A)])
    clock.advance(5 * A)  # low has risen 5 levels: a fresh priority-10 job still beats it
    await backend.enqueue_jobs([new_job(id="high-early", priority=10, aging=A)])
    clock.advance(6 * A)  # low has risen 11 levels now
    await backend.enqueue_jobs([new_job(id="high-late", priority=10, aging=A)])
    await backend.enqueue_jobs([new_job(id="low-fresh", priority=0, aging=A)])
    assert await claim_order(backend) == ["high-early", "low", "high-late", "low-fresh"]


async def test_without_aging_priority_always_wins(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="low", priority=0)])
    clock.advance(1000 * A)
    await backend.enqueue_jobs([new_job(id="high", priority=10)])
    assert await claim_order(backend) == ["high", "low"]


async def test_an_aging_job_ranks_with_priority_0_among_jobs_without_aging(
    backend: Backend, clock: ManualClock
) -> None:
    # A queue that gets aging while it holds jobs enqueued without: the aging job ranks
    # as a priority-0 job that started waiting priority * A earlier.
    await backend.enqueue_jobs([new_job(id="plain-5", priority=5), new_job(id="plain-0")])
    clock.advance(100)
    await backend.enqueue_jobs([new_job(id="aged-3", priority=3, aging=A)])  # as if at -80 s
    await backend.enqueue_jobs([new_job(id="aged-1", priority=1, aging=A)])  # as if at +40 s
    assert await claim_order(backend) == ["plain-5", "aged-3", "plain-0", "aged-1"]


async def test_aging_is_kept_through_retry_snooze_and_redrive(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id="aged", priority=5, aging=A, max_attempts=1)])
    job = await claim_one(backend)
    assert job.aging == A
    # Snoozed for 100 s: it ranks from its new run_at (as a priority-0 job due 300 s
    # before it), so a priority-0 job due 350 s before it goes first; ranked from its
    # first run_at, or by priority alone, it would go first itself.
    await backend.settle_jobs(
        [
            Settlement(
                job.id,
                job.lease_token,
                JobState.SCHEDULED,
                run_at=clock.now + 100,
                refund_attempt=True,
            )
        ]
    )
    clock.advance(100)
    await backend.enqueue_jobs([new_job(id="other", priority=0, aging=A, run_at=clock.now - 350)])
    assert await claim_order(backend) == ["other", "aged"]
    # Ignored for mypy: checked for None on the next line
    job = await backend.get_job("aged")  # type: ignore[assignment]
    assert job is not None and job.aging == A
    await backend.settle_jobs([Settlement("aged", job.lease_token, JobState.DEAD)])
    [redriven] = await backend.redrive_jobs(
        BulkAction(where=JobFilter(ids=("aged",)), limit=1, dry_run=False)
    )
    assert redriven.aging == A and redriven.state is JobState.AVAILABLE


async def test_the_wait_of_a_low_priority_job_under_a_flood_is_bounded(
    backend: Backend, clock: ManualClock
) -> None:
    """The bound of the docs, measured with an injected clock and four claimers: a
    priority-0 job under a flood of priority-10 jobs (8 a second, against 4 claims a
    second) is claimed after exactly the jobs that rank before it, the ones enqueued
    in the 10 * A seconds after it: 10 * A * 8 = 480 claims, at second 120."""
    aging, flood, claimers = 6.0, 8, 4
    names = itertools.count()
    await backend.enqueue_jobs([new_job(id="low", priority=0, aging=aging)])
    start = clock.now
    claimed_before = 0
    for tick in itertools.count():
        await backend.enqueue_jobs(
            [new_job(id=f"flood-{next(names):05d}", priority=10, aging=aging) for _ in range(flood)]
        )
        batches = await asyncio.gather(
            *(
                backend.fetch_jobs(strict_claim(["default"], 1, f"w{n}", 30))
                for n in range(claimers)
            )
        )
        ids = [job.id for batch in batches for job in batch]
        assert len(ids) == claimers
        if "low" in ids:
            break
        claimed_before += len(ids)
        clock.advance(1)
        assert tick < 1000, "the low-priority job starved"
    assert claimed_before == 10 * aging * flood == 480
    assert clock.now - start == 120  # 10 * A to rise, then the 480 ahead at 4 a second


async def test_the_app_gives_its_queues_aging_at_enqueue(app: Conveyor, backend: Backend) -> None:
    app.queue("bulk", aging=A)

    @app.task(name="export", queue="bulk")
    def export() -> None: ...

    @app.task(name="mail")
    def mail() -> None: ...

    bulk, plain = await app.enqueue_many_async([export.message(), mail.message()])
    assert (await backend.get_job(bulk.id)).aging == A  # type: ignore[union-attr]
    assert (await backend.get_job(plain.id)).aging is None  # type: ignore[union-attr]

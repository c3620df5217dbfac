"""Claims: atomic, ordered, bounded, fenced."""

from __future__ import annotations

import asyncio

from helpers import new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import ClaimRequest, JobFilter, JobWait, QueuePause, QueueQuota
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState


async def test_claim_orders_by_priority_then_fifo(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="low1", priority=0)])
    clock.advance(1)
    await backend.enqueue_jobs([new_job(id="high", priority=5), new_job(id="low2", priority=0)])
    clock.advance(1)
    await backend.enqueue_jobs([new_job(id="mid", priority=2), new_job(id="low3")])
    order = []
    while jobs := await backend.fetch_jobs(strict_claim(["default"], 1, "w1", 30)):
        order.append(jobs[0].id)
    assert order == ["high", "mid", "low1", "low2", "low3"]


async def test_batch_claim_returns_claim_order(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id=f"j{i}", priority=i % 3) for i in range(9)])
    jobs = await backend.fetch_jobs(strict_claim(["default"], 9, "w1", 30))
    assert [j.priority for j in jobs] == [2, 2, 2, 1, 1, 1, 0, 0, 0]


async def test_claim_respects_limit_and_leases(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job() for _ in range(5)])
    jobs = await backend.fetch_jobs(strict_claim(["default"], 3, "worker-a", 12.5))
    assert len(jobs) == 3
    for job in jobs:
        assert job.state is JobState.RUNNING and job.attempt == 1
        assert job.worker_id == "worker-a"
        assert job.lease_expires_at == clock.now + 12.5
        assert job.started_at == clock.now
    assert await backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,))) == 2


async def test_claim_only_named_queues_in_order(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [
            new_job(id="d", queue="default"),
            new_job(id="c", queue="critical"),
            new_job(id="o", queue="other"),
        ]
    )
    jobs = await backend.fetch_jobs(strict_claim(["critical", "default"], 10, "w1", 30))
    assert [j.id for j in jobs] == ["c", "d"]
    assert await backend.fetch_jobs(strict_claim(["critical", "default"], 10, "w1", 30)) == []


async def test_fencing_token_changes_on_every_claim(backend: Backend) -> None:
    from conveyor.backends.params import Settlement

    await backend.enqueue_jobs([new_job(id="f")])
    tokens = []
    for _ in range(3):
        [job] = await backend.fetch_jobs(strict_claim(["default"], 1, "w1", 30))
        tokens.append(job.lease_token)
        # Release (cold shutdown): back to available without using the attempt.
        assert (
            await backend.settle_jobs(
                [Settlement(job.id, job.lease_token, JobState.AVAILABLE, refund_attempt=True)]
            )
            == []
        )
    assert len(set(tokens)) == 3
    stored = await backend.get_job("f")
    assert stored is not None and stored.attempt == 0 and stored.state is JobState.AVAILABLE


async def test_one_job_goes_to_exactly_one_worker(backend_url: str, clock: ManualClock) -> None:
    apps = [Conveyor(backend_url, clock=clock) for _ in range(4)]
    try:
        backends = [await a.backend() for a in apps]
        await backends[0].enqueue_jobs([new_job(id=f"r{i}") for i in range(400)])

        async def drain(b: Backend, name: str) -> list[str]:
            got: list[str] = []
            while batch := await b.fetch_jobs(strict_claim(["default"], 7, name, 30)):
                got.extend(j.id for j in batch)
            return got

        results = await asyncio.gather(
            *(drain(b, f"w{i}") for i, b in enumerate(backends) for _ in range(3))
        )
        claimed = [job_id for r in results for job_id in r]
        assert len(claimed) == 400 and len(set(claimed)) == 400
    finally:
        for a in apps:
            await a.aclose()


async def test_paused_queue_is_not_claimed(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="p", queue="reports")])
    await backend.pause_queue(QueuePause(queue="reports", paused=True))
    assert await backend.fetch_jobs(strict_claim(["reports"], 10, "w1", 30)) == []
    stats = {s.queue: s for s in await backend.queue_stats()}
    assert stats["reports"].paused is True
    await backend.pause_queue(QueuePause(queue="reports", paused=False))
    [job] = await backend.fetch_jobs(strict_claim(["reports"], 10, "w1", 30))
    assert job.id == "p"


async def test_wait_for_jobs_wakes_on_enqueue_from_another_client(
    backend_url: str, clock: ManualClock
) -> None:
    consumer, producer = Conveyor(backend_url, clock=clock), Conveyor(backend_url, clock=clock)
    try:
        waiting_backend = await consumer.backend()
        producing_backend = await producer.backend()
        # Prime the listener, then wait with a long timeout: the enqueue must cut it short.
        await waiting_backend.wait_for_jobs(JobWait(queues=["default"], timeout=0.01))
        loop = asyncio.get_running_loop()
        started = loop.time()
        waiter = asyncio.create_task(
            waiting_backend.wait_for_jobs(JobWait(queues=["default"], timeout=20.0))
        )
        await producing_backend.enqueue_jobs([new_job(id="wake")])
        await asyncio.wait_for(waiter, 5.0)
        assert loop.time() - started < 5.0
        [job] = await waiting_backend.fetch_jobs(strict_claim(["default"], 1, "w1", 30))
        assert job.id == "wake"
    finally:
        await consumer.aclose()
        await producer.aclose()


def quotas(limit: int, **per_queue: int) -> ClaimRequest:
    return ClaimRequest(
        queues=tuple(QueueQuota(q, n) for q, n in per_queue.items()),
        limit=limit,
        worker_id="w1",
        lease_seconds=30,
    )


async def fill(backend: Backend, queue: str, n: int) -> None:
    await backend.enqueue_jobs([new_job(id=f"{queue}-{i}", queue=queue) for i in range(n)])


async def test_first_pass_takes_each_queues_quota(backend: Backend) -> None:
    for queue in ("a", "b", "c"):
        await fill(backend, queue, 10)
    jobs = await backend.fetch_jobs(quotas(6, a=3, b=2, c=1))
    assert [j.queue for j in jobs] == ["a"] * 3 + ["b"] * 2 + ["c"]


async def test_an_empty_or_short_queues_share_goes_to_the_others(backend: Backend) -> None:
    await fill(backend, "b", 10)
    await fill(backend, "c", 1)
    jobs = await backend.fetch_jobs(quotas(6, a=3, b=2, c=1))
    # a is empty and c had only its quota: b, which gave its whole quota, takes the rest.
    assert sorted(j.queue for j in jobs) == ["b"] * 5 + ["c"]
    jobs = await backend.fetch_jobs(quotas(6, a=3, b=2, c=1))
    assert [j.queue for j in jobs] == ["b"] * 5  # c is empty now: nothing more from it


async def test_a_paused_queues_share_goes_to_the_others(backend: Backend) -> None:
    await fill(backend, "a", 5)
    await fill(backend, "b", 5)
    await backend.pause_queue(QueuePause(queue="a", paused=True))
    jobs = await backend.fetch_jobs(quotas(4, a=3, b=1))
    assert [j.queue for j in jobs] == ["b"] * 4


async def test_a_queue_with_no_quota_this_time_still_takes_spare_capacity(backend: Backend) -> None:
    await fill(backend, "b", 3)
    jobs = await backend.fetch_jobs(quotas(1, a=1, b=0))
    assert [j.queue for j in jobs] == ["b"]

"""Global rate limits (docs/flow-control.md): a token bucket per limit, spent inside
the claim by several claimers at once, with the backend's injected clock."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import RunningWorker, eventually, new_job

from conveyor import Conveyor, Limits
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import ClaimRequest, JobFilter, JobPage, QueueQuota
from conveyor.model.clock import ManualClock
from conveyor.model.job import Job, JobState
from conveyor.rules.rate_limits import Limit, RateLimit
from conveyor.worker import WorkerConfig

STRIPE = RateLimit("stripe", rate=10.0, burst=20)  # 10 a second, 20 at once


def request(
    queues: list[str], limit: int, worker: str = "w1", limits: tuple[RateLimit, ...] = (STRIPE,)
) -> ClaimRequest:
    return ClaimRequest(
        tuple(QueueQuota(q, limit) for q in queues), limit, worker, 30.0, rate_limits=limits
    )


async def fill(
    backend: Backend,
    n: int,
    queue: str = "default",
    rate_key: str | None = "stripe",
    prefix: str = "s",
) -> list[str]:
    ids = [f"{prefix}-{i:04d}" for i in range(n)]
    for start in range(0, n, 500):
        await backend.enqueue_jobs(
            [new_job(id=i, queue=queue, rate_key=rate_key) for i in ids[start : start + 500]]
        )
    return ids


async def claim_round(
    backend: Backend, claimers: int = 4, limit: int = 10, queues: list[str] | None = None
) -> list[str]:
    """`claimers` claims at once; the ids they got (each checked to go to one claimer)."""
    claims = await asyncio.gather(
        *(
            backend.fetch_jobs(request(queues or ["default"], limit, f"w{n}"))
            for n in range(claimers)
        )
    )
    ids = [job.id for claim in claims for job in claim]
    assert len(ids) == len(set(ids))
    return ids


async def test_concurrent_claimers_get_exactly_the_buckets_tokens(
    backend: Backend, clock: ManualClock
) -> None:
    await fill(backend, 300)
    # A new bucket is full: the burst, whatever the number of claimers asking.
    assert len(await claim_round(backend)) == 20
    assert await claim_round(backend) == []
    # Then `rate` a second: 0.5 s is 5 tokens.
    clock.advance(0.5)
    assert len(await claim_round(backend)) == 5
    # 0.25 s is 2.5 tokens: 2 now, the half token kept for the next claim.
    clock.advance(0.25)
    assert len(await claim_round(backend)) == 2
    clock.advance(0.05)  # 0.5 + 0.5 tokens
    assert len(await claim_round(backend)) == 1
    # Idle for a minute: no more than the burst.
    clock.advance(60)
    assert len(await claim_round(backend, claimers=6)) == 20


async def test_a_claimer_whose_clock_read_is_older_spends_no_time_twice(
    backend: Backend, clock: ManualClock
) -> None:
    """A claimer may read the clock, then wait for another to spend the bucket: its
    `now` is then behind the bucket's. The bucket's time never goes back."""
    await fill(backend, 300)
    assert len(await claim_round(backend, claimers=1, limit=50)) == 20
    clock.advance(1.0)
    assert len(await claim_round(backend, claimers=1, limit=50)) == 10
    spent_at = clock()
    clock.advance(-0.5)  # the late claimer
    late = await backend.fetch_jobs(request(["default"], 50))
    assert list(late) == []
    # Its next token is due a tenth of a second after the bucket's time, not its own.
    assert late.next_token_at == pytest.approx(spent_at + 0.1, abs=1e-6)
    clock.advance(1.0)  # 0.5 s after the bucket's time: 5 tokens, not 10
    assert len(await claim_round(backend, claimers=1, limit=50)) == 5


async def test_every_interval_gives_its_tokens_over_many_claims(
    backend: Backend, clock: ManualClock
) -> None:
    await fill(backend, 400)
    assert len(await claim_round(backend)) == 20  # the burst
    counts = []
    for _ in range(30):
        clock.advance(0.1)  # one token each 0.1 s
        counts.append(len(await claim_round(backend, claimers=3, limit=5)))
    assert counts == [1] * 30


async def test_throttled_jobs_stay_available_with_no_attempt_used(
    backend: Backend, clock: ManualClock
) -> None:
    ids = await fill(backend, 25)
    claimed = await backend.fetch_jobs(request(["default"], 50))
    assert [job.id for job in claimed] == ids[:20]  # in claim order
    for job_id in ids[20:]:
        job = await backend.get_job(job_id)
        assert job is not None
        assert (job.state, job.attempt, job.worker_id, job.rate_key) == (
            JobState.AVAILABLE,
            0,
            None,
            "stripe",
        )
    # The claim says when the next token is due: 1 / rate seconds from now.
    empty = await backend.fetch_jobs(request(["default"], 50))
    assert empty == [] and empty.next_token_at == pytest.approx(clock() + 0.1, abs=1e-6)


async def test_no_hint_when_nothing_is_held_back(backend: Backend, clock: ManualClock) -> None:
    await fill(backend, 20)
    assert len(await backend.fetch_jobs(request(["default"], 50))) == 20
    empty = await backend.fetch_jobs(request(["default"], 50))
    assert empty == [] and empty.next_token_at is None  # bucket empty, but no job waits


async def test_other_jobs_of_the_queue_are_not_held_up(
    backend: Backend, clock: ManualClock
) -> None:
    limits = (RateLimit("stripe", rate=1.0, burst=2),)
    throttled = await fill(backend, 200)  # enqueued first: ahead in claim order
    free = await fill(backend, 12, rate_key=None, prefix="f")
    claim = [j.id for j in await backend.fetch_jobs(request(["default"], 10, limits=limits))]
    assert claim == throttled[:2] + free[:8]
    claim = [j.id for j in await backend.fetch_jobs(request(["default"], 10, limits=limits))]
    assert claim == free[8:]
    assert await backend.fetch_jobs(request(["default"], 10, limits=limits)) == []
    # A plain claim (a worker with no limits) leaves rate-limited jobs alone as well.
    assert await backend.fetch_jobs(strict_claim(["default"], 10, "w2", 30.0)) == []


async def test_a_bucket_is_shared_by_queues_and_tasks(backend: Backend, clock: ManualClock) -> None:
    limits = (RateLimit("stripe", rate=1.0, burst=3),)
    await fill(backend, 10, queue="charges", prefix="c")
    await fill(backend, 10, queue="refunds", prefix="r")
    claims = await asyncio.gather(
        *(
            backend.fetch_jobs(request(["charges", "refunds"], 10, f"w{n}", limits))
            for n in range(4)
        )
    )
    assert sum(len(c) for c in claims) == 3
    clock.advance(2)
    claims = await asyncio.gather(
        *(backend.fetch_jobs(request(["refunds"], 10, f"w{n}", limits)) for n in range(4))
    )
    assert [job.queue for c in claims for job in c] == ["refunds", "refunds"]


async def test_a_bucket_the_worker_does_not_declare_holds_its_jobs(
    backend: Backend, clock: ManualClock
) -> None:
    await fill(backend, 3, rate_key="unknown")
    assert await backend.fetch_jobs(request(["default"], 10)) == []
    job = await backend.get_job("s-0000")
    assert job is not None and (job.state, job.attempt) == (JobState.AVAILABLE, 0)


async def test_two_buckets_in_one_queue_are_spent_apart(
    backend: Backend, clock: ManualClock
) -> None:
    limits = (RateLimit("a", rate=1.0, burst=2), RateLimit("b", rate=1.0, burst=3))
    await fill(backend, 10, rate_key="a", prefix="a")
    await fill(backend, 10, rate_key="b", prefix="b")
    got = await backend.fetch_jobs(request(["default"], 10, limits=limits))
    assert sorted(job.id for job in got) == ["a-0000", "a-0001", "b-0000", "b-0001", "b-0002"]


async def test_retried_and_delayed_jobs_keep_their_bucket(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id="later", rate_key="stripe", run_at=clock() + 5)])
    clock.advance(5)
    limits = (RateLimit("stripe", rate=1.0, burst=1),)
    [job] = await backend.fetch_jobs(request(["default"], 10, limits=limits))
    assert job.id == "later" and job.rate_key == "stripe"


# --- declared on the app ----------------------------------------------------------------
async def test_the_app_stores_each_jobs_bucket(app: Conveyor) -> None:
    app.rate_limit("stripe", "100/s", burst=20)
    app.queue("bulk", rate_limit="10/m")

    @app.task(limits=Limits(rate_key="stripe"))
    def charge() -> None: ...

    @app.task(queue="mail", limits=Limits(rate_limit="5/s"))
    def send() -> None: ...

    @app.task(queue="bulk")
    def crunch() -> None: ...

    @app.task(queue="bulk", limits=Limits(rate_key="stripe"))
    def refund() -> None: ...

    @app.task
    def plain() -> None: ...

    handles = [await t.enqueue_async() for t in (charge, send, crunch, refund, plain)]
    keys = [(await app.admin.get(h.id)).rate_key for h in handles]  # type: ignore[union-attr]
    assert keys == ["stripe", f"task:{send.name}", "queue:bulk", "stripe", None]
    assert {(limit.key, limit.rate, limit.burst) for limit in app.rate_limits} == {
        ("stripe", 100.0, 20),
        (f"task:{send.name}", 5.0, 5),
        ("queue:bulk", 10 / 60, 10),
    }


async def test_throttled_jobs_are_counted_and_listed(backend: Backend, clock: ManualClock) -> None:
    ids = await fill(backend, 25)
    await fill(backend, 3, rate_key=None, prefix="f")
    assert len(await backend.fetch_jobs(request(["default"], 50))) == 23
    [stats] = await backend.queue_stats()
    assert stats.counts == {JobState.AVAILABLE: 5, JobState.RUNNING: 23}
    assert stats.throttled == 5
    waiting = JobFilter(states=(JobState.AVAILABLE,), queues=("default",))
    assert await backend.count_jobs(waiting) == 5
    assert sorted(j.id for j in await backend.list_jobs(JobPage(where=waiting))) == ids[20:]
    # An operator's cancel finds a throttled job in its lane.
    cancelled = await backend.cancel_job(ids[24])
    assert cancelled is not None and cancelled.state is JobState.CANCELLED
    clock.advance(60)
    claimed = await backend.fetch_jobs(request(["default"], 50))
    assert sorted(j.id for j in claimed) == ids[20:24]


# --- the worker ---------------------------------------------------------------------------
async def test_a_throttled_worker_sleeps_until_the_next_token(live_app: Conveyor) -> None:
    starts: list[float] = []

    @live_app.task(name="tests.limited", limits=Limits(rate_limit=Limit(4, per=1.0, burst=1)))
    def limited() -> None:
        starts.append(time.monotonic())

    await live_app.enqueue_many_async([limited.message() for _ in range(40)])
    backend = await live_app.backend()
    claims: list[int] = []
    fetch = backend.fetch_jobs

    async def counted(request: ClaimRequest) -> list[Job]:
        jobs = await fetch(request)
        claims.append(len(jobs))
        return jobs

    # Ignored for mypy: a counting wrapper in place of the verb
    backend.fetch_jobs = counted  # type: ignore[assignment, method-assign]
    config = WorkerConfig(queues=("default",), concurrency=10, scheduler=False)
    async with RunningWorker(live_app, config):
        await eventually(lambda: _at_least(starts, 9), timeout=20)
    # 9 jobs at 4 a second after the first: 2 s, one token at a time.
    assert starts[8] - starts[0] >= 2.0 * 0.9
    # Each claim comes when a token is due (or a job ended): no polling in between.
    # A worker that spun would have made thousands of claims here.
    assert len(claims) <= 2 * sum(claims) + 4, claims
    jobs = await live_app.admin.list(JobFilter(states=(JobState.AVAILABLE,)), limit=100)
    assert jobs and all(job.attempt == 0 for job in jobs)


async def _at_least(items: list[float], n: int) -> bool:
    return len(items) >= n

"""Results kept for a while (result_ttl, conveyor.rules.results), on every backend: the
completion stores the expiry, reads refuse the result from then on with
ResultExpired, the prune loop clears it by the index (once, whoever runs it), with
its blob when it was stored apart, and leaves the job; a workflow member whose
parent's result expired before it ran ends dead saying so. Time is the injected
clock throughout; the worker tests run on it too (they wait on real time only for
the worker to get through its jobs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from helpers import RunningWorker, claim_one, complete, new_job, wait_finished

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import ResultSweep, Retention, Settlement
from conveyor.cli.render import job_detail
from conveyor.model.clock import ManualClock
from conveyor.model.errors import InvalidJob, JobFailed, ResultExpired
from conveyor.model.job import JobState
from conveyor.payloads.claim_check import reference_in
from conveyor.rules.results import RESULT_TTL_META_KEY
from conveyor.worker import WorkerConfig

S = JobState
FAST = WorkerConfig(queues=("default",), concurrency=2, poll_interval=0.05)


def kept(job_id: str, ttl: float | None = 60.0) -> dict[str, object]:
    return {"id": job_id, "meta": {} if ttl is None else {RESULT_TTL_META_KEY: ttl}}


async def test_the_completion_stores_the_expiry_and_the_prune_clears_it_once(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [new_job(**kept(f"t{i}")) for i in range(6)]  # type: ignore[arg-type]
        + [new_job(id="plain")]
    )
    jobs = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30.0))
    finished_at = clock.now
    await backend.settle_jobs(
        [
            Settlement(
                j.id,
                j.lease_token,
                S.COMPLETED,
                result=f'"{j.id}"',
                result_ttl=None if j.id == "plain" else 60.0,
            )
            for j in jobs
        ]
    )
    t0 = await backend.get_job("t0")
    plain = await backend.get_job("plain")
    assert t0 is not None and t0.result_expires_at == finished_at + 60
    assert t0.result_value == "t0" and not t0.result_expired(clock.now + 59)
    assert t0.result_expired(clock.now + 60)  # from its expiry on, by the reader's clock
    assert plain is not None and plain.result_expires_at is None
    assert await backend.expire_results(ResultSweep(now=finished_at + 59, limit=100)) == []
    # Two prune loops at once: each result is cleared by exactly one of them.
    first, second = await asyncio.gather(
        backend.expire_results(ResultSweep(now=finished_at + 61, limit=100)),
        backend.expire_results(ResultSweep(now=finished_at + 61, limit=100)),
    )
    assert sorted(first + second) == [f"t{i}" for i in range(6)]
    assert (
        await backend.expire_results(ResultSweep(now=finished_at + 10**6, limit=100)) == []
    )  # never revisited
    t0 = await backend.get_job("t0")
    assert t0 is not None and t0.state is S.COMPLETED and t0.result is None
    assert t0.result_expires_at == finished_at + 60  # the job says why its result is gone
    with pytest.raises(ResultExpired, match="t0 completed, but its result expired"):
        _ = t0.result_value
    plain = await backend.get_job("plain")
    assert plain is not None and plain.result_value == "plain"


async def test_expire_results_takes_at_most_its_limit(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(**kept(f"b{i}", 1.0)) for i in range(5)])  # type: ignore[arg-type]
    jobs = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30.0))
    await backend.settle_jobs(
        [Settlement(j.id, j.lease_token, S.COMPLETED, result="1", result_ttl=1.0) for j in jobs]
    )
    later = clock.now + 2
    batches = [await backend.expire_results(ResultSweep(now=later, limit=2)) for _ in range(4)]
    assert [len(b) for b in batches] == [2, 2, 1, 0]
    assert sorted(i for b in batches for i in b) == [f"b{i}" for i in range(5)]


async def test_a_result_dropped_or_deleted_with_its_job_has_nothing_to_expire(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(**kept("dropped")), new_job(**kept("deleted"))])  # type: ignore[arg-type]
    jobs = {j.id: j for j in await backend.fetch_jobs(strict_claim(["default"], 2, "w1", 30))}
    await backend.settle_jobs(
        [
            Settlement(
                "dropped", jobs["dropped"].lease_token, S.COMPLETED, result=None, result_ttl=60.0
            ),
            Settlement(
                "deleted", jobs["deleted"].lease_token, S.COMPLETED, result="1", result_ttl=60.0
            ),
        ]
    )
    dropped = await backend.get_job("dropped")
    assert dropped is not None and dropped.result_expires_at is None  # no result: no expiry
    assert dropped.result_value is None
    await backend.prune_jobs(Retention(completed_before=clock.now + 1, dead_before=clock.now))
    assert await backend.get_job("deleted") is None
    assert await backend.expire_results(ResultSweep(now=clock.now + 61, limit=100)) == []


# --- through the app: options, reads, the prune loop ----------------------------------
async def test_task_and_enqueue_options_set_the_ttl(app: Conveyor) -> None:
    @app.task(name="ttl.task", result_ttl=timedelta(hours=1))
    def task() -> int:
        return 1

    @app.task(name="ttl.none")
    def none() -> int:
        return 1

    assert task.message().meta[RESULT_TTL_META_KEY] == 3600.0
    assert task.options(result_ttl=5).message().meta[RESULT_TTL_META_KEY] == 5.0
    assert RESULT_TTL_META_KEY not in none.message().meta  # default: kept with the job
    with pytest.raises(InvalidJob, match="result_ttl"):
        none.options(result_ttl=0)
    with pytest.raises(Exception, match="result_ttl"):
        app.task(name="ttl.bad", result_ttl=-1)(lambda: None)


async def test_reading_an_expired_result_says_so(app: Conveyor, clock: ManualClock) -> None:
    @app.task(name="ttl.value", result_ttl=30)
    def value() -> int:
        return 42

    handle = await value.enqueue_async()
    async with RunningWorker(app, FAST):
        assert await handle.result_async(20) == 42
    job = await app.admin.get(handle.id)
    assert job is not None and job.result_expires_at == job.finished_at + 30  # type: ignore[operator]
    clock.advance(30)
    with pytest.raises(ResultExpired):  # at its expiry, before any prune ran
        await handle.result_async(5)
    assert (await app.admin.get(handle.id)).result_value == 42  # type: ignore[union-attr]
    await app.admin.prune(completed_before=0, dead_before=0)  # retention keeps the job
    job = await app.admin.get(handle.id)
    assert job is not None and job.state is S.COMPLETED and job.result is None
    with pytest.raises(ResultExpired):
        _ = job.result_value
    with pytest.raises(ResultExpired):
        await handle.result_async(5)
    shown = job_detail(job, [], [], None, app.rate_limits)  # `conveyor jobs show`
    assert "(expired: past its result_ttl)" in shown and "result kept to" in shown


@pytest.fixture
async def big_results(backend_url: str, clock: ManualClock) -> AsyncIterator[Conveyor]:
    app = Conveyor(backend_url, clock=clock, claim_check_threshold=1024)
    yield app
    await app.aclose()
    app.close()


async def test_an_expired_result_stored_apart_is_deleted_and_the_arguments_kept(
    big_results: Conveyor, clock: ManualClock
) -> None:
    @big_results.task(name="ttl.big", result_ttl=10)
    def big(data: str) -> str:
        return data * 2

    handle = await big.enqueue_async("x" * 4000)
    async with RunningWorker(big_results, FAST):
        assert await handle.result_async(20) == "x" * 8000
    job = await big_results.admin.get(handle.id)
    assert job is not None
    result_ref, args_ref = reference_in(job.result), reference_in(job.payload)
    assert result_ref is not None and args_ref is not None
    store = await big_results.claim_check.store()
    clock.advance(11)
    await big_results.admin.prune(completed_before=0, dead_before=0)
    assert await store.get_blob(result_ref.key) is None
    assert await store.get_blob(args_ref.key) is not None  # the job is still listed
    job = await big_results.admin.get(handle.id)
    assert job is not None and job.result is None
    assert (
        await big_results.claim_check.arguments_text(job)
        == '{"args":["' + "x" * 4000 + '"],"kwargs":{}}'
    )


async def test_a_member_whose_parent_result_expired_ends_dead_saying_so(
    app: Conveyor, clock: ManualClock
) -> None:
    from conveyor import chain

    @app.task(name="ttl.first", result_ttl=5)
    def first() -> int:
        return 1

    @app.task(name="ttl.then", max_attempts=3)
    def then(value: int) -> int:
        return value + 1

    flow = await chain(first.s(), then.s()).enqueue_async()
    backend = await app.backend()
    parent = await claim_one(backend)  # the parent ends; its dependant waits for a worker
    await backend.settle_jobs(
        [Settlement(parent.id, parent.lease_token, S.COMPLETED, result="1", result_ttl=5.0)]
    )
    clock.advance(6)
    async with RunningWorker(app, FAST):
        with pytest.raises(JobFailed, match="expired"):
            await flow.result_async(20)
    member = (await wait_finished(app, [flow.exits[0].id]))[flow.exits[0].id]
    assert member.state is S.DEAD and member.attempt == 1  # not retried: it cannot come back
    assert [e.type for e in member.errors] == ["CorruptPayload"]
    assert f"the result of its parent {parent.id} expired" in member.errors[0].message


async def test_a_plain_completion_keeps_no_expiry(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="p")])
    await backend.settle_jobs([complete(await claim_one(backend), "3")])
    job = await backend.get_job("p")
    assert job is not None and job.result_expires_at is None and job.result_value == 3

"""The idempotency toolkit on every backend: the fence grows with every claim of a
job, the idempotency key is kept through retries, rescues and redrives, and
`current_job().once()` runs an effect once per key (records by the injected clock)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from helpers import RunningWorker, claim_one, error, eventually, wait_finished

from conveyor import Conveyor, RetryOptions, Snooze, current_job
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter, RecordKey, Settlement
from conveyor.context import JobContext
from conveyor.model.clock import ManualClock
from conveyor.model.errors import OnceWindowTooShort
from conveyor.model.job import Job, JobState
from conveyor.once import ONCE_NAMESPACE
from conveyor.worker import WorkerConfig
from conveyor.worker.rescue import rescue_expired

DEAD = JobFilter(states=(JobState.DEAD,))


class Crash(BaseException):
    """Stands in for the process dying inside the effect: nothing after it runs (once()
    frees the key on an Exception, never on this)."""


def context(backend: Backend, job: Job) -> JobContext:
    return JobContext(job, backend, asyncio.get_running_loop(), "w1")


# --- the fence --------------------------------------------------------------------------
async def test_fence_grows_on_every_claim_across_retry_rescue_and_redrive(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    @app.task(name="charge", idempotency_key="charge:{order_id}", max_attempts=3)
    def charge(order_id: int) -> None: ...

    handle = await charge.enqueue_async(42)
    fences: list[int] = []
    keys: list[str] = []

    async def claimed() -> Job:
        job = await claim_one(backend, lease=10)
        ctx = context(backend, job)
        fences.append(ctx.fence)
        keys.append(ctx.idempotency_key)
        return job

    first = await claimed()  # fails: retried
    await backend.settle_jobs(
        [
            Settlement(
                first.id, first.lease_token, JobState.RETRYABLE, error=error(1), run_at=clock.now
            )
        ]
    )
    await claimed()  # its worker dies: rescued after the lease
    clock.advance(11)
    assert await rescue_expired(backend, backend.clock()) == [handle.id]
    third = await claimed()  # the last attempt: dead
    await backend.settle_jobs(
        [Settlement(third.id, third.lease_token, JobState.DEAD, error=error(3))]
    )
    [redriven] = await backend.redrive_jobs(BulkAction(where=DEAD, limit=10, dry_run=False))
    assert redriven.attempt == 0  # a redrive resets the attempts ...
    fourth = await claimed()
    assert fourth.attempt == 1
    # ... and never the fence: each claim holds a larger one than every claim before.
    assert fences == sorted(set(fences)) and len(fences) == 4
    assert fences[0] >= 1
    assert keys == ["charge:42"] * 4


async def test_idempotency_key_defaults_to_the_job_id(app: Conveyor, backend: Backend) -> None:
    @app.task(name="plain")
    def plain(n: int) -> None: ...

    handle = await plain.enqueue_async(1)
    job = await claim_one(backend)
    assert context(backend, job).idempotency_key == handle.id


# --- once -------------------------------------------------------------------------------
async def _two_attempts(
    app: Conveyor, backend: Backend, clock: ManualClock, **task_options: object
) -> tuple[JobContext, JobContext]:
    """A job claimed, failed and claimed again: the contexts of its two attempts."""

    @app.task(name="pay", max_attempts=5, **task_options)  # type: ignore[call-overload]
    def pay(order_id: int) -> None: ...

    await pay.enqueue_async(7)
    first = await claim_one(backend, lease=10)
    await backend.settle_jobs(
        [
            Settlement(
                first.id, first.lease_token, JobState.RETRYABLE, error=error(1), run_at=clock.now
            )
        ]
    )
    second = await claim_one(backend, lease=10)
    return context(backend, first), context(backend, second)


async def test_once_runs_the_effect_once_and_a_later_attempt_gets_its_result(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, second = await _two_attempts(app, backend, clock)
    effects: list[int] = []

    async def create_charge() -> dict[str, object]:
        effects.append(first.attempt)
        return {"charge": "ch_1", "amount": 500}

    assert await first.once("charge:7", create_charge) == {"charge": "ch_1", "amount": 500}
    assert await second.once("charge:7", create_charge) == {"charge": "ch_1", "amount": 500}
    assert effects == [1]
    assert await second.once("receipt:7", create_charge) == {"charge": "ch_1", "amount": 500}
    assert effects == [1, 1]  # another key: another effect


async def test_once_after_a_crash_inside_the_effect_waits_for_the_claims_lease_then_runs_again(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, second = await _two_attempts(app, backend, clock)
    effects: list[int] = []

    async def effect(ctx: JobContext) -> str:
        effects.append(ctx.attempt)
        if ctx is first:
            raise Crash  # after the effect, before the done-mark
        return f"done by attempt {ctx.attempt}"

    with pytest.raises(Crash):
        await first.once("charge:7", lambda: effect(first), lease=30)
    clock.advance(12)
    # The claim still lives (12 of its 30 s): the next attempt does not run the effect
    # beside a possibly stalled first one; it snoozes (no attempt used) and looks again.
    with pytest.raises(Snooze) as held:
        await second.once("charge:7", lambda: effect(second), lease=30)
    assert held.value.delay == 5.0  # rechecked within 5 s, however long the lease
    clock.advance(17)
    with pytest.raises(Snooze) as held:
        await second.once("charge:7", lambda: effect(second), lease=30)
    assert held.value.delay == pytest.approx(1.0)  # the claim's last second
    clock.advance(1.0)
    assert await second.once("charge:7", lambda: effect(second), lease=30) == "done by attempt 2"
    assert effects == [1, 2]
    assert await second.once("charge:7", lambda: effect(second)) == "done by attempt 2"
    assert effects == [1, 2]


async def test_once_effect_that_raises_frees_the_key_at_once(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, second = await _two_attempts(app, backend, clock)
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(len(calls))
        if len(calls) == 1:
            raise ConnectionError("provider down")
        return "sent"

    with pytest.raises(ConnectionError):
        await first.once("mail:7", flaky)
    assert await second.once("mail:7", flaky) == "sent"  # no wait: the key was released
    assert calls == [0, 1]


async def test_once_waits_while_another_job_holds_the_key(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    @app.task(name="refund")
    def refund(order_id: int) -> None: ...

    await refund.enqueue_async(1)
    await refund.enqueue_async(1)  # the same refund asked twice
    a = context(backend, await claim_one(backend))
    b = context(backend, await claim_one(backend))
    started = asyncio.Event()
    finish = asyncio.Event()

    async def slow_refund() -> str:
        started.set()
        await finish.wait()
        return "re_1"

    running = asyncio.create_task(a.once("refund:1", slow_refund, lease=2))
    await started.wait()
    with pytest.raises(Snooze) as held:
        await b.once("refund:1", slow_refund, lease=2)
    assert held.value.delay == 2.0
    finish.set()
    assert await running == "re_1"
    assert await b.once("refund:1", slow_refund, lease=2) == "re_1"


async def test_once_refuses_a_ttl_shorter_than_the_job_may_still_run_and_defaults_to_it(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, second = await _two_attempts(
        app, backend, clock, retry=RetryOptions(backoff_base=1, backoff_cap=600)
    )
    first.retry_policy = second.retry_policy = app.tasks["pay"].defaults.retry
    effects: list[str] = []

    async def effect() -> str:
        effects.append("ran")
        return "ok"

    # 5 attempts: backoffs of at most 2 + 4 + 8 + 16 s, then 14 days dead for a redrive.
    window = 30 + 14 * 24 * 3600
    with pytest.raises(OnceWindowTooShort, match=f"ttl >= {window}"):
        await first.once("k", effect, ttl=timedelta(days=14))
    assert (
        effects == []
        and await backend.get_record(RecordKey(namespace=ONCE_NAMESPACE, key="k")) is None
    )
    assert await first.once("k", effect) == "ok"  # no ttl: exactly the window
    clock.advance(window - 1)
    assert await second.once("k", effect) == "ok" and effects == ["ran"]
    clock.advance(2)
    assert await second.once("k", effect) == "ok" and effects == ["ran", "ran"]


async def test_once_refuses_a_key_lease_or_ttl_it_cannot_store_before_the_effect(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, _ = await _two_attempts(app, backend, clock)

    async def effect() -> None:
        raise AssertionError("never run")

    for bad in ("", "a\nb", "x" * 256):
        with pytest.raises(ValueError, match="once"):
            await first.once(bad, effect)
    for lease in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="lease must be a positive duration"):
            await first.once("k", effect, lease=lease)
    with pytest.raises(ValueError, match="ttl must be a finite duration"):
        await first.once("k", effect, ttl=float("inf"))
    assert await backend.list_records(ONCE_NAMESPACE) == {}


# --- once under a real worker ----------------------------------------------------------------
async def test_two_jobs_with_one_key_under_a_worker_run_the_effect_once(live_app: Conveyor) -> None:
    effects: list[str] = []
    release = asyncio.Event()

    @live_app.task(name="charge_order", idempotency_key="charge:{order_id}")
    async def charge_order(order_id: int) -> str:
        ctx = current_job()

        async def create_charge() -> str:
            effects.append(ctx.id)
            await release.wait()
            return f"ch_{order_id}"

        # The twin snoozes for the claim's lease (2 s), so the first one is done by then.
        return await ctx.once(ctx.idempotency_key, create_charge, lease=2)

    a = await charge_order.enqueue_async(9)
    b = await charge_order.enqueue_async(9)
    config = WorkerConfig(concurrency=4, poll_interval=0.05, rescue_interval=0.1, lease=5)
    async with RunningWorker(live_app, config):

        async def one_snoozed() -> bool:
            jobs = [await live_app.admin.get(h.id) for h in (a, b)]
            return any(j is not None and j.state is JobState.SCHEDULED for j in jobs)

        await eventually(one_snoozed)
        release.set()
        jobs = await wait_finished(live_app, [a.id, b.id])
    assert len(effects) == 1
    assert {j.result_value for j in jobs.values()} == {"ch_9"}
    assert all(
        j.state is JobState.COMPLETED and j.attempt == 1 and not j.errors for j in jobs.values()
    )


async def test_once_whose_claim_expired_during_the_effect_still_marks_a_free_key_done(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, second = await _two_attempts(app, backend, clock)

    async def slow() -> str:
        clock.advance(3)  # longer than the claim's lease; nobody took the key meanwhile
        return "ok"

    started = clock.now
    assert await first.once("k", slow, lease=2) == "ok"
    assert await second.once("k", slow, lease=2) == "ok"  # done: not run again
    assert clock.now == started + 3  # the effect ran once
    record = await backend.get_record(RecordKey(namespace=ONCE_NAMESPACE, key="k"))
    assert record is not None and '"state":"done"' in record


async def test_once_whose_claim_was_taken_during_the_effect_says_so_and_leaves_the_other(
    app: Conveyor, backend: Backend, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = await _two_attempts(app, backend, clock)
    started = asyncio.Event()
    finish = asyncio.Event()

    async def slow() -> str:
        started.set()
        await finish.wait()
        return "slow"

    async def fast() -> str:
        return "fast"

    running = asyncio.create_task(first.once("k", slow, lease=2))
    await started.wait()
    clock.advance(3)  # the first claim expires: the other attempt takes the key and finishes
    assert await second.once("k", fast, lease=2) == "fast"
    finish.set()
    assert await running == "slow"  # its effect happened; the stored one stays the other's
    assert "another attempt took the key, so the effect ran twice" in caplog.text
    assert await second.once("k", fast) == "fast"


async def test_once_twice_at_a_time_with_one_key_in_one_attempt_is_refused(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    first, _ = await _two_attempts(app, backend, clock)
    gate = asyncio.Event()

    async def wait() -> None:
        await gate.wait()

    running = asyncio.create_task(first.once("k", wait))
    while await backend.get_record(RecordKey(namespace=ONCE_NAMESPACE, key="k")) is None:
        await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError, match="already running in this attempt"):
        await first.once("k", wait)
    gate.set()
    await running

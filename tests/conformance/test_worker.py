"""The worker against every backend: outcomes, bad input, limits, fencing, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from helpers import RunningWorker, eventually, new_job, wait_finished

from conveyor import Cancel, Conveyor, Retry, RetryOptions, Snooze, current_job
from conveyor.backends.params import JobFilter
from conveyor.handle import JobHandle
from conveyor.model.job import JobState
from conveyor.worker import ExitStatus, Worker, WorkerConfig

FAST = WorkerConfig(concurrency=4, poll_interval=0.05, rescue_interval=0.1, lease=5)


async def test_runs_sync_and_async_tasks_once_each(live_app: Conveyor) -> None:
    runs: Counter[str] = Counter()

    @live_app.task(name="add")
    def add(a: int, b: int) -> int:
        runs["add"] += 1
        return a + b

    @live_app.task(name="greet")
    async def greet(name: str, *, punct: str = "!") -> str:
        runs["greet"] += 1
        return f"hi {name}{punct}"

    handles: list[JobHandle[Any]] = [await add.enqueue_async(i, i) for i in range(20)]
    handles.append(await greet.enqueue_async("ana", punct="?"))
    async with RunningWorker(live_app, FAST):
        jobs = await wait_finished(live_app, [h.id for h in handles])
    assert runs == {"add": 20, "greet": 1}
    assert [jobs[h.id].result_value for h in handles] == [2 * i for i in range(20)] + ["hi ana?"]
    assert all(j.state is JobState.COMPLETED and j.attempt == 1 for j in jobs.values())


async def test_transient_error_retries_then_succeeds(live_app: Conveyor) -> None:
    attempts: list[int] = []

    @live_app.task(name="flaky", retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05))
    def flaky() -> str:
        attempts.append(current_job().attempt)
        if len(attempts) < 3:
            raise ConnectionError("smtp down")
        return "sent"

    handle = await flaky.enqueue_async()
    async with RunningWorker(live_app, FAST):
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert attempts == [1, 2, 3]
    assert job.state is JobState.COMPLETED and job.result_value == "sent"
    assert [(e.attempt, e.type, e.message) for e in job.errors] == [
        (1, "ConnectionError", "smtp down"),
        (2, "ConnectionError", "smtp down"),
    ]
    assert "Traceback" in job.errors[0].traceback and job.errors[0].host


async def test_error_classification(live_app: Conveyor) -> None:
    calls: Counter[str] = Counter()

    @live_app.task(name="validation")
    def validation() -> None:
        calls["validation"] += 1
        raise ValueError("bad email")

    @live_app.task(name="only_timeouts", retry_on=(TimeoutError,), max_attempts=5)
    def only_timeouts() -> None:
        calls["only_timeouts"] += 1
        raise ConnectionError("not listed: dead at once")

    @live_app.task(name="never_key", dead_on=(KeyError,), max_attempts=5)
    def never_key() -> None:
        calls["never_key"] += 1
        raise KeyError("gone")

    @live_app.task(
        name="poison", max_attempts=3, retry=RetryOptions(backoff_base=0.001, backoff_cap=0.01)
    )
    def poison() -> None:
        calls["poison"] += 1
        raise RuntimeError("always")

    handles = [await t.enqueue_async() for t in (validation, only_timeouts, never_key, poison)]
    async with RunningWorker(live_app, FAST):
        jobs = await wait_finished(live_app, [h.id for h in handles])
    assert calls == {"validation": 1, "only_timeouts": 1, "never_key": 1, "poison": 3}
    assert all(j.state is JobState.DEAD for j in jobs.values())
    poisoned = jobs[handles[3].id]
    assert [e.attempt for e in poisoned.errors] == [1, 2, 3]
    assert poisoned.first_failure_at is not None and poisoned.last_failure_at is not None


async def test_control_outcomes(live_app: Conveyor) -> None:
    seen: dict[str, list[int]] = {"retry": [], "snooze": [], "cancel": []}

    @live_app.task(name="asks_retry", max_attempts=5)
    def asks_retry() -> str:
        seen["retry"].append(current_job().attempt)
        if len(seen["retry"]) == 1:
            raise Retry(after=0.01)
        return "done"

    @live_app.task(name="snoozes")
    async def snoozes() -> str:
        seen["snooze"].append(current_job().attempt)
        if len(seen["snooze"]) < 3:
            raise Snooze(0.01)
        return "woke"

    @live_app.task(name="cancels", max_attempts=5)
    def cancels() -> None:
        seen["cancel"].append(current_job().attempt)
        raise Cancel("account closed")

    handles = [await t.enqueue_async() for t in (asks_retry, snoozes, cancels)]
    async with RunningWorker(live_app, FAST):
        jobs = await wait_finished(live_app, [h.id for h in handles])
    assert seen == {"retry": [1, 2], "snooze": [1, 1, 1], "cancel": [1]}
    assert jobs[handles[0].id].state is JobState.COMPLETED
    assert jobs[handles[1].id].state is JobState.COMPLETED and jobs[handles[1].id].attempt == 1
    cancelled = jobs[handles[2].id]
    assert cancelled.state is JobState.DEAD and cancelled.errors[-1].message == "account closed"


async def test_bad_input_never_stops_the_worker(live_app: Conveyor) -> None:
    @live_app.task(name="fine")
    def fine() -> str:
        return "ok"

    @live_app.task(name="exits")
    async def exits() -> None:
        raise SystemExit(3)

    @live_app.task(name="interrupts")
    def interrupts() -> None:
        raise KeyboardInterrupt

    @live_app.task(name="two_args")
    def two_args(a: int, b: int) -> int:
        return a + b

    backend = await live_app.backend()
    await backend.enqueue_jobs(
        [
            new_job(id="unknown", task="no.such.task", max_attempts=1),
            new_job(id="corrupt", task="fine", payload="{not json"),
            new_job(id="wrong-shape", task="fine", payload='{"args": {"a": 1}}'),
            new_job(id="bad-args", task="two_args", payload='{"args":[1],"kwargs":{}}'),
            new_job(id="exits", task="exits", max_attempts=1),
            new_job(id="interrupts", task="interrupts", max_attempts=1),
            new_job(id="fine", task="fine"),
        ]
    )
    ids = ["unknown", "corrupt", "wrong-shape", "bad-args", "exits", "interrupts", "fine"]
    async with RunningWorker(live_app, FAST) as worker:
        jobs = await wait_finished(live_app, ids)
        assert worker.in_flight == 0
    errors = {
        job_id: (jobs[job_id].state, jobs[job_id].errors[-1].type)
        for job_id in ids
        if jobs[job_id].errors
    }
    assert errors == {
        "unknown": (JobState.DEAD, "UnknownTask"),
        "corrupt": (JobState.DEAD, "CorruptPayload"),
        "wrong-shape": (JobState.DEAD, "CorruptPayload"),
        "bad-args": (JobState.DEAD, "ArgumentValidationError"),
        "exits": (JobState.DEAD, "SystemExit"),
        "interrupts": (JobState.DEAD, "KeyboardInterrupt"),
    }
    assert jobs["fine"].state is JobState.COMPLETED
    assert "no.such.task" in jobs["unknown"].errors[0].message


async def test_unknown_task_retries_for_a_deploy_in_progress(live_app: Conveyor) -> None:
    backend = await live_app.backend()
    await backend.enqueue_jobs([new_job(id="future-task", task="deployed.later", max_attempts=5)])
    async with RunningWorker(live_app, FAST):
        await eventually(lambda: _state_is(live_app, "future-task", JobState.RETRYABLE))


async def _state_is(app: Conveyor, job_id: str, state: JobState) -> bool:
    job = await app.admin.get(job_id)
    return job is not None and job.state is state


async def test_never_more_jobs_than_concurrency(live_app: Conveyor) -> None:
    now_running, peak = 0, 0

    @live_app.task(name="slowish")
    async def slowish() -> None:
        nonlocal now_running, peak
        now_running += 1
        peak = max(peak, now_running)
        await asyncio.sleep(0.01)
        now_running -= 1

    handles = [await slowish.enqueue_async() for _ in range(30)]
    config = WorkerConfig(concurrency=3, poll_interval=0.05)
    async with RunningWorker(live_app, config):
        await wait_finished(live_app, [h.id for h in handles])
    assert peak == 3


async def test_cooperative_cancel_of_a_running_job(live_app: Conveyor) -> None:
    started = asyncio.Event()

    @live_app.task(name="long_loop")
    async def long_loop() -> None:
        started.set()
        while not current_job().cancel_requested:
            await asyncio.sleep(0.01)
        raise Cancel("stopped on request")

    handle = await long_loop.enqueue_async()
    config = WorkerConfig(concurrency=2, poll_interval=0.05, lease=0.6)  # heartbeat every 0.2 s
    async with RunningWorker(live_app, config):
        await asyncio.wait_for(started.wait(), 10)
        await live_app.admin.cancel(handle.id)
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert job.state is JobState.CANCELLED


async def test_heartbeats_keep_a_long_job_from_running_twice(live_app: Conveyor) -> None:
    runs = 0

    @live_app.task(name="longer_than_lease")
    async def longer_than_lease() -> str:
        nonlocal runs
        runs += 1
        await asyncio.sleep(1.5)
        return "once"

    handle = await longer_than_lease.enqueue_async()
    config = WorkerConfig(concurrency=2, poll_interval=0.05, lease=0.5, rescue_interval=0.05)
    async with RunningWorker(live_app, config), RunningWorker(live_app, config):
        job = (await wait_finished(live_app, [handle.id]))[handle.id]
    assert runs == 1 and job.state is JobState.COMPLETED and job.errors == ()


async def test_late_ack_of_an_expired_lease_is_fenced(live_app: Conveyor) -> None:
    release_first = threading.Event()
    results: list[str] = []

    @live_app.task(name="stalls")
    def stalls() -> str:
        attempt = current_job().attempt
        if attempt == 1:
            release_first.wait(20)  # a worker that stopped heartbeating, then finishes late
        results.append(f"attempt {attempt}")
        return f"attempt {attempt}"

    handle = await stalls.enqueue_async()
    stalled = RunningWorker(
        live_app,
        WorkerConfig(
            concurrency=1, poll_interval=0.05, lease=0.3, heartbeats=False, rescue_interval=60
        ),
    )
    async with stalled as first_worker:
        await eventually(lambda: _state_is(live_app, handle.id, JobState.RUNNING))
        rescuer = RunningWorker(
            live_app, WorkerConfig(concurrency=1, poll_interval=0.05, lease=5, rescue_interval=0.05)
        )
        async with rescuer:
            job = (await wait_finished(live_app, [handle.id]))[handle.id]
            assert job.result_value == "attempt 2"
        release_first.set()
        await eventually(lambda: _true(first_worker.counts["stale"] == 1))
    final = await live_app.admin.get(handle.id)
    assert final is not None and final.state is JobState.COMPLETED
    assert final.result_value == "attempt 2" and final.attempt == 2
    assert [e.type for e in final.errors] == ["LeaseExpired"]
    assert sorted(results) == ["attempt 1", "attempt 2"]
    assert first_worker.counts["completed"] == 0


async def _true(value: bool) -> bool:
    return value


async def test_drain_finishes_running_jobs_and_starts_no_more(live_app: Conveyor) -> None:
    gate = asyncio.Event()
    started: list[str] = []

    @live_app.task(name="gated")
    async def gated(n: int) -> int:
        started.append(str(n))
        await gate.wait()
        return n

    handles = [await gated.enqueue_async(i) for i in range(5)]
    runner = RunningWorker(live_app, WorkerConfig(concurrency=2, poll_interval=0.05))
    async with runner as worker:
        await eventually(lambda: _true(len(started) == 2))
        worker.stop()
        gate.set()
        status = await runner.stop()
    assert status is ExitStatus.DRAINED
    states = Counter([(await live_app.admin.get(h.id)).state for h in handles])  # type: ignore[union-attr]
    assert states == {JobState.COMPLETED: 2, JobState.AVAILABLE: 3}


async def test_cold_stop_returns_running_jobs_without_using_attempts(live_app: Conveyor) -> None:
    started = asyncio.Event()

    @live_app.task(name="forever")
    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    handle = await forever.enqueue_async()
    runner = RunningWorker(
        live_app, WorkerConfig(concurrency=1, poll_interval=0.05, grace_period=10)
    )
    async with runner:
        await asyncio.wait_for(started.wait(), 10)
        status = await runner.stop(cold=True)
    assert status is ExitStatus.COLD
    job = await live_app.admin.get(handle.id)
    assert job is not None and job.state is JobState.AVAILABLE and job.attempt == 0


async def test_grace_period_end_is_a_cold_stop(live_app: Conveyor) -> None:
    started = asyncio.Event()

    @live_app.task(name="too_long")
    async def too_long() -> None:
        started.set()
        await asyncio.sleep(60)

    handle = await too_long.enqueue_async()
    runner = RunningWorker(
        live_app, WorkerConfig(concurrency=1, poll_interval=0.05, grace_period=0.2)
    )
    async with runner:
        await asyncio.wait_for(started.wait(), 10)
        status = await runner.stop()
    assert status is ExitStatus.COLD
    assert await _state_is(live_app, handle.id, JobState.AVAILABLE)
    assert await live_app.admin.count(JobFilter(states=(JobState.RUNNING,))) == 0


async def test_stop_does_not_wait_on_a_maintenance_pass_that_lost_its_cancel(
    live_app: Conveyor,
) -> None:
    # On Python 3.11, asyncio.wait_for (psycopg_pool's getconn waits with it) returns
    # its result instead of raising when a cancel lands just as what it awaits
    # completes: the cancel is lost. A pool child told to drain while it was starting
    # had its rescue pass cancelled exactly then, and never exited.
    entered = asyncio.Event()

    async def rescue_losing_its_cancel() -> None:
        entered.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            pass  # what the lost cancel looks like from here: the call just returns

    worker = Worker(live_app, WorkerConfig(concurrency=1, poll_interval=0.05, rescue_interval=60))
    # Ignored for mypy: a stand-in for the worker's rescue
    worker._rescue = rescue_losing_its_cancel  # type: ignore[method-assign]
    run = asyncio.create_task(worker.run())
    await asyncio.wait_for(entered.wait(), 10)
    worker.stop()
    assert await asyncio.wait_for(run, 5) is ExitStatus.DRAINED


async def test_live_workers_announce_themselves(live_app: Conveyor) -> None:
    import json

    backend = await live_app.backend()
    runner = RunningWorker(
        live_app, WorkerConfig(queues=("a", "b"), concurrency=7, poll_interval=0.05)
    )
    async with runner as worker:
        await eventually(lambda: _has_worker(backend, worker.id))
        record = json.loads((await backend.list_records("workers"))[worker.id])
        assert record["queues"] == ["a", "b"] and record["concurrency"] == 7
        assert record["in_flight"] == 0 and record["host"]
    assert worker.id not in await backend.list_records("workers")


async def _has_worker(backend: object, worker_id: str) -> bool:
    return worker_id in await backend.list_records("workers")  # type: ignore[attr-defined]

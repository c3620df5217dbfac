"""Worker liveness on every backend: a signal the kernel ends when a worker dies, so
that its jobs come back at once (conveyor.worker.liveness), not after its lease."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from helpers import RunningWorker, claim_one, eventually, new_job

from conveyor import Conveyor
from conveyor.backends.capabilities import LivenessHold, WorkerLiveness
from conveyor.backends.contract import Backend
from conveyor.backends.params import RecordWrite
from conveyor.model.job import Job, JobState
from conveyor.model.workers import WORKERS_NAMESPACE
from conveyor.worker import WorkerConfig
from conveyor.worker.liveness import (
    LIVENESS_FIELD,
    DeathWatch,
    announced_token,
    rescue_dead_workers,
)

# Every backend's token format, none of which names a signal these tests hold.
FOREIGN_TOKENS = [
    "junk",
    "",
    "pg-advisory:1.5:12:34",
    "pg-advisory:x:y:z",
    "redis-client:not-this-run:1",
    "redis-client:x:y",
    "flock:nobody.lock",
    "flock:../../etc/passwd",
]


def liveness_of(backend: Backend) -> WorkerLiveness:
    if not isinstance(backend, WorkerLiveness):
        pytest.skip(f"{type(backend).__name__} has no WorkerLiveness")
    return backend


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def announce(backend: Backend, worker_id: str, token: str | None, **fields: object) -> str:
    record = json.dumps({"id": worker_id, LIVENESS_FIELD: token, **fields})
    await backend.put_record(
        RecordWrite(namespace=WORKERS_NAMESPACE, key=worker_id, value=record, ttl=60)
    )
    return record


async def dead_soon(liveness: WorkerLiveness, worker_id: str, token: str) -> None:
    """The server notices a closed connection by itself, within milliseconds."""

    async def seen() -> bool:
        return await liveness.dead_workers({worker_id: token}) == {worker_id}

    await eventually(seen, timeout=2.0)


async def held(liveness: WorkerLiveness, worker_id: str) -> tuple[LivenessHold, str]:
    hold = await liveness.hold_liveness(worker_id)
    assert hold.token is not None, "the signal is taken by the time hold_liveness returns"
    return hold, hold.token


async def test_a_held_signal_is_alive_and_an_abandoned_one_is_dead(backend: Backend) -> None:
    liveness = liveness_of(backend)
    hold_a, a = await held(liveness, "w-a")
    hold_b, b = await held(liveness, "w-b")
    assert a != b
    assert await liveness.dead_workers({"w-a": a, "w-b": b}) == set()
    await hold_a.abandon()  # as a killed process: the kernel closes its connection or file
    assert hold_a.token is None
    await dead_soon(liveness, "w-a", a)
    assert await liveness.dead_workers({"w-a": a, "w-b": b}) == {"w-a"}
    await hold_b.release()
    await dead_soon(liveness, "w-b", b)


async def test_tokens_this_backend_did_not_issue_are_not_judged(backend: Backend) -> None:
    liveness = liveness_of(backend)
    hold, token = await held(liveness, "w-a")
    candidates = {f"w-{i}": t for i, t in enumerate(FOREIGN_TOKENS)}
    assert await liveness.dead_workers(candidates) == set()
    assert await liveness.dead_workers({"w-a": token, **candidates}) == set()
    assert await liveness.dead_workers({}) == set()
    await hold.release()


def _watch() -> tuple[DeathWatch, FakeTime]:
    time_now = FakeTime()
    return DeathWatch(grace=0.25, clock=time_now), time_now


async def test_a_dead_workers_jobs_come_back_after_the_grace_using_the_attempt(
    app: Conveyor, backend: Backend
) -> None:
    liveness = liveness_of(backend)
    await backend.enqueue_jobs([new_job(id="a"), new_job(id="b", max_attempts=1), new_job(id="c")])
    a = await claim_one(backend, worker="w-dead")
    await claim_one(backend, worker="w-dead")
    await claim_one(backend, worker="w-live")
    dead_hold, dead_token = await held(liveness, "w-dead")
    live_hold, live_token = await held(liveness, "w-live")
    await announce(backend, "w-dead", dead_token)
    await announce(backend, "w-live", live_token)
    await dead_hold.abandon()
    await dead_soon(liveness, "w-dead", dead_token)
    watch, time_now = _watch()
    now = backend.clock()

    assert await rescue_dead_workers(backend, liveness, "w-me", watch, now) == {}  # suspected
    time_now.now += 0.2
    assert await rescue_dead_workers(backend, liveness, "w-me", watch, now) == {}
    time_now.now += 0.05
    released = await rescue_dead_workers(backend, liveness, "w-me", watch, now)
    assert {w: sorted(ids) for w, ids in released.items()} == {"w-dead": ["a", "b"]}

    job_a, job_b, job_c = [await backend.get_job(i) for i in "abc"]
    assert job_a is not None and job_b is not None and job_c is not None
    assert job_a.state is JobState.AVAILABLE and job_a.run_at == a.run_at
    assert [(e.attempt, e.type, e.worker_id) for e in job_a.errors] == [(1, "WorkerLost", "w-dead")]
    assert job_a.errors[0].message == (
        f"worker w-dead died (its {liveness.liveness_signal} is gone)"
    )
    assert job_b.state is JobState.DEAD  # its only attempt: lost
    assert job_c.state is JobState.RUNNING and job_c.worker_id == "w-live"
    # Nobody judges that worker again: its record names no token any more.
    record = (await backend.list_records(WORKERS_NAMESPACE)).get("w-dead")
    assert record is None or announced_token(record) is None
    time_now.now += 1
    assert await rescue_dead_workers(backend, liveness, "w-me", watch, now) == {}
    await live_hold.release()


async def test_a_worker_that_announced_again_within_the_grace_is_left_alone(
    backend: Backend,
) -> None:
    """A live worker whose liveness connection blipped: by the time the grace is over
    its record changed (a new token, or none while it has none), so it is not dead."""
    liveness = liveness_of(backend)
    await backend.enqueue_jobs([new_job(id="a")])
    await claim_one(backend, worker="w-blip")
    first, first_token = await held(liveness, "w-blip")
    await announce(backend, "w-blip", first_token)
    await first.abandon()
    await dead_soon(liveness, "w-blip", first_token)
    watch, time_now = _watch()
    assert await rescue_dead_workers(backend, liveness, "w-me", watch, backend.clock()) == {}
    await announce(backend, "w-blip", None)  # "no signal": judged by the lease alone
    time_now.now += 0.3
    assert await rescue_dead_workers(backend, liveness, "w-me", watch, backend.clock()) == {}
    again, again_token = await held(liveness, "w-blip")
    await announce(backend, "w-blip", again_token)
    time_now.now += 0.3
    assert await rescue_dead_workers(backend, liveness, "w-me", watch, backend.clock()) == {}
    job = await backend.get_job("a")
    assert job is not None and job.state is JobState.RUNNING and not job.errors
    await again.release()


async def test_workers_without_a_signal_and_live_ones_keep_their_jobs(backend: Backend) -> None:
    liveness = liveness_of(backend)
    await backend.enqueue_jobs([new_job(id="old"), new_job(id="live")])
    await claim_one(backend, worker="w-old")
    await claim_one(backend, worker="w-live")
    await announce(backend, "w-old", None)  # an older version, or no capability
    hold, token = await held(liveness, "w-live")
    await announce(backend, "w-live", token)
    watch, time_now = _watch()
    for _ in range(4):
        assert await rescue_dead_workers(backend, liveness, "w-me", watch, backend.clock()) == {}
        time_now.now += 0.25
    for job_id in ("old", "live"):
        job = await backend.get_job(job_id)
        assert job is not None and job.state is JobState.RUNNING and job.attempt == 1
    await hold.release()


async def test_a_worker_returns_a_killed_workers_jobs_well_within_its_lease(
    live_app: Conveyor,
) -> None:
    backend = await live_app.backend()
    liveness = liveness_of(backend)
    await backend.enqueue_jobs([new_job(id=f"j{i}") for i in range(3)])
    claimed = [await claim_one(backend, worker="w-dead", lease=60) for _ in range(3)]
    hold, token = await held(liveness, "w-dead")
    await announce(backend, "w-dead", token)
    config = WorkerConfig(queues=("other",), poll_interval=0.05, lease=60)
    async with RunningWorker(live_app, config):
        await eventually(lambda: _announced(backend), timeout=5)  # the rescuer is up
        killed_at = time.monotonic()
        await hold.abandon()
        await eventually(lambda: _all_available(backend, claimed), timeout=2.0)
        took = time.monotonic() - killed_at
    assert took < 2.0
    for job in claimed:
        again = await backend.get_job(job.id)
        assert again is not None and [e.type for e in again.errors] == ["WorkerLost"]


async def test_a_worker_announces_its_signal_before_claiming_and_drops_it_after_its_last_outcome(
    live_app: Conveyor,
) -> None:
    backend = await live_app.backend()
    liveness = liveness_of(backend)
    seen: list[str | None] = []
    release = asyncio.Event()

    @live_app.task(name="look")
    async def look() -> None:
        record = (await backend.list_records(WORKERS_NAMESPACE)).get(worker.id)
        seen.append(None if record is None else announced_token(record))
        await release.wait()

    handle = await look.enqueue_async()
    running = RunningWorker(live_app, WorkerConfig(poll_interval=0.05))
    worker = running.worker
    async with running:
        await eventually(lambda: _started(seen), timeout=5)
        [token] = seen
        assert token is not None  # the record named the signal before the job was claimed
        assert await liveness.dead_workers({worker.id: token}) == set()
        release.set()
    job = await backend.get_job(handle.id)
    assert job is not None and job.state is JobState.COMPLETED and not job.errors
    assert worker.id not in await backend.list_records(WORKERS_NAMESPACE)
    await dead_soon(liveness, worker.id, token)  # dropped on the way out


async def _announced(backend: Backend) -> bool:
    records = await backend.list_records(WORKERS_NAMESPACE)
    return any(announced_token(r) for w, r in records.items() if w != "w-dead")


async def _all_available(backend: Backend, jobs: list[Job]) -> bool:
    for job in jobs:
        now = await backend.get_job(job.id)
        if now is None or now.state is not JobState.AVAILABLE:
            return False
    return True


async def _started(seen: list[str | None]) -> bool:
    return bool(seen)

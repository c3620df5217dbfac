"""Per-key concurrency (docs/flow-control.md): at most `concurrency_limit` running jobs
per key across every claimer; the rest wait, available, without using attempts; a
slot comes back on every way a running job stops running. `max_running` caps a task."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from helpers import RunningWorker, claim_one, complete, error, new_job, wait_finished

from conveyor import Conveyor, Limits
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter, JobPage, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import Job, JobState, NewJob
from conveyor.worker import WorkerConfig
from conveyor.worker.rescue import release_worker_jobs, rescue_expired

S = JobState
LIMITS = {"user:1": 1, "user:2": 2, "user:3": 3}


def keyed(key: str, limit: int, **fields: Any) -> NewJob:
    return new_job(concurrency_key=key, concurrency_limit=limit, **fields)


async def claim(
    backend: Backend, n: int = 10, worker: str = "w1", lease: float = 30.0
) -> list[Job]:
    return await backend.fetch_jobs(strict_claim(["default"], n, worker, lease))


async def running_by_key(backend: Backend) -> Counter[str | None]:
    running = await backend.list_jobs(JobPage(where=JobFilter(states=(S.RUNNING,)), limit=10_000))
    return Counter(job.concurrency_key for job in running)


async def test_several_claimers_never_run_more_than_a_keys_limit(backend: Backend) -> None:
    jobs = [keyed(key, limit, id=f"{key}-{i}") for key, limit in LIMITS.items() for i in range(12)]
    jobs += [new_job(id=f"free-{i}") for i in range(12)]
    await backend.enqueue_jobs(jobs)
    done: Counter[str | None] = Counter()
    for round_ in range(40):
        claimed = await asyncio.gather(*(claim(backend, 5, f"w{n}") for n in range(4)))
        batch = [job for jobs_ in claimed for job in jobs_]
        got = Counter(job.concurrency_key for job in batch)
        held = await running_by_key(backend)
        for key, limit in LIMITS.items():
            assert held[key] <= limit, (round_, key, held)
            if round_ == 0:  # every key has work: exactly its limit runs
                assert got[key] == limit, (key, got)
        assert len({job.id for job in batch}) == len(batch)
        if not batch:
            break
        assert await backend.settle_jobs([complete(job) for job in batch]) == []
        done.update(got)
    # Ignored for mypy: None and str keys in one literal
    assert done == Counter({**{k: 12 for k in LIMITS}, None: 12})  # type: ignore[misc]
    # Every job ran once: waiting for a slot used no attempt.
    finished = await backend.list_jobs(JobPage(where=JobFilter(states=(S.COMPLETED,)), limit=100))
    assert {job.attempt for job in finished} == {1}


async def test_jobs_held_back_stay_available_and_keep_their_attempt(backend: Backend) -> None:
    await backend.enqueue_jobs([keyed("user:42", 1, id=f"k{i}") for i in range(50)])
    await backend.enqueue_jobs([new_job(id="free")])
    first = await claim(backend, 10)
    assert sorted(job.id for job in first) == ["free", "k0"]
    for _ in range(3):  # the key at its limit gives nothing, however often asked
        assert await claim(backend, 10) == []
    waiting = await backend.list_jobs(JobPage(where=JobFilter(states=(S.AVAILABLE,)), limit=100))
    assert len(waiting) == 49 and {job.attempt for job in waiting} == {0}
    assert {job.concurrency_key for job in waiting} == {"user:42"}
    held = next(job for job in first if job.id == "k0")
    await backend.settle_jobs([complete(held)])
    assert [job.id for job in await claim(backend, 10)] == ["k1"]  # in claim order


def _outcomes() -> dict[str, Callable[[Job], Settlement]]:
    return {
        "completed": complete,
        "retried": lambda j: Settlement(
            j.id, j.lease_token, S.RETRYABLE, error=error(1), run_at=10_000_000_000.0
        ),
        "dead": lambda j: Settlement(j.id, j.lease_token, S.DEAD, error=error(1)),
        "cancelled": lambda j: Settlement(j.id, j.lease_token, S.CANCELLED, error=error(1)),
        "snoozed": lambda j: Settlement(
            j.id, j.lease_token, S.SCHEDULED, run_at=10_000_000_000.0, refund_attempt=True
        ),
        "released": lambda j: Settlement(j.id, j.lease_token, S.AVAILABLE, refund_attempt=True),
        "lost": lambda j: Settlement(j.id, j.lease_token, S.AVAILABLE, error=error(1)),
    }


@pytest.mark.parametrize("outcome", sorted(_outcomes()))
async def test_every_way_out_of_running_frees_the_slot(backend: Backend, outcome: str) -> None:
    await backend.enqueue_jobs([keyed("user:7", 1, id="a"), keyed("user:7", 1, id="b")])
    a = await claim_one(backend)
    assert a.id == "a" and await claim(backend) == []
    assert await backend.settle_jobs([_outcomes()[outcome](a)]) == []
    again = await claim(backend)
    # Back to available (released, lost): a keeps its place in line and runs again;
    # otherwise b takes the slot. Either way exactly one job of the key runs.
    assert [job.id for job in again] == (["a"] if outcome in ("released", "lost") else ["b"])
    assert await claim(backend) == []


async def test_a_lease_expiry_rescue_gives_the_slot_back(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [keyed("user:7", 1, id="a", max_attempts=1), keyed("user:7", 1, id="b")]
    )
    await claim_one(backend, lease=5.0, worker="gone")
    assert await claim(backend) == []
    clock.advance(10)
    assert await rescue_expired(backend, backend.clock()) == ["a"]
    assert await backend.get_job("a") is not None
    assert (await backend.get_job("a")).state is S.DEAD  # type: ignore[union-attr]
    assert [job.id for job in await claim(backend)] == ["b"]


async def test_a_dead_workers_jobs_give_their_slots_back(backend: Backend) -> None:
    await backend.enqueue_jobs([keyed("user:7", 2, id=f"j{i}") for i in range(4)])
    assert len(await claim(backend, worker="child-1")) == 2
    assert await claim(backend) == []
    released = await release_worker_jobs(
        backend, "child-1", backend.clock(), charge=False, message="killed"
    )
    assert sorted(released) == ["j0", "j1"]
    again = await claim(backend, worker="child-2")
    assert sorted(job.id for job in again) == ["j0", "j1"]
    assert {job.attempt for job in again} == {1}  # returned unused: still the first attempt


async def test_a_due_retry_waits_for_a_slot(backend: Backend, clock: ManualClock) -> None:
    later = clock() + 60
    await backend.enqueue_jobs(
        [keyed("user:7", 1, id="later", run_at=later), keyed("user:7", 1, id="now")]
    )
    now = await claim_one(backend)
    clock.advance(120)  # "later" is due and staged, but the key is full
    assert await claim(backend) == []
    assert (await backend.get_job("later")).state is S.AVAILABLE  # type: ignore[union-attr]
    await backend.settle_jobs([complete(now)])
    assert [job.id for job in await claim(backend)] == ["later"]


async def test_cancelling_a_waiting_job_frees_what_it_held(backend: Backend) -> None:
    await backend.enqueue_jobs([keyed("user:7", 1, id="a"), keyed("user:7", 1, id="b")])
    cancelled = await backend.cancel_job("a")  # a held the key's slot, about to be claimed
    assert cancelled is not None and cancelled.state is S.CANCELLED
    assert [job.id for job in await claim(backend)] == ["b"]


async def test_a_redriven_job_waits_for_its_key(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [keyed("user:7", 1, id="a", max_attempts=1), keyed("user:7", 1, id="b")]
    )
    a = await claim_one(backend)
    await backend.settle_jobs([Settlement(a.id, a.lease_token, S.DEAD, error=error(1))])
    b = await claim_one(backend)
    assert b.id == "b"
    await backend.redrive_jobs(BulkAction(where=JobFilter(ids=("a",)), limit=10, dry_run=False))
    assert await claim(backend) == []
    await backend.settle_jobs([complete(b)])
    assert [job.id for job in await claim(backend)] == ["a"]


async def test_keys_are_independent_and_jobs_without_a_key_are_not_held(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [
            keyed("user:1", 1, id="a1"),
            keyed("user:1", 1, id="a2"),
            keyed("user:2", 1, id="b1"),
            new_job(id="c1"),
            new_job(id="c2"),
        ]
    )
    assert sorted(job.id for job in await claim(backend)) == ["a1", "b1", "c1", "c2"]


async def test_max_running_caps_a_task_and_the_key_is_rendered_from_arguments(
    app: Conveyor,
) -> None:
    @app.task(limits=Limits(max_running=2))
    def export(n: int) -> None: ...

    @app.task(limits=Limits(concurrency_key="user:{user_id}", concurrency_limit=1))
    def sync(user_id: int, page: int) -> None: ...

    for n in range(5):
        await export.enqueue_async(n)
    await sync.enqueue_async(42, 1)
    await sync.enqueue_async(42, 2)
    await sync.enqueue_async(7, 1)
    backend = await app.backend()
    claimed = await claim(backend, 20)
    assert Counter(job.concurrency_key for job in claimed) == Counter(
        {f"task:{export.name}": 2, "user:42": 1, "user:7": 1}
    )
    assert {job.concurrency_limit for job in claimed if job.task == export.name} == {2}


async def test_a_held_back_job_says_why(app: Conveyor) -> None:
    backend = await app.backend()
    await backend.enqueue_jobs(
        [keyed("user:42", 1, id="a"), keyed("user:42", 1, id="b"), new_job(id="plain")]
    )
    a = await backend.get_job("a")
    assert a is not None
    assert await app.admin.held_back(a) is None  # next in line: not held back
    assert [job.id for job in await claim(backend, 1)] == ["a"]
    b = await backend.get_job("b")
    assert b is not None and b.state is S.AVAILABLE
    assert await app.admin.held_back(b) == "waiting for a slot of key user:42: 1 of 1 running"
    assert await backend.count_running_of_key("user:42") == 1
    assert await app.admin.held_back(await backend.get_job("plain")) is None  # type: ignore[arg-type]
    running = await backend.get_job("a")
    assert running is not None and await app.admin.held_back(running) is None


async def test_claimers_that_settle_while_others_claim_never_pass_the_limit(
    backend: Backend,
) -> None:
    """Four workers at once, each claiming and completing in its own rhythm, so
    slots are freed while other claims run: every snapshot holds at most the limit."""
    keys = {f"user:{n}": 2 for n in range(3)}
    await backend.enqueue_jobs(
        [keyed(key, limit, id=f"{key}-{i}") for key, limit in keys.items() for i in range(15)]
    )
    peaks: Counter[str | None] = Counter()

    async def worker(n: int) -> int:
        done = 0
        for _ in range(200):
            jobs = await claim(backend, 1 + n % 3, f"w{n}")
            held = await running_by_key(backend)
            for key, limit in keys.items():
                assert held[key] <= limit, held
                peaks[key] = max(peaks[key], held[key])
            if jobs:
                assert await backend.settle_jobs([complete(job) for job in jobs]) == []
                done += len(jobs)
            elif await backend.count_jobs(JobFilter(states=(S.AVAILABLE,))) == 0:
                return done
        return done

    assert sum(await asyncio.gather(*(worker(n) for n in range(4)))) == 45
    assert await backend.count_jobs(JobFilter(states=(S.COMPLETED,))) == 45
    assert all(peak >= 1 for peak in peaks.values())


async def test_a_workflow_step_released_while_its_key_is_full_waits_for_a_slot(
    app: Conveyor,
) -> None:
    from conveyor import chain

    @app.task(name="per_user", limits=Limits(concurrency_key="user:{user}", concurrency_limit=1))
    def per_user(user: int) -> None: ...

    @app.task(name="first")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    def first() -> int: ...  # type: ignore[empty-body]

    backend = await app.backend()
    busy = await per_user.enqueue_async(1)
    assert [job.id for job in await claim(backend)] == [busy.id]
    flow = await chain(first.s(), per_user.si(1)).enqueue_async()
    head, step = (handle.id for handle in flow.jobs)
    [started] = await claim(backend)
    assert started.id == head
    await backend.settle_jobs([complete(started, "1")])  # releases the step: available
    assert (await backend.get_job(step)).state is S.AVAILABLE  # type: ignore[union-attr]
    assert await claim(backend) == []  # but user:1's slot is taken
    running = await backend.get_job(busy.id)
    assert running is not None
    await backend.settle_jobs([complete(running)])
    assert [job.id for job in await claim(backend)] == [step]


async def test_queue_stats_count_the_jobs_held_by_their_key(backend: Backend) -> None:
    # user:1 (limit 1) has 4 jobs: one holds the slot, three are parked; user:2 (limit 2)
    # has 2, both with a slot; an unkeyed job is plain.
    await backend.enqueue_jobs(
        [
            *(keyed("user:1", 1, id=f"a{i}") for i in range(4)),
            *(keyed("user:2", 2, id=f"b{i}") for i in range(2)),
            new_job(id="plain"),
        ]
    )
    [stats] = await backend.queue_stats()
    assert stats.counts == {S.AVAILABLE: 7} and stats.held_by_key == 3
    running = await claim(backend, 10)
    assert sorted(j.id for j in running) == ["a0", "b0", "b1", "plain"]
    [stats] = await backend.queue_stats()
    assert stats.counts == {S.AVAILABLE: 3, S.RUNNING: 4} and stats.held_by_key == 3
    a0 = next(j for j in running if j.id == "a0")
    await backend.settle_jobs([complete(a0)])  # its slot goes to a1
    [stats] = await backend.queue_stats()
    assert stats.counts == {S.AVAILABLE: 3, S.RUNNING: 3, S.COMPLETED: 1}
    assert stats.held_by_key == 2


async def test_a_worker_claims_its_keys_next_job_without_waiting_for_a_poll(
    live_app: Conveyor,
) -> None:
    @live_app.task(name="one_at_a_time", limits=Limits(max_running=1))
    async def one_at_a_time(i: int) -> None: ...

    handles = await live_app.enqueue_many_async([one_at_a_time.message(i) for i in range(5)])
    # A poll of a minute: were the worker to wait for it after each job (SQLite and
    # PostgreSQL send no wake-up when a key's slot is given), five jobs would take
    # four minutes; the worker claims again once its keyed job's outcome is written.
    config = WorkerConfig(concurrency=4, poll_interval=60.0)
    async with RunningWorker(live_app, config):
        done = await wait_finished(live_app, [h.id for h in handles], timeout=20.0)
    assert {job.state for job in done.values()} == {S.COMPLETED}

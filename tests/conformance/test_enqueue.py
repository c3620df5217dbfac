"""Enqueue, delayed jobs, dedup by job id and unique key."""

from __future__ import annotations

import asyncio

from helpers import claim_one, complete, new_job

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState


async def test_enqueue_stores_the_job_available(backend: Backend, clock: ManualClock) -> None:
    [job] = await backend.enqueue_jobs(
        [
            new_job(
                id="a",
                queue="q",
                priority=3,
                max_attempts=7,
                payload='{"args":[1],"kwargs":{"x":2}}',
            )
        ]
    )
    assert job.id == "a" and job.state is JobState.AVAILABLE
    stored = await backend.get_job("a")
    assert stored is not None
    assert (stored.queue, stored.task, stored.priority, stored.max_attempts) == (
        "q",
        "tests.noop",
        3,
        7,
    )
    assert stored.args == [1] and stored.kwargs == {"x": 2}
    assert stored.attempt == 0 and stored.created_at == clock.now and stored.run_at == clock.now
    assert stored.errors == ()


async def test_batch_enqueue_keeps_every_job(backend: Backend) -> None:
    jobs = await backend.enqueue_jobs([new_job(id=f"b{i}") for i in range(250)])
    assert [j.id for j in jobs] == [f"b{i}" for i in range(250)]
    assert await backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,))) == 250


async def test_unknown_job_is_none(backend: Backend) -> None:
    assert await backend.get_job("nope") is None


async def test_delayed_job_waits_for_its_time(backend: Backend, clock: ManualClock) -> None:
    [job] = await backend.enqueue_jobs([new_job(id="later", run_at=clock.now + 60)])
    assert job.state is JobState.SCHEDULED
    assert await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30)) == []
    clock.advance(59.9)
    assert await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30)) == []
    clock.advance(0.2)
    [claimed] = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30))
    assert claimed.id == "later" and claimed.state is JobState.RUNNING


async def test_job_id_dedups_while_active(backend: Backend) -> None:
    [first] = await backend.enqueue_jobs(
        [new_job(id="welcome:42", payload='{"args":[1],"kwargs":{}}')]
    )
    [again] = await backend.enqueue_jobs(
        [new_job(id="welcome:42", payload='{"args":[2],"kwargs":{}}')]
    )
    assert again.id == first.id and again.args == [1]
    running = await claim_one(backend)
    [while_running] = await backend.enqueue_jobs([new_job(id="welcome:42")])
    assert while_running.state is JobState.RUNNING
    assert await backend.count_jobs(JobFilter()) == 1
    await backend.settle_jobs([complete(running)])
    # Finished and no unique_for window: the id makes way for a new job.
    [fresh] = await backend.enqueue_jobs(
        [new_job(id="welcome:42", payload='{"args":[3],"kwargs":{}}')]
    )
    assert fresh.state is JobState.AVAILABLE and fresh.args == [3]
    assert await backend.count_jobs(JobFilter()) == 1


async def test_unique_key_dedups_and_unique_for_extends_past_completion(
    backend: Backend, clock: ManualClock
) -> None:
    [first] = await backend.enqueue_jobs([new_job(unique_key="report:7", unique_for=3600)])
    [dup] = await backend.enqueue_jobs([new_job(unique_key="report:7", unique_for=3600)])
    assert dup.id == first.id
    job = await claim_one(backend)
    await backend.settle_jobs([complete(job)])
    clock.advance(3599)
    [within] = await backend.enqueue_jobs([new_job(unique_key="report:7", unique_for=3600)])
    assert within.id == first.id and within.state is JobState.COMPLETED
    clock.advance(2)
    [after] = await backend.enqueue_jobs([new_job(unique_key="report:7", unique_for=3600)])
    assert after.id != first.id and after.state is JobState.AVAILABLE


async def test_unique_key_does_not_block_after_dead(backend: Backend) -> None:
    from helpers import error

    from conveyor.backends.params import Settlement

    [first] = await backend.enqueue_jobs([new_job(unique_key="pay:1", unique_for=3600)])
    job = await claim_one(backend)
    await backend.settle_jobs([Settlement(job.id, job.lease_token, JobState.DEAD, error=error(1))])
    [again] = await backend.enqueue_jobs([new_job(unique_key="pay:1", unique_for=3600)])
    assert again.id != first.id


async def test_dedup_inside_one_batch(backend: Backend) -> None:
    jobs = await backend.enqueue_jobs([new_job(unique_key="k"), new_job(unique_key="k")])
    assert jobs[0].id == jobs[1].id
    assert await backend.count_jobs(JobFilter()) == 1


async def test_racing_enqueues_with_one_unique_key_make_one_job(
    backend_url: str, clock: ManualClock
) -> None:
    apps = [Conveyor(backend_url, clock=clock) for _ in range(4)]
    try:
        backends = [await a.backend() for a in apps]
        results = await asyncio.gather(
            *(
                b.enqueue_jobs([new_job(unique_key="race"), new_job(id="race-id")])
                for b in backends
                for _ in range(5)
            )
        )
        assert len({r[0].id for r in results}) == 1
        assert len({r[1].id for r in results}) == 1
        assert await backends[0].count_jobs(JobFilter()) == 2
    finally:
        for a in apps:
            await a.aclose()


def _payload(n: int) -> str:
    return f'{{"args":[{n}],"kwargs":{{}}}}'


async def test_batch_answers_each_job_as_one_by_one_would(backend: Backend) -> None:
    # A batch whose ids are all new, then batches that repeat an id inside
    # themselves, name an active job's id, or a finished job's (no window: replaced).
    fresh = await backend.enqueue_jobs([new_job(id=f"f{i}", payload=_payload(i)) for i in range(3)])
    assert [(j.id, j.args, j.state) for j in fresh] == [
        (f"f{i}", [i], JobState.AVAILABLE) for i in range(3)
    ]
    inside = await backend.enqueue_jobs(
        [
            new_job(id="r", payload=_payload(1)),
            new_job(id="s"),
            new_job(id="r", payload=_payload(2)),
        ]
    )
    assert [j.id for j in inside] == ["r", "s", "r"] and inside[2].args == [1]
    finished = await claim_one(backend)  # f0, the oldest
    await backend.settle_jobs([complete(finished)])
    mixed = await backend.enqueue_jobs(
        [
            new_job(id="t", payload=_payload(7)),
            new_job(id="f1", payload=_payload(8)),
            new_job(id="f0", payload=_payload(9)),
        ]
    )
    assert [(j.id, j.args, j.state) for j in mixed] == [
        ("t", [7], JobState.AVAILABLE),
        ("f1", [1], JobState.AVAILABLE),
        ("f0", [9], JobState.AVAILABLE),
    ]
    assert await backend.count_jobs(JobFilter()) == 6  # f0 f1 f2 r s t


async def test_unique_key_dedups_across_and_inside_batches(
    backend: Backend, clock: ManualClock
) -> None:
    first = await backend.enqueue_jobs(
        [
            new_job(unique_key="u1", unique_for=60),
            new_job(unique_key="u2", unique_for=60),
            new_job(),
        ]
    )
    job = await claim_one(backend)  # u1's job
    await backend.settle_jobs([complete(job)])
    clock.advance(59)
    again = await backend.enqueue_jobs(
        [
            new_job(unique_key="u1", unique_for=60),
            new_job(),
            new_job(unique_key="u2", unique_for=60),
            new_job(unique_key="u3", unique_for=60),
            new_job(unique_key="u3", unique_for=60),
        ]
    )
    assert (again[0].id, again[0].state) == (first[0].id, JobState.COMPLETED)
    assert again[2].id == first[1].id and again[3].id == again[4].id
    clock.advance(2)  # u1's window is over: a new job takes the key
    [later] = await backend.enqueue_jobs([new_job(unique_key="u1", unique_for=60)])
    assert later.id != first[0].id and later.state is JobState.AVAILABLE
    assert await backend.count_jobs(JobFilter()) == 6

"""Dead letters and redrive, retention, stats, listing."""

from __future__ import annotations

import pytest
from helpers import claim_one, complete, error, new_job, state_of

from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter, JobPage, Retention, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState

DEAD = JobFilter(states=(JobState.DEAD,))


async def kill(
    backend: Backend,
    clock: ManualClock,
    n: int,
    task: str = "tests.noop",
    queue: str = "default",
    type_: str = "ValueError",
    prefix: str = "d",
) -> list[str]:
    await backend.enqueue_jobs(
        [new_job(id=f"{prefix}{i}", task=task, queue=queue) for i in range(n)]
    )
    ids = []
    for _ in range(n):
        job = await claim_one(backend, queue=queue)
        clock.advance(1)  # distinct failure times: redrive goes oldest failure first
        await backend.settle_jobs(
            [Settlement(job.id, job.lease_token, JobState.DEAD, error=error(job.attempt, type_))]
        )
        ids.append(job.id)
    return ids


async def test_redrive_dry_run_moves_nothing(backend: Backend, clock: ManualClock) -> None:
    ids = await kill(backend, clock, 3)
    preview = await backend.redrive_jobs(BulkAction(where=DEAD, limit=10, dry_run=True))
    assert sorted(j.id for j in preview) == sorted(ids)
    assert await backend.count_jobs(DEAD) == 3


async def test_redrive_in_batches_oldest_failure_first_with_fresh_attempts(
    backend: Backend, clock: ManualClock
) -> None:
    ids = await kill(backend, clock, 5)
    first = await backend.redrive_jobs(BulkAction(where=DEAD, limit=2, dry_run=False))
    assert [j.id for j in first] == ids[:2]
    assert all(j.state is JobState.AVAILABLE and j.attempt == 0 for j in first)
    assert all(len(j.errors) == 1 for j in first)  # history is kept
    assert await backend.count_jobs(DEAD) == 3
    rerun = await claim_one(backend)
    assert rerun.attempt == 1 and rerun.id in ids[:2]


async def test_redrive_by_task_queue_and_error_type(backend: Backend, clock: ManualClock) -> None:
    await kill(backend, clock, 2, task="a.task", type_="ValueError", prefix="a")
    await kill(backend, clock, 2, task="b.task", type_="KeyError", prefix="b")
    await kill(backend, clock, 1, task="b.task", queue="other", type_="KeyError", prefix="c")
    by_type = await backend.redrive_jobs(
        BulkAction(
            where=JobFilter(states=(JobState.DEAD,), error_type="KeyError"), limit=100, dry_run=True
        )
    )
    assert sorted(j.id for j in by_type) == ["b0", "b1", "c0"]
    by_task_queue = await backend.redrive_jobs(
        BulkAction(
            where=JobFilter(states=(JobState.DEAD,), tasks=("b.task",), queues=("default",)),
            limit=100,
            dry_run=True,
        )
    )
    assert sorted(j.id for j in by_task_queue) == ["b0", "b1"]
    moved = await backend.redrive_jobs(
        BulkAction(
            where=JobFilter(states=(JobState.DEAD,), tasks=("a.task",)), limit=100, dry_run=False
        )
    )
    assert sorted(j.id for j in moved) == ["a0", "a1"]
    assert await backend.count_jobs(DEAD) == 3


async def test_redrive_refuses_active_states(backend: Backend) -> None:
    with pytest.raises(ValueError):
        await backend.redrive_jobs(
            BulkAction(where=JobFilter(states=(JobState.RUNNING,)), limit=10, dry_run=False)
        )


async def test_delete_touches_only_finished_jobs(backend: Backend, clock: ManualClock) -> None:
    await kill(backend, clock, 2)
    await backend.enqueue_jobs([new_job(id="waiting")])
    deleted = await backend.delete_jobs(BulkAction(where=JobFilter(), limit=100, dry_run=False))
    assert sorted(deleted) == ["d0", "d1"]
    assert await backend.get_job("d0") is None
    assert await state_of(backend, "waiting") is JobState.AVAILABLE


async def test_prune_keeps_dead_longer_than_completed(backend: Backend, clock: ManualClock) -> None:
    await kill(backend, clock, 1, prefix="dead")
    await backend.enqueue_jobs(
        [new_job(id="ok"), new_job(id="uniq", unique_key="u", unique_for=10_000)]
    )
    for _ in range(2):
        await backend.settle_jobs([complete(await claim_one(backend))])
    clock.advance(3600)
    # completed older than 1 s are pruned; dead only older than 1 day; a live unique window stays.
    pruned = await backend.prune_jobs(
        Retention(completed_before=clock.now - 1, dead_before=clock.now - 86400)
    )
    assert pruned == 1
    assert await backend.get_job("ok") is None
    assert await backend.get_job("uniq") is not None
    assert await backend.get_job("dead0") is not None
    clock.advance(86400)
    assert (
        await backend.prune_jobs(
            Retention(completed_before=clock.now - 1, dead_before=clock.now - 86400)
        )
        == 2
    )


async def test_stats_counts_and_oldest_age(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="s1", queue="mail"), new_job(id="s2", queue="mail")])
    clock.advance(5)
    await backend.enqueue_jobs([new_job(id="s3", queue="mail"), new_job(id="s4", queue="etl")])
    await claim_one(backend, queue="etl")
    clock.advance(2)
    stats = {s.queue: s for s in await backend.queue_stats()}
    assert stats["mail"].counts == {JobState.AVAILABLE: 3}
    assert stats["mail"].oldest_available_age == pytest.approx(7.0)
    assert stats["etl"].counts == {JobState.RUNNING: 1}
    assert stats["etl"].in_flight == 1 and stats["etl"].oldest_available_age is None


async def test_list_and_count_with_filters(backend: Backend, clock: ManualClock) -> None:
    await kill(backend, clock, 2, task="t.a", type_="KeyError")
    await backend.enqueue_jobs(
        [new_job(id="x1", task="t.b"), new_job(id="x2", task="t.b", queue="q2")]
    )
    assert await backend.count_jobs(JobFilter()) == 4
    assert await backend.count_jobs(JobFilter(tasks=("t.b",))) == 2
    assert await backend.count_jobs(JobFilter(queues=("q2",))) == 1
    assert await backend.count_jobs(JobFilter(error_type="KeyError")) == 2
    assert await backend.count_jobs(JobFilter(ids=("x1", "d0", "zz"))) == 2
    listed = await backend.list_jobs(
        JobPage(where=JobFilter(states=(JobState.AVAILABLE,)), limit=10)
    )
    assert sorted(j.id for j in listed) == ["x1", "x2"]
    page1 = await backend.list_jobs(JobPage(where=JobFilter(), limit=3, offset=0))
    page2 = await backend.list_jobs(JobPage(where=JobFilter(), limit=3, offset=3))
    assert len(page1) == 3 and len(page2) == 1
    assert {j.id for j in page1} | {j.id for j in page2} == {"d0", "d1", "x1", "x2"}


async def test_delete_limit_counts_only_finished_jobs(backend: Backend, clock: ManualClock) -> None:
    await kill(backend, clock, 3)
    await backend.enqueue_jobs([new_job(id=f"active{i}") for i in range(5)])
    deleted = await backend.delete_jobs(BulkAction(where=JobFilter(), limit=2, dry_run=False))
    assert len(deleted) == 2 and set(deleted) <= {"d0", "d1", "d2"}
    assert (
        await backend.delete_jobs(
            BulkAction(where=JobFilter(states=(JobState.AVAILABLE,)), limit=100, dry_run=False)
        )
        == []
    )
    assert await backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,))) == 5

"""Workflows (docs/workflows.md): jobs that wait on others, on every backend.

The backend rules first (depends_on, the `blocked` state, release when parents
end, the failure policy), then chain, group and chord run by a real worker."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from helpers import (
    RunningWorker,
    claim_one,
    complete,
    error,
    eventually,
    finish_waiter_parked,
    new_job,
    state_of,
)

from conveyor import Conveyor, Failure, chain, chord, group
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, FinishWait, JobFilter, Settlement
from conveyor.handle import JobHandle
from conveyor.model.clock import ManualClock
from conveyor.model.errors import InvalidJob, JobFailed
from conveyor.model.job import JobState
from conveyor.model.version import __version__
from conveyor.rules.dependencies import DEPENDENCY_FAILED
from conveyor.worker import WorkerConfig

S = JobState


async def claim_all(backend: Backend, n: int = 10) -> list[Any]:
    return await backend.fetch_jobs(strict_claim(["default"], n, "w1", 30))


async def test_dependant_is_blocked_never_claimed_and_not_waiting_work(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="p"), new_job(id="c", depends_on=("p",))])
    assert await state_of(backend, "c") is S.BLOCKED
    claimed = await claim_all(backend)
    assert [j.id for j in claimed] == ["p"]
    stats = {q.queue: q for q in await backend.queue_stats()}["default"]
    assert stats.counts.get(S.BLOCKED) == 1 and stats.counts.get(S.AVAILABLE, 0) == 0
    assert await backend.count_jobs(JobFilter(states=(S.BLOCKED,))) == 1


async def test_last_parent_to_complete_makes_the_dependant_available(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [new_job(id="a"), new_job(id="b"), new_job(id="c", depends_on=("a", "b"))]
    )
    a, b = sorted(await claim_all(backend), key=lambda j: j.id)
    assert await backend.dependants_of("a") == ["c"] and await backend.dependants_of("c") == []
    assert await backend.dependants_of("nope") == []
    assert await backend.parents_of("c") == ["a", "b"] and await backend.parents_of("a") == []
    assert await backend.parents_of("nope") == []
    assert await backend.settle_jobs([complete(a, "1")]) == []
    assert await state_of(backend, "c") is S.BLOCKED
    clock.advance(5)
    assert await backend.settle_jobs([complete(b, "2")]) == []
    c = await backend.get_job("c")
    assert c is not None and c.state is S.AVAILABLE and c.run_at == clock.now
    assert [j.id for j in await claim_all(backend)] == ["c"]


async def test_both_parents_settled_in_one_batch_release_once(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [new_job(id="a"), new_job(id="b"), new_job(id="c", depends_on=("a", "b"))]
    )
    jobs = await claim_all(backend)
    assert await backend.settle_jobs([complete(j) for j in jobs]) == []
    assert await state_of(backend, "c") is S.AVAILABLE
    assert [j.id for j in await claim_all(backend)] == ["c"]


async def test_parents_already_ended_at_enqueue(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="done"), new_job(id="bad", max_attempts=1)])
    bad, done = sorted(await claim_all(backend), key=lambda j: j.id)
    await backend.settle_jobs(
        [complete(done), Settlement(bad.id, bad.lease_token, S.DEAD, error=error(1))]
    )
    await backend.enqueue_jobs(
        [
            new_job(id="ok", depends_on=("done",)),
            new_job(id="lost", depends_on=("done", "bad")),
            new_job(id="tolerant", depends_on=("bad",), allow_failure=True),
        ]
    )
    assert await state_of(backend, "ok") is S.AVAILABLE
    assert await state_of(backend, "tolerant") is S.AVAILABLE
    lost = await backend.get_job("lost")
    assert lost is not None and lost.state is S.CANCELLED
    assert [(e.type, e.message) for e in lost.errors] == [
        (DEPENDENCY_FAILED, "parent job bad ended dead")
    ]


async def test_unknown_parent_refuses_the_batch(backend: Backend) -> None:
    with pytest.raises(InvalidJob, match="depends_on"):
        await backend.enqueue_jobs([new_job(id="x"), new_job(id="y", depends_on=("nope",))])
    assert await backend.get_job("x") is None and await backend.get_job("y") is None


async def test_dead_parent_cancels_dependants_onwards_with_the_reason(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [
            new_job(id="a", max_attempts=1),
            new_job(id="b", depends_on=("a",)),
            new_job(id="c", depends_on=("b",)),
            new_job(id="t", depends_on=("a",), allow_failure=True),
        ]
    )
    a = await claim_one(backend)
    clock.advance(3)
    await backend.settle_jobs([Settlement(a.id, a.lease_token, S.DEAD, error=error(1))])
    b, c = await backend.get_job("b"), await backend.get_job("c")
    assert b is not None and b.state is S.CANCELLED and b.finished_at == clock.now
    assert [(e.type, e.message) for e in b.errors] == [
        (DEPENDENCY_FAILED, "parent job a ended dead")
    ]
    assert c is not None and c.state is S.CANCELLED
    assert [(e.type, e.message) for e in c.errors] == [
        (DEPENDENCY_FAILED, "parent job b ended cancelled")
    ]
    assert await state_of(backend, "t") is S.AVAILABLE  # allow_failure: it runs


async def test_retry_of_a_parent_keeps_the_dependant_blocked(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="a"), new_job(id="b", depends_on=("a",))])
    a = await claim_one(backend)
    await backend.settle_jobs(
        [Settlement(a.id, a.lease_token, S.RETRYABLE, error=error(1), run_at=0.0)]
    )
    assert await state_of(backend, "b") is S.BLOCKED
    a = await claim_one(backend)
    await backend.settle_jobs([complete(a)])
    assert await state_of(backend, "b") is S.AVAILABLE


# --- the workflow API, run by a worker -------------------------------------------------
def workflow_tasks(app: Conveyor) -> dict[str, Any]:
    @app.task(name="wf.add", max_attempts=1)
    def add(x: int, y: int = 0) -> int:
        return x + y

    @app.task(name="wf.total", max_attempts=1)
    def total(values: list[Any], extra: int = 0) -> Any:
        return sum(v for v in values if isinstance(v, int)) + extra

    @app.task(name="wf.boom", max_attempts=1)
    def boom(*_: Any) -> None:
        raise ValueError("no")

    @app.task(name="wf.seen", max_attempts=1)
    def seen(value: Any) -> Any:
        return {"type": value.type, "state": value.state} if isinstance(value, Failure) else value

    return {"add": add, "total": total, "boom": boom, "seen": seen}


async def run_until_done(app: Conveyor, handle: Any, timeout: float = 20.0) -> Any:
    async with RunningWorker(
        app, WorkerConfig(queues=("default",), concurrency=4, poll_interval=0.05)
    ):
        return await handle.result_async(timeout)


async def test_chain_passes_each_result_on(live_app: Conveyor) -> None:
    t = workflow_tasks(live_app)
    flow = chain(t["add"].s(1, 2), t["add"].s(10), t["add"].si(100, 1), t["add"].s())
    handle = await flow.enqueue_async()
    assert [(await live_app.admin.get(h.id)).state for h in handle.jobs] == [  # type: ignore[union-attr]
        S.AVAILABLE,
        S.BLOCKED,
        S.BLOCKED,
        S.BLOCKED,
    ]
    assert await run_until_done(live_app, handle) == 101


async def test_group_then_chord_callback_gets_results_in_order(live_app: Conveyor) -> None:
    t = workflow_tasks(live_app)
    handle = await chord(
        group(t["add"].s(i, i) for i in range(5)), t["total"].s(extra=1)
    ).enqueue_async()
    assert await run_until_done(live_app, handle) == sum(2 * i for i in range(5)) + 1
    parallel = await group(t["add"].s(1), t["add"].s(2)).enqueue_async()
    assert await run_until_done(live_app, parallel) == [1, 2]


async def test_failed_member_cancels_the_callback_and_allow_failure_passes_it(
    live_app: Conveyor,
) -> None:
    t = workflow_tasks(live_app)
    strict = await chord([t["add"].s(1), t["boom"].s()], t["total"].s()).enqueue_async()
    with pytest.raises(JobFailed, match=DEPENDENCY_FAILED):
        await run_until_done(live_app, strict)
    callback = await live_app.admin.get(strict.exits[0].id)
    assert callback is not None and callback.state is S.CANCELLED
    tolerant = await chain(t["boom"].s(), t["seen"].s(), allow_failure=True).enqueue_async()
    assert await run_until_done(live_app, tolerant) == {"type": "ValueError", "state": "dead"}


async def test_depends_on_by_hand(live_app: Conveyor) -> None:
    t = workflow_tasks(live_app)
    first = await t["add"].enqueue_async(5)
    second = await t["add"].options(depends_on=[first]).enqueue_async(6)
    assert (await live_app.admin.get(second.id)).state is S.BLOCKED  # type: ignore[union-attr]
    async with RunningWorker(live_app, WorkerConfig(queues=("default",), poll_interval=0.05)):
        assert await second.result_async(20) == 6  # no input by hand: its own arguments
        assert await first.result_async(20) == 5


async def test_cancelling_a_member_that_has_not_started_cancels_what_depends_on_it(
    backend: Backend,
) -> None:
    await backend.enqueue_jobs(
        [
            new_job(id="a"),
            new_job(id="b", depends_on=("a",)),
            new_job(id="c", depends_on=("b",)),
            new_job(id="t", depends_on=("b",), allow_failure=True),
        ]
    )
    cancelled = await backend.cancel_job("b")  # blocked: cancelled at once
    assert cancelled is not None and cancelled.state is S.CANCELLED
    c = await backend.get_job("c")
    assert c is not None and c.state is S.CANCELLED
    assert [(e.type, e.message) for e in c.errors] == [
        (DEPENDENCY_FAILED, "parent job b ended cancelled")
    ]
    assert await state_of(backend, "t") is S.AVAILABLE
    assert await state_of(backend, "a") is S.AVAILABLE  # its parent runs on
    await backend.enqueue_jobs([new_job(id="d", depends_on=("a",))])
    assert (await backend.cancel_job("a")).state is S.CANCELLED  # type: ignore[union-attr]
    assert await state_of(backend, "d") is S.CANCELLED


async def test_cancelling_a_workflow_cancels_what_has_not_started(live_app: Conveyor) -> None:
    t = workflow_tasks(live_app)
    handle = await chain(
        t["add"].s(1), group(t["add"].s(), t["add"].s()), t["total"].s()
    ).enqueue_async()
    members = await handle.cancel_async()
    assert [m.state for m in members] == [S.CANCELLED] * 4
    with pytest.raises(JobFailed):
        await handle.result_async(5)


# --- waiting for a result -----------------------------------------------------------------
async def test_result_wakes_at_the_end_instead_of_polling(backend: Backend, app: Conveyor) -> None:
    from conveyor.backends.capabilities import FinishWakeups

    assert isinstance(backend, FinishWakeups)
    await backend.enqueue_jobs([new_job(id="w")])
    job = await claim_one(backend)
    waiter = asyncio.create_task(backend.wait_for_finish(FinishWait(job_id="w", timeout=30)))
    # Settled only once the waiter has looked and parked: a settle before it would end
    # the wait by its look, and the wake-up would go untested.
    await eventually(lambda: finish_waiter_parked(backend, "w"))
    assert not waiter.done()
    began = time.monotonic()
    await backend.settle_jobs([complete(job, "7")])
    await asyncio.wait_for(waiter, 10)
    assert time.monotonic() - began < 5  # woken, not the 30 s timeout
    # Already ended: returns at once.
    await asyncio.wait_for(backend.wait_for_finish(FinishWait(job_id="w", timeout=30)), 5)
    # Ignored for mypy: the handle of a job read back
    handle = JobHandle(app, await backend.get_job("w"))  # type: ignore[arg-type, var-annotated]
    assert await handle.result_async(5) == 7


async def test_redriving_a_dead_member_resumes_what_it_cancelled(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [
            new_job(id="a", max_attempts=1),
            new_job(id="b"),
            new_job(id="c", depends_on=("a", "b")),
            new_job(id="d", depends_on=("c",)),
        ]
    )
    a, b = sorted(await claim_all(backend), key=lambda j: j.id)
    await backend.settle_jobs([Settlement(a.id, a.lease_token, S.DEAD, error=error(1))])
    await backend.settle_jobs([complete(b, "2")])  # ends while c is already cancelled
    assert [await state_of(backend, i) for i in "cd"] == [S.CANCELLED, S.CANCELLED]
    [redriven] = await backend.redrive_jobs(
        BulkAction(where=JobFilter(ids=("a",)), limit=10, dry_run=False)
    )
    assert redriven.state is S.AVAILABLE
    c, d = await backend.get_job("c"), await backend.get_job("d")
    assert c is not None and c.state is S.BLOCKED and c.finished_at is None
    assert [e.type for e in c.errors] == [DEPENDENCY_FAILED]  # the history stays
    assert d is not None and d.state is S.BLOCKED
    a = await claim_one(backend)
    await backend.settle_jobs([complete(a, "1")])  # b completed before: a was the last
    assert await state_of(backend, "c") is S.AVAILABLE
    c = await claim_one(backend)
    await backend.settle_jobs([complete(c)])
    assert await state_of(backend, "d") is S.AVAILABLE


async def test_a_redrive_leaves_cancelled_what_another_parent_still_fails(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [
            new_job(id="a", max_attempts=1),
            new_job(id="b", max_attempts=1),
            new_job(id="c", depends_on=("a", "b")),
        ]
    )
    jobs = await claim_all(backend)
    await backend.settle_jobs(
        [Settlement(j.id, j.lease_token, S.DEAD, error=error(1)) for j in jobs]
    )
    await backend.redrive_jobs(BulkAction(where=JobFilter(ids=("a",)), limit=10, dry_run=False))
    assert await state_of(backend, "c") is S.CANCELLED  # b is still dead
    await backend.redrive_jobs(BulkAction(where=JobFilter(ids=("b",)), limit=10, dry_run=False))
    c = await backend.get_job("c")
    assert c is not None and c.state is S.BLOCKED


async def test_a_bulk_cancel_of_waiting_parents_cancels_their_dependants(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="a"), new_job(id="b", depends_on=("a",))])
    assert await backend.cancel_jobs(
        BulkAction(where=JobFilter(queues=("default",)), limit=10, dry_run=False)
    ) == ["a"]
    b = await backend.get_job("b")
    assert b is not None and b.state is S.CANCELLED
    assert [(e.type, e.message) for e in b.errors] == [
        (DEPENDENCY_FAILED, "parent job a ended cancelled")
    ]


async def test_blocked_jobs_take_no_room_in_a_bounded_queue(backend: Backend) -> None:
    from conveyor.model.errors import QueueFull
    from conveyor.model.job import QueueBound

    bound = QueueBound(max_waiting=1)
    await backend.enqueue_jobs(
        [new_job(id="p", bound=bound)]
        + [new_job(id=f"d{i}", bound=bound, depends_on=("p",)) for i in range(3)]
    )
    assert await backend.count_jobs(JobFilter(states=(S.BLOCKED,))) == 3
    with pytest.raises(QueueFull):  # the one waiting job fills it; the blocked ones do not
        await backend.enqueue_jobs([new_job(id="q", bound=bound)])


async def test_a_shed_parent_cancels_its_dependants(backend: Backend) -> None:
    from conveyor.model.job import QueueBound

    shed = QueueBound(max_waiting=1, shed_oldest=True)
    await backend.enqueue_jobs(
        [new_job(id="p", bound=shed), new_job(id="d", bound=shed, depends_on=("p",))]
    )
    await backend.enqueue_jobs([new_job(id="q", bound=shed)])  # sheds p, the oldest waiting
    assert await state_of(backend, "p") is S.CANCELLED
    d = await backend.get_job("d")
    assert d is not None and d.state is S.CANCELLED
    assert [(e.type, e.message, e.version) for e in d.errors] == [
        (DEPENDENCY_FAILED, "parent job p ended cancelled", __version__)
    ]


async def test_a_dependant_whose_id_is_taken_is_answered_by_the_stored_job(
    backend: Backend,
) -> None:
    await backend.enqueue_jobs([new_job(id="a"), new_job(id="b", depends_on=("a",))])
    # Again, with one more dependant: the stored ones answer, the new one is linked once.
    again = await backend.enqueue_jobs(
        [
            new_job(id="a"),
            new_job(id="b", depends_on=("a",)),
            new_job(id="c", depends_on=("a", "b")),
        ]
    )
    assert [(j.id, j.state) for j in again] == [
        ("a", S.AVAILABLE),
        ("b", S.BLOCKED),
        ("c", S.BLOCKED),
    ]
    assert await backend.dependants_of("a") == ["b", "c"]
    assert await backend.dependants_of("b") == ["c"]
    a = await claim_one(backend)
    await backend.settle_jobs([complete(a)])
    assert [await state_of(backend, i) for i in "bc"] == [S.AVAILABLE, S.BLOCKED]


async def test_a_dependant_keeps_its_rate_limit_bucket(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [new_job(id="p"), new_job(id="r", depends_on=("p",), rate_key="bucket")]
    )
    r = await backend.get_job("r")
    assert r is not None and r.state is S.BLOCKED and r.rate_key == "bucket"

"""Outcomes of an attempt: complete, retry, dead, snooze, release, cancel. All fenced."""

from __future__ import annotations

import pytest
from helpers import claim_one, complete, error, new_job, state_of

from conveyor.backends.capabilities import StateForcing
from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import CheckpointWrite, ForcedState, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState
from conveyor.model.lifecycle import ALLOWED


async def test_complete_stores_result(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="c")])
    job = await claim_one(backend)
    clock.advance(2)
    assert await backend.settle_jobs([complete(job, '{"sent": true}')]) == []
    done = await backend.get_job("c")
    assert done is not None and done.state is JobState.COMPLETED
    assert done.result_value == {"sent": True}
    assert done.finished_at == clock.now and done.lease_expires_at is None


async def test_stale_token_is_rejected_and_changes_nothing(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="s")])
    old = await claim_one(backend)
    await backend.settle_jobs(
        [Settlement(old.id, old.lease_token, JobState.AVAILABLE, refund_attempt=True)]
    )
    new = await claim_one(backend)
    assert new.lease_token != old.lease_token
    for late in (
        complete(old),
        Settlement(old.id, old.lease_token, JobState.DEAD, error=error(1)),
        Settlement(old.id, old.lease_token, JobState.RETRYABLE, error=error(1), run_at=0),
    ):
        assert await backend.settle_jobs([late]) == ["s"]
    current = await backend.get_job("s")
    assert current is not None and current.state is JobState.RUNNING and current.errors == ()
    assert await backend.settle_jobs([complete(new)]) == []
    assert await state_of(backend, "s") is JobState.COMPLETED
    # Once finished, every further write is stale too.
    assert await backend.settle_jobs([complete(new)]) == ["s"]


async def test_batch_settle_reports_only_the_stale(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id=f"m{i}") for i in range(4)])
    jobs = await backend.fetch_jobs(strict_claim(["default"], 4, "w1", 30))
    forged = Settlement(jobs[3].id, jobs[3].lease_token + 100, JobState.COMPLETED, result="1")
    stale = await backend.settle_jobs([complete(j) for j in jobs[:3]] + [forged])
    assert stale == [jobs[3].id]
    assert [await state_of(backend, j.id) for j in jobs] == [JobState.COMPLETED] * 3 + [
        JobState.RUNNING
    ]


async def test_a_batch_of_mixed_outcomes_settles_each_as_told(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id=f"x{i}", max_attempts=3) for i in range(5)])
    jobs = {j.id: j for j in await backend.fetch_jobs(strict_claim(["default"], 5, "w1", 30))}
    batch = [
        Settlement("x0", jobs["x0"].lease_token, JobState.COMPLETED, result='{"n": 0}'),
        Settlement("x1", jobs["x1"].lease_token, JobState.RETRYABLE, run_at=clock() + 60),
        Settlement("x2", jobs["x2"].lease_token, JobState.COMPLETED, result=None),
        Settlement("x3", jobs["x3"].lease_token + 7, JobState.COMPLETED, result="3"),  # forged
        Settlement("x4", jobs["x4"].lease_token, JobState.COMPLETED, result='"four"'),
    ]
    assert await backend.settle_jobs(batch) == ["x3"]
    states = [await state_of(backend, f"x{i}") for i in range(5)]
    assert states == [
        JobState.COMPLETED,
        JobState.RETRYABLE,
        JobState.COMPLETED,
        JobState.RUNNING,
        JobState.COMPLETED,
    ]
    results = [(await backend.get_job(f"x{i}")).result for i in (0, 2, 4)]  # type: ignore[union-attr]
    assert results == ['{"n": 0}', None, '"four"']


async def test_retry_keeps_errors_and_runs_again_when_due(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id="r", max_attempts=3)])
    job = await claim_one(backend)
    await backend.settle_jobs(
        [
            Settlement(
                job.id,
                job.lease_token,
                JobState.RETRYABLE,
                error=error(1, message="first"),
                run_at=clock.now + 10,
            )
        ]
    )
    assert await state_of(backend, "r") is JobState.RETRYABLE
    assert await backend.fetch_jobs(strict_claim(["default"], 1, "w1", 30)) == []
    clock.advance(10)
    again = await claim_one(backend)
    assert again.attempt == 2
    await backend.settle_jobs(
        [
            Settlement(
                again.id, again.lease_token, JobState.DEAD, error=error(2, "ValueError", "second")
            )
        ]
    )
    dead = await backend.get_job("r")
    assert dead is not None and dead.state is JobState.DEAD
    assert [(e.attempt, e.type, e.message) for e in dead.errors] == [
        (1, "ConnectionError", "first"),
        (2, "ValueError", "second"),
    ]
    first = dead.errors[0]
    assert (first.traceback, first.worker_id, first.host, first.version) == (
        "Traceback ...",
        "w1",
        "h1",
        "0.1.0",
    )
    assert dead.payload == '{"args":[],"kwargs":{}}'
    assert dead.finished_at == clock.now


async def test_snooze_does_not_use_an_attempt(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="z")])
    job = await claim_one(backend)
    await backend.settle_jobs(
        [
            Settlement(
                job.id,
                job.lease_token,
                JobState.SCHEDULED,
                run_at=clock.now + 30,
                refund_attempt=True,
            )
        ]
    )
    snoozed = await backend.get_job("z")
    assert snoozed is not None and snoozed.state is JobState.SCHEDULED and snoozed.attempt == 0
    clock.advance(30)
    assert (await claim_one(backend)).attempt == 1


async def test_handler_cancel_moves_running_job_to_cancelled(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="x")])
    job = await claim_one(backend)
    await backend.settle_jobs(
        [
            Settlement(
                job.id, job.lease_token, JobState.CANCELLED, error=error(1, "Cancel", "user asked")
            )
        ]
    )
    assert await state_of(backend, "x") is JobState.CANCELLED


async def test_checkpoint_is_fenced(backend: Backend) -> None:
    from conveyor.backends.params import Lease

    await backend.enqueue_jobs([new_job(id="cp")])
    job = await claim_one(backend)
    assert await backend.checkpoint_job(
        CheckpointWrite(
            lease=Lease(job.id, job.lease_token),
            checkpoint='{"epoch": 3}',
            progress='{"fraction": 0.3, "message": "epoch 3"}',
        )
    )
    assert not await backend.checkpoint_job(
        CheckpointWrite(
            lease=Lease(job.id, job.lease_token + 1), checkpoint='{"epoch": 9}', progress=None
        )
    )
    await backend.settle_jobs(
        [Settlement(job.id, job.lease_token, JobState.AVAILABLE, refund_attempt=True)]
    )
    again = await claim_one(backend)
    assert again.checkpoint_value == {"epoch": 3}
    assert again.progress is not None and '"fraction": 0.3' in again.progress


ILLEGAL = [(a, b) for a in JobState for b in JobState if a != b and (a, b) not in ALLOWED]


# `running` may move to every other state, so it has no illegal successor to try.
@pytest.mark.parametrize(
    "source",
    [JobState.AVAILABLE, JobState.SCHEDULED, JobState.RETRYABLE, JobState.COMPLETED, JobState.DEAD],
)
async def test_storage_rejects_illegal_transitions(
    backend: Backend, clock: ManualClock, source: JobState
) -> None:
    await backend.enqueue_jobs(
        [new_job(id="g", run_at=clock.now + 100 if source is JobState.SCHEDULED else None)]
    )
    if source not in (JobState.AVAILABLE, JobState.SCHEDULED):
        job = await claim_one(backend)
        if source is JobState.COMPLETED:
            await backend.settle_jobs([complete(job)])
        elif source is JobState.DEAD:
            await backend.settle_jobs(
                [Settlement(job.id, job.lease_token, JobState.DEAD, error=error(1))]
            )
        elif source is JobState.RETRYABLE:
            await backend.settle_jobs(
                [
                    Settlement(
                        job.id,
                        job.lease_token,
                        JobState.RETRYABLE,
                        error=error(1),
                        run_at=clock.now + 100,
                    )
                ]
            )
    assert await state_of(backend, "g") is source
    targets = [b for a, b in ILLEGAL if a is source]
    assert targets
    for target in targets:
        with pytest.raises(Exception, match="illegal"):
            assert isinstance(backend, StateForcing)
            await backend.force_state(ForcedState(job_id="g", state=target))
        assert await state_of(backend, "g") is source

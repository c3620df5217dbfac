"""Leases, heartbeats, rescue of dead workers' jobs, cooperative cancellation."""

from __future__ import annotations

from helpers import claim_one, complete, new_job, state_of

from conveyor.backends.claiming import strict_claim
from conveyor.backends.contract import Backend
from conveyor.backends.params import Heartbeat, Lease, Settlement
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState
from conveyor.worker.rescue import rescue_expired


async def test_heartbeat_extends_the_lease(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="h")])
    job = await claim_one(backend, lease=10)
    for _ in range(5):
        clock.advance(8)
        reply = await backend.heartbeat_jobs(
            Heartbeat(leases=[Lease(job.id, job.lease_token)], lease_seconds=10)
        )
        assert reply.lost == frozenset() and reply.cancel_requested == frozenset()
        assert await rescue_expired(backend, backend.clock()) == []
    stored = await backend.get_job("h")
    assert stored is not None and stored.lease_expires_at == clock.now + 10
    assert stored.state is JobState.RUNNING


async def test_expired_lease_is_rescued_and_the_old_owner_fenced(
    backend: Backend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([new_job(id="e", max_attempts=5)])
    first = await claim_one(backend, lease=10, worker="host-a:123:abc")
    clock.advance(10)
    assert await rescue_expired(backend, backend.clock()) == []  # expires strictly after the lease
    clock.advance(0.5)
    assert await rescue_expired(backend, backend.clock()) == ["e"]
    rescued = await backend.get_job("e")
    assert rescued is not None and rescued.state is JobState.AVAILABLE
    assert rescued.attempt == 1  # the crash counted as an attempt
    [err] = rescued.errors
    assert err.type == "LeaseExpired" and err.attempt == 1 and "host-a:123:abc" in err.message
    assert (err.worker_id, err.host) == ("host-a:123:abc", "host-a")
    second = await claim_one(backend, worker="live-worker")
    assert second.attempt == 2
    # The first worker comes back: its heartbeat and its ack are both refused.
    reply = await backend.heartbeat_jobs(
        Heartbeat(leases=[Lease(first.id, first.lease_token)], lease_seconds=10)
    )
    assert reply.lost == frozenset({"e"})
    assert await backend.settle_jobs([complete(first, '"late"')]) == ["e"]
    assert await backend.settle_jobs([complete(second, '"on time"')]) == []
    done = await backend.get_job("e")
    assert done is not None and done.state is JobState.COMPLETED and done.result_value == "on time"


async def test_job_that_kills_every_worker_ends_dead(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="k", max_attempts=3)])
    for attempt in range(1, 4):
        job = await claim_one(backend, lease=5)
        assert job.attempt == attempt
        clock.advance(6)
        assert await rescue_expired(backend, backend.clock()) == ["k"]
    dead = await backend.get_job("k")
    assert dead is not None and dead.state is JobState.DEAD
    assert [e.type for e in dead.errors] == ["LeaseExpired"] * 3
    assert await backend.fetch_jobs(strict_claim(["default"], 1, "w", 5)) == []


async def test_cancel_waiting_job(backend: Backend, clock: ManualClock) -> None:
    await backend.enqueue_jobs([new_job(id="w1"), new_job(id="w2", run_at=clock.now + 50)])
    for job_id in ("w1", "w2"):
        cancelled = await backend.cancel_job(job_id)
        assert cancelled is not None and cancelled.state is JobState.CANCELLED
    clock.advance(100)
    assert await backend.fetch_jobs(strict_claim(["default"], 10, "w", 5)) == []
    assert await backend.cancel_job("unknown") is None


async def test_cancel_running_job_is_a_request_seen_by_heartbeat(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="run")])
    job = await claim_one(backend)
    flagged = await backend.cancel_job("run")
    assert flagged is not None and flagged.state is JobState.RUNNING and flagged.cancel_requested
    reply = await backend.heartbeat_jobs(
        Heartbeat(leases=[Lease(job.id, job.lease_token)], lease_seconds=10)
    )
    assert reply.cancel_requested == frozenset({"run"}) and reply.lost == frozenset()


async def test_cancel_finished_job_changes_nothing(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="fin")])
    await backend.settle_jobs([complete(await claim_one(backend))])
    after = await backend.cancel_job("fin")
    assert after is not None and after.state is JobState.COMPLETED


async def test_release_returns_job_without_using_attempt(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="rel")])
    job = await claim_one(backend)
    await backend.settle_jobs(
        [Settlement(job.id, job.lease_token, JobState.AVAILABLE, refund_attempt=True)]
    )
    stored = await backend.get_job("rel")
    assert stored is not None and stored.attempt == 0 and stored.state is JobState.AVAILABLE
    assert stored.lease_expires_at is None
    assert await state_of(backend, "rel") is JobState.AVAILABLE

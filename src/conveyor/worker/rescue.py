"""Ending the attempts of jobs whose worker is gone.

Two signals say a worker is gone: its lease expired (it stopped heartbeating:
`LeaseExpired`), or something that knows it died says so (a pool supervisor that
reaped its child, or another worker that saw its liveness signal end, see
liveness.py: `WorkerLost`). Either way the backend finds the jobs
(`find_leases`) and the rescuer settles them like any other attempt outcome,
fenced by each job's lease token, so a job that was settled or claimed again
meanwhile is left alone. The error record is built here, once, for every backend.

A lost attempt counts: a job that kills its worker every time ends dead instead
of looping. It goes back to `available` at its old place in line (claim order is
priority, run_at, insertion), not behind everything enqueued since.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor.backends.contract import JobLifecycle
from conveyor.backends.params import HeldLease, LeaseQuery, Settlement
from conveyor.model.errors import LeaseExpired, WorkerLost
from conveyor.model.job import AttemptError, JobState
from conveyor.model.version import __version__

PAGE = 1000


def host_of(worker_id: str | None) -> str:
    """Worker ids are `host:pid:nonce` (pool children `host:pid:pN.G:nonce`)."""
    host, sep, _ = (worker_id or "").partition(":")
    return host if sep else ""


def lost_attempt(
    held: HeldLease, now: float, error_type: str, message: str, app_version: str = ""
) -> Settlement:
    """The outcome of an attempt whose worker is gone: back to work, or dead when it
    was the job's last attempt. `app_version` only from a rescuer that knows the lost
    worker ran its own code (a pool supervisor for its child); a lease-expiry rescuer
    cannot tell which deploy the lost worker ran, and records none."""
    error = AttemptError(
        attempt=held.attempt,
        at=now,
        type=error_type,
        message=message,
        worker_id=held.worker_id or "",
        host=host_of(held.worker_id),
        version=__version__,
        app_version=app_version,
    )
    state = JobState.DEAD if held.attempt >= held.max_attempts else JobState.AVAILABLE
    return Settlement(held.job_id, held.token, state, error=error)


def returned(held: HeldLease) -> Settlement:
    """Back to work without using the attempt (the worker was stopped on purpose)."""
    return Settlement(held.job_id, held.token, JobState.AVAILABLE, refund_attempt=True)


async def rescue_expired(backend: JobLifecycle, now: float) -> list[str]:
    """Settle every job whose lease expired before `now`; return their ids."""

    def expired(held: HeldLease) -> Settlement:
        return lost_attempt(
            held,
            now,
            LeaseExpired.__name__,
            f"lease expired: worker {held.worker_id or '?'} stopped heartbeating",
        )

    return await _settle_all(backend, LeaseQuery(expired_before=now, limit=PAGE), expired)


async def release_worker_jobs(
    backend: JobLifecycle,
    worker_id: str,
    now: float,
    *,
    charge: bool,
    message: str,
    app_version: str = "",
) -> list[str]:
    """Settle every job `worker_id` still holds: it is known to be dead. With
    `charge`, a `WorkerLost` attempt (a crash); without, returned unused."""

    def lost(held: HeldLease) -> Settlement:
        if not charge:
            return returned(held)
        return lost_attempt(held, now, WorkerLost.__name__, message, app_version)

    return await _settle_all(backend, LeaseQuery(worker_ids=(worker_id,), limit=PAGE), lost)


async def _settle_all(
    backend: JobLifecycle, query: LeaseQuery, outcome: Callable[[HeldLease], Settlement]
) -> list[str]:
    # Page by state, not by offset: a settled job leaves `running`, so the next query
    # starts from what is still held, however many other workers settle meanwhile.
    done: list[str] = []
    while True:
        held = await backend.find_leases(query)
        if not held:
            return done
        settlements = [outcome(h) for h in held]
        stale = set(await backend.settle_jobs(settlements))
        applied = [s.job_id for s in settlements if s.job_id not in stale]
        done += applied
        if len(held) < query.limit or not applied:
            return done

"""The backend contract: about twenty verbs named after the job lifecycle.

Every backend (SQLite, PostgreSQL, Redis) implements `Backend` and passes
`tests/conformance/` unchanged. Rules every implementation follows:

* Times are UTC epoch seconds from `self.clock()` (injectable for tests).
* `fetch_jobs` is atomic: one job goes to exactly one caller. It first stages
  due `scheduled`/`retryable` jobs, then claims `available` ones ordered by
  priority (higher first), then run_at, then insertion order, skipping paused
  queues. Each claim increments `attempt` and `lease_token`.
* Every write about a running job (`settle_jobs`, `heartbeat_jobs`,
  `checkpoint_job`) carries the lease token; a stale token changes nothing and is
  reported back, never raised.
* Transitions follow `conveyor.lifecycle.TRANSITIONS`; storage rejects others.

Beyond the contract, a backend may have optional capabilities, each a protocol
below (`TransactionalEnqueue`, `CompleteInTransaction`, `BlockingEnqueue`); the
core asks with `isinstance(backend, Protocol)` and says clearly when a backend
lacks it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from ..job import AttemptError, Job, JobState, NewJob
from ..timeutil import Clock


@dataclass(frozen=True, slots=True)
class Lease:
    job_id: str
    token: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """The end of one attempt, written by the worker's batched completer.

    `state` is where the job goes: completed, retryable (with `run_at`), dead,
    scheduled/available (snooze or release, `refund_attempt=True`), cancelled.
    """

    job_id: str
    token: int
    state: JobState
    result: str | None = None  # JSON text, for completed
    error: AttemptError | None = None
    run_at: float | None = None
    refund_attempt: bool = False


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    lost: frozenset[str] = frozenset()  # leases no longer ours: stop, do not ack
    cancel_requested: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Selects jobs for listing and bulk actions. Empty fields match everything."""

    states: tuple[JobState, ...] = ()
    queues: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    error_type: str | None = None  # type name of the last error
    ids: tuple[str, ...] = ()
    # A case-sensitive substring of the stored arguments' JSON text, as the producer
    # wrote it (compact separators): '"user_id":42' or 'alice@example.org'.
    args_contains: str | None = None


def redrive_scope(where: JobFilter) -> JobFilter:
    """The filter a redrive acts on: dead jobs by default; only dead or cancelled ones
    may be redriven. Every backend calls this, so they refuse the same inputs."""
    states = where.states or (JobState.DEAD,)
    if not set(states) <= {JobState.DEAD, JobState.CANCELLED}:
        raise ValueError("only dead or cancelled jobs can be redriven")
    return replace(where, states=states)


@dataclass(frozen=True, slots=True)
class QueueStats:
    queue: str
    counts: dict[JobState, int] = field(default_factory=dict)
    oldest_available_age: float | None = None  # seconds
    paused: bool = False

    @property
    def in_flight(self) -> int:
        return self.counts.get(JobState.RUNNING, 0)


def queue_stats_from_rows(
    now: float,
    counts_by_queue_and_state: Iterable[Sequence[Any]],
    oldest_available_by_queue: Iterable[Sequence[Any]],
    queue_flags: Iterable[Sequence[Any]],
) -> list[QueueStats]:
    """Stats from the rows of the SQL backends' queries of the same names:
    (queue, state, count), (queue, earliest available run_at), (queue, paused).
    Shared so both list the same queues: those with jobs or a pause flag, by name."""
    counts: dict[str, dict[JobState, int]] = {}
    for queue, state, n in counts_by_queue_and_state:
        counts.setdefault(queue, {})[JobState(state)] = n
    oldest = {queue: run_at for queue, run_at in oldest_available_by_queue}
    paused = {queue: bool(flag) for queue, flag in queue_flags}
    return [
        QueueStats(
            queue=name,
            counts=counts.get(name, {}),
            oldest_available_age=None if name not in oldest else max(0.0, now - oldest[name]),
            paused=paused.get(name, False),
        )
        for name in sorted(set(counts) | set(paused))
    ]


@runtime_checkable
class Backend(Protocol):
    clock: Clock

    # --- life of the connection -------------------------------------------
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied."""
        ...

    # --- producer -------------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Insert jobs in one round trip. A job whose `id` or `unique_key` names a job
        that is still active (or completed within its `unique_for` window) is not
        inserted: the existing job is returned in its place."""
        ...

    # --- worker ---------------------------------------------------------------
    async def fetch_jobs(
        self, queues: Sequence[str], limit: int, worker_id: str, lease_seconds: float
    ) -> list[Job]: ...
    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        """Apply attempt outcomes; return the ids whose token was stale (not applied)."""
        ...
    async def heartbeat_jobs(
        self, leases: Sequence[Lease], lease_seconds: float
    ) -> HeartbeatReply: ...
    async def checkpoint_job(
        self, lease: Lease, checkpoint: str | None, progress: str | None
    ) -> bool:
        """Store JSON progress fenced by the lease; False if the lease was lost."""
        ...
    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        """Return when new work may be there (a hint) or after `timeout`."""
        ...

    # --- maintenance ----------------------------------------------------------
    async def rescue_expired_jobs(self) -> list[str]:
        """Expired leases go back to available (or dead when out of attempts)."""
        ...
    async def prune_jobs(self, completed_before: float, dead_before: float) -> int: ...

    # --- admin ----------------------------------------------------------------
    async def get_job(self, job_id: str) -> Job | None: ...
    async def list_jobs(
        self, where: JobFilter, limit: int = 50, offset: int = 0, after: str | None = None
    ) -> list[Job]:
        """Jobs matching `where`, newest enqueued first. `after` is a keyset cursor:
        the id of the last job of the previous page; the page starts right after it,
        so a deep page costs what the first one does (`offset` has to skip rows).
        Raises JobNotFound if the `after` job no longer exists."""
        ...
    async def count_jobs(self, where: JobFilter) -> int: ...
    async def cancel_job(self, job_id: str) -> Job | None:
        """Cancel a waiting job; flag a running one (cooperative). None if unknown."""
        ...
    async def redrive_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[Job]:
        """Send dead (or cancelled) jobs matching `where` back to available with
        fresh attempts, oldest failure first, at most `limit`."""
        ...
    async def delete_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        """Delete finished jobs (never active ones) matching `where`."""
        ...
    async def queue_stats(self) -> list[QueueStats]: ...
    async def pause_queue(self, queue: str, paused: bool) -> None: ...

    # --- small shared records: live workers, schedule state -------------------
    async def put_meta(self, namespace: str, key: str, value: str, ttl: float | None = None) -> None:
        """Store JSON text `value` under (namespace, key), replacing any previous one;
        with `ttl` (seconds) it disappears after that long unless written again."""
        ...
    async def get_meta(self, namespace: str) -> dict[str, str]:
        """Every live (key -> JSON text) of a namespace."""
        ...
    async def delete_meta(self, namespace: str, key: str) -> None: ...

    # --- test hook --------------------------------------------------------------
    async def force_state(self, job_id: str, state: JobState) -> None:
        """Write `state` with no other change, through the storage guard: raises an
        error whose message contains "illegal" for a transition not in the table.
        Only the conformance suite calls this."""
        ...


# --- optional capabilities ---------------------------------------------------------
@runtime_checkable
class TransactionalEnqueue(Protocol):
    """Enqueue on the caller's own database connection, inside the caller's
    transaction: the jobs commit or roll back with the business data (PostgreSQL)."""

    async def enqueue_jobs_in(self, connection: Any, jobs: Sequence[NewJob]) -> list[Job]: ...


@runtime_checkable
class CompleteInTransaction(Protocol):
    """A transaction that also completes the job, fenced by its lease: commits only
    while the lease is current, so a database side effect happens once (PostgreSQL)."""

    def complete_in_transaction(
        self, lease: Lease, result: str | None = None
    ) -> AbstractAsyncContextManager[Any]: ...

    def complete_in_transaction_sync(
        self, lease: Lease, result: str | None = None
    ) -> AbstractContextManager[Any]: ...


@runtime_checkable
class BlockingEnqueue(Protocol):
    """Enqueue from the caller's own thread without an event loop: the sync facade
    (Django, Flask, scripts) then skips two thread hops (SQLite, PostgreSQL)."""

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]: ...


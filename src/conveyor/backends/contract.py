"""The backend contract: three roles, each a small set of verbs.

* `JobLifecycle`: what producers and workers do to jobs (enqueue, claim, settle,
  heartbeat, checkpoint, find held leases, prune).
* `Inspector`: what operators do (list, count, cancel, redrive, delete, stats, pause).
* `SharedRecords`: small records every worker shares (live workers, schedule state,
  rate windows, breakers), with atomic verbs.

`Backend` is all three. Every backend (memory, SQLite, PostgreSQL, Redis)
implements it and passes `tests/conformance/` unchanged. Rules every
implementation follows:

* Times are UTC epoch seconds from `self.clock()` (injectable for tests); record
  TTLs follow that clock too, never the server's.
* `fetch_jobs` is atomic: one job goes to exactly one caller. It first stages due
  `scheduled`/`retryable` jobs, then claims `available` ones as `ClaimRequest`
  says, skipping paused queues. Each claim increments `attempt` and `lease_token`.
* Every write about a running job (`settle_jobs`, `heartbeat_jobs`,
  `checkpoint_job`) carries the lease token; a stale token changes nothing and is
  reported back, never raised.
* Transitions follow `conveyor.model.lifecycle.TRANSITIONS`; storage rejects others.

A verb that may grow takes one frozen params object (`ClaimRequest`,
`LeaseQuery`), so new fields do not break callers. Beyond the contract a backend
may have optional capabilities, each a protocol below; the core asks with
`isinstance(backend, Protocol)` and says clearly when a backend lacks it.
The params objects and replies are in `params.py`, imported from here as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from conveyor.backends.params import (
    WAITING_STATES,
    ClaimedJobs,
    ClaimRequest,
    FlowLoads,
    FlowQuery,
    HeartbeatReply,
    HeldLease,
    JobFilter,
    KeyLoad,
    Lease,
    LeaseQuery,
    QueueQuota,
    QueueStats,
    Settlement,
    ascii_lower,
    flow_loads_from_rows,
    queue_stats_from_rows,
    redrive_scope,
    waiting_scope,
)
from conveyor.model.clock import Clock
from conveyor.model.job import Job, JobState, NewJob

__all__ = [
    # the roles, the whole contract, the test hook
    "JobLifecycle",
    "Inspector",
    "SharedRecords",
    "Backend",
    "StateForcing",
    # optional capabilities
    "TransactionalEnqueue",
    "CompleteInTransaction",
    "RecordsInTransaction",
    "BlockingEnqueue",
    "LivenessHold",
    "WorkerLiveness",
    "FinishWakeups",
    "KeyLimits",
    # from params.py
    "QueueQuota",
    "ClaimRequest",
    "ClaimedJobs",
    "Lease",
    "HeldLease",
    "LeaseQuery",
    "Settlement",
    "HeartbeatReply",
    "JobFilter",
    "QueueStats",
    "WAITING_STATES",
    "ascii_lower",
    "waiting_scope",
    "redrive_scope",
    "queue_stats_from_rows",
    "FlowQuery",
    "FlowLoads",
    "KeyLoad",
    "flow_loads_from_rows",
]


# --- the three roles -----------------------------------------------------------------
@runtime_checkable
class JobLifecycle(Protocol):
    clock: Clock

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def migrate(self) -> list[int]:
        """Apply pending numbered migrations; return the versions applied."""
        ...

    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Insert jobs in one round trip. A job whose `id` or `unique_key` names a job
        that is still active (or completed within its `unique_for` window) is not
        inserted: the existing job is returned in its place."""
        ...

    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        """Stage due jobs, then claim as `request` says, in claim order: a ClaimedJobs,
        which says when a rate limit that held jobs back has a token again."""
        ...

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        """Apply attempt outcomes; return the ids whose token was stale (not applied).
        A batch names each job once (the worker's completer writes an attempt's
        outcome once), so backends may write it in one statement."""
        ...

    async def heartbeat_jobs(
        self, leases: Sequence[Lease], lease_seconds: float
    ) -> HeartbeatReply: ...

    async def checkpoint_job(
        self, lease: Lease, checkpoint: str | None, progress: str | None
    ) -> bool:
        """Store JSON progress fenced by the lease; False if the lease was lost."""
        ...

    async def hold_rate_bucket(self, key: str, tokens: float, until: float) -> None:
        """Store rate limit bucket `key` as holding `tokens` as of `until`, a time that
        may be ahead: no claim refills it before then, whatever rate its claimer
        declares (conveyor.rules.rate_limits.refill adds nothing for a time behind the
        bucket's). A circuit breaker that opens holds its bucket so, which stops every
        worker's claims of it at once (conveyor.rules.breakers)."""
        ...

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        """Return when new work may be there (a hint) or after `timeout`."""
        ...

    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        """Running jobs whose lease expired or whose worker is gone. The rescuer
        (conveyor.worker.rescue) ends their attempts with `settle_jobs`, fenced."""
        ...

    async def prune_jobs(self, completed_before: float, dead_before: float) -> int:
        """Delete finished jobs past retention, never inside a live `unique_for` window."""
        ...

    async def expire_results(self, now: float, limit: int) -> list[str]:
        """Clear (set to none) at most `limit` results whose `result_expires_at` is
        `now` or earlier (result_ttl, conveyor.rules.results), found by an index on the expiry,
        never by walking the completed jobs; return those jobs' ids. The jobs stay, with
        their expiry, so a read says the result expired."""
        ...

    async def get_job(self, job_id: str) -> Job | None: ...


@runtime_checkable
class Inspector(Protocol):
    async def list_jobs(
        self, where: JobFilter, limit: int = 50, offset: int = 0, after: str | None = None
    ) -> list[Job]:
        """Jobs matching `where`, newest enqueued first. `after` is a keyset cursor:
        the id of the last job of the previous page; the page starts right after it,
        so a deep page costs what the first one does (`offset` has to skip rows).
        Raises JobNotFound if the `after` job no longer exists."""
        ...

    async def count_jobs(self, where: JobFilter) -> int: ...

    async def count_running_of_key(self, concurrency_key: str) -> int:
        """How many jobs of a concurrency key run now (conveyor.rules.concurrency): what a job
        held back by the key's limit waits for."""
        ...

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

    async def cancel_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        """Cancel waiting jobs (scheduled, available, retryable; `waiting_scope`)
        matching `where`, at most `limit`, newest enqueued first, in one atomic step;
        return their ids. A job claimed meanwhile is left running (`cancel_job` is
        the verb that asks a running job to stop)."""
        ...

    async def task_names(self, where: JobFilter) -> list[str]:
        """The distinct task names of the jobs matching `where`, sorted: what a short
        task name given by an operator may stand for (`conveyor.admin.api`)."""
        ...

    async def dependants_of(self, job_id: str) -> list[str]:
        """The ids of the jobs that were blocked on this one (workflows,
        docs/workflows.md), in the order they were enqueued; [] if none or unknown."""
        ...

    async def parents_of(self, job_id: str) -> list[str]:
        """The ids of the jobs this one was enqueued to wait on (`depends_on`, by a
        workflow or by hand), as stored with it, in the order given; [] if none or
        unknown. With `dependants_of`, the one source of a workflow's edges."""
        ...

    async def queue_stats(self) -> list[QueueStats]: ...

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        """What holds the jobs of `query.queue` back: the top concurrency keys by
        running and by held (parked) jobs, and the rate limit buckets their throttled
        jobs wait for (docs/flow-control.md, Operations). It reads every running and
        held job that has a key (an index each on SQL), so it is an operator's read,
        not one for each claim."""
        ...

    async def queue_paused(self, queue: str) -> bool:
        """Whether `queue` is paused (one flag read): why its due jobs wait."""
        ...

    async def pause_queue(self, queue: str, paused: bool) -> None: ...


@runtime_checkable
class SharedRecords(Protocol):
    """Text values under (namespace, key), shared by every worker. Each verb is one
    atomic statement or script. `ttl` (seconds, by the backend's clock) makes a
    record disappear that long after it was written; an expired record is absent
    to every verb."""

    async def get_record(self, namespace: str, key: str) -> str | None: ...

    async def list_records(self, namespace: str) -> dict[str, str]:
        """Every live (key -> value) of a namespace."""
        ...

    async def put_record(
        self, namespace: str, key: str, value: str, ttl: float | None = None
    ) -> None:
        """Store `value`, replacing any previous one (and its TTL)."""
        ...

    async def put_record_if_absent(
        self, namespace: str, key: str, value: str, ttl: float | None = None
    ) -> bool:
        """Store `value` only if no live record has that key; True if stored."""
        ...

    async def compare_and_set_record(
        self, namespace: str, key: str, expected: str | None, value: str, ttl: float | None = None
    ) -> bool:
        """Replace the record with `value` only if it is now `expected` (None:
        absent); True if replaced."""
        ...

    async def incr_record(
        self, namespace: str, key: str, amount: int = 1, ttl: float | None = None
    ) -> int:
        """Add `amount` to an integer record (absent counts as 0) and return the new
        value. `ttl` applies when the record is created; later increments keep its
        expiry (a fixed window)."""
        ...

    async def delete_record(self, namespace: str, key: str) -> bool:
        """Delete the record; True if a live one was there."""
        ...


@runtime_checkable
class Backend(JobLifecycle, Inspector, SharedRecords, Protocol):
    """Everything a backend does: the lifecycle, the inspector and the records."""


# --- for the conformance suite only ---------------------------------------------------
@runtime_checkable
class StateForcing(Protocol):
    """Test hook: write `state` with no other change, through the storage guard,
    raising an error whose message contains "illegal" for a transition not in the
    table. Only the conformance suite uses it, to show storage enforces the machine."""

    async def force_state(self, job_id: str, state: JobState) -> None: ...


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
        self, lease: Lease, result: str | None = None, result_ttl: float | None = None
    ) -> AbstractAsyncContextManager[Any]: ...

    def complete_in_transaction_sync(
        self, lease: Lease, result: str | None = None, result_ttl: float | None = None
    ) -> AbstractContextManager[Any]: ...


@runtime_checkable
class RecordsInTransaction(Protocol):
    """`compare_and_set_record` on the caller's own connection, inside its transaction:
    the write commits or rolls back with it (PostgreSQL). What `once()` marks done
    with inside `current_job().transaction()`."""

    async def compare_and_set_record_in(
        self,
        connection: Any,
        namespace: str,
        key: str,
        expected: str | None,
        value: str,
        ttl: float | None = None,
    ) -> bool: ...

    def compare_and_set_record_in_sync(
        self,
        connection: Any,
        namespace: str,
        key: str,
        expected: str | None,
        value: str,
        ttl: float | None = None,
    ) -> bool: ...


@runtime_checkable
class BlockingEnqueue(Protocol):
    """Enqueue from the caller's own thread without an event loop: the sync facade
    (Django, Flask, scripts) then skips two thread hops (SQLite, PostgreSQL, Redis)."""

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]: ...


@runtime_checkable
class LivenessHold(Protocol):
    """One worker's liveness signal, kept for the worker's life (see WorkerLiveness).
    The holder takes it again by itself after a loss (a connection blip)."""

    @property
    def token(self) -> str | None:
        """What names the signal while it is held, for the worker to announce; None
        while it is lost (and being taken again)."""
        ...

    async def changed(self, since: str | None) -> str | None:
        """Return the token as soon as it differs from `since`."""
        ...

    async def release(self) -> None:
        """Drop the signal on a clean stop, after the worker settled its jobs."""
        ...

    async def abandon(self) -> None:
        """Test hook: end the signal as a killed process does (its connection or
        file closed by the kernel, nothing cleaned up)."""
        ...


@runtime_checkable
class WorkerLiveness(Protocol):
    """A signal the kernel ends the moment a worker process dies, so that other
    workers can rescue its jobs at once instead of after its lease: a session-level
    advisory lock (PostgreSQL), a named connection (Redis), a lock file held with
    flock (SQLite). The worker takes it before its first claim and announces its
    token in its `workers` record; rescuers judge only announced tokens
    (conveyor.worker.liveness). A host that vanishes without closing its
    connections keeps its signal: its jobs come back by the lease, as before."""

    liveness_signal: str  # what the signal is, for messages: "advisory lock"

    async def hold_liveness(self, worker_id: str) -> LivenessHold:
        """Take the signal for `worker_id` (one try; on failure the hold has no token
        yet and keeps trying)."""
        ...

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        """The ids among `candidates` (worker id -> announced token) whose signal is
        gone. A token this backend cannot judge (taken before a server restart,
        malformed, another backend's) is not dead: that worker falls back to its lease."""
        ...


@runtime_checkable
class FinishWakeups(Protocol):
    """Wake-ups for `job.result()`: the step that ends a job (settle, cancel) signals
    those waiting for it, instead of them polling: a LISTEN/NOTIFY channel (PostgreSQL),
    a list to BLPOP (Redis), a datagram (SQLite), an in-process event (memory). A job
    nobody waits for costs its settle one index probe (PostgreSQL), one set lookup
    (Redis), one listing of an empty folder per batch (SQLite)."""

    async def wait_for_finish(self, job_id: str, timeout: float) -> None:
        """Return once the job has ended or may have (a hint: the caller reads it
        again), or after `timeout`. It watches before it looks, so an end between
        the caller's last read and this call is not missed."""
        ...


@runtime_checkable
class KeyLimits(Protocol):
    """A concurrency key's limit set from outside its jobs (conveyor.rules.adaptive: the
    limit an adaptive task's controller computes), in place of the `concurrency_limit`
    its jobs were enqueued with. Every backend has it."""

    async def set_key_limit(self, concurrency_key: str, limit: int | None) -> None:
        """Hold the key to `limit` slots from now on (None: back to its jobs' own
        limit). Raising it unparks the key's next jobs in the same step; lowering it
        takes no slot back: running jobs finish, and the key's next job gets a slot
        once fewer than `limit` hold one."""
        ...

    async def key_limit(self, concurrency_key: str) -> int | None:
        """The limit set for the key, None if none is."""
        ...

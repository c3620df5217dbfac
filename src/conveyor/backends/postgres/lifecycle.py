"""The job lifecycle (the JobLifecycle role) on PostgreSQL: migrate, enqueue, claim,
settle, heartbeat, checkpoint, wait for jobs and for a job's end, find leases, prune,
expire results, read a job; and the capabilities that work on the caller's own
transaction (TransactionalEnqueue, CompleteInTransaction). Batch insert is enqueue.py
(and dependants.py for workflows); all SQL in queries.sql and migrations/."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout

from conveyor.backends.params import (
    CheckpointWrite,
    ClaimedJobs,
    ClaimRequest,
    EnqueueIn,
    FinishWait,
    ForcedState,
    Heartbeat,
    HeartbeatReply,
    HeldLease,
    JobWait,
    LeaseQuery,
    RecordIncrement,
    RecordKey,
    ResultSweep,
    Retention,
    Settlement,
    TransactionalCompletion,
)
from conveyor.backends.postgres import enqueue
from conveyor.backends.postgres.held_connection import Busy
from conveyor.backends.postgres.listener import Listener
from conveyor.backends.postgres.records import PostgresRecords
from conveyor.backends.postgres.rows import claim_order, job_from_row, jsonb
from conveyor.backends.postgres.state import AsyncConn, PostgresState, log
from conveyor.backends.sqlfiles import load_migrations
from conveyor.model.errors import ConfigurationError, StaleLease
from conveyor.model.job import Job, JobState, NewJob
from conveyor.model.lifecycle import IllegalTransition
from conveyor.model.version import __version__


class PostgresLifecycle:
    """JobLifecycle (open and close are the shared state's), with FinishWakeups,
    TransactionalEnqueue, BlockingEnqueue, CompleteInTransaction and StateForcing.
    `records` counts the waiters on a job's end (wait_for_finish)."""

    def __init__(self, state: PostgresState, records: PostgresRecords) -> None:
        self._state = state
        self._records = records
        # Read on every call of the hot verbs: held here, one attribute away.
        self._queries = state.queries
        self._config = state.config
        self._clock = state.clock
        self._run = state.run
        self._enqueue_connection = state.enqueue_connection
        self._claim_connection = state.claim_connection
        self._claims = state.claims
        self._buckets_made: frozenset[str] = frozenset()  # rate limit buckets known to exist

    # --- schema -----------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """Apply pending migrations, each in its own transaction, under an advisory
        lock so concurrent migrators (many workers starting at once) take turns."""
        applied: list[int] = []
        async with self._state.connection() as conn:
            async with conn.transaction():
                await conn.execute(self._queries["lock_migrations"], {"schema": self._state.schema})
                await conn.execute(self._queries["bootstrap_schema"])
                await conn.execute(self._queries["bootstrap_migrations"])
            for migration in load_migrations(__package__ or "conveyor.backends.postgres"):
                async with conn.transaction():
                    await conn.execute(
                        self._queries["lock_migrations"], {"schema": self._state.schema}
                    )
                    cur = await conn.execute(self._queries["applied_migrations"])
                    if migration.version in {row[0] for row in await cur.fetchall()}:
                        continue  # applied earlier, or by another process just now
                    await conn.execute(self._queries["use_schema"], {"schema": self._state.schema})
                    # No parameters: psycopg sends the file as one script, so a migration
                    # may hold many statements and plpgsql bodies (and any % in them).
                    await conn.execute(migration.sql.encode(), prepare=False)
                    await conn.execute(
                        self._queries["record_migration"],
                        {
                            "version": migration.version,
                            "name": migration.name,
                            "now": self._clock(),
                        },
                    )
                applied.append(migration.version)
        if applied:
            log.info("migrated %s to version %d", self._config.redacted, applied[-1])
        return applied

    # --- producer -----------------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        now = self._clock()

        def insert(conn: AsyncConn) -> Awaitable[list[Job]]:
            return enqueue.enqueue_async(self._state, conn, jobs, now)

        try:
            return await self._enqueue_connection.run(insert)  # held_connection.py says why
        except Busy:
            return await self._run(insert)

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Enqueue from the caller's own thread on the sync pool: the sync facade
        (Django, Flask, scripts) skips two thread hops through the portal loop."""
        now = self._clock()
        pool = self._state.sync_pool()
        tries = self._config.pool_size + 1
        for attempt in range(1, tries + 1):
            # getconn/putconn, as _run does: `with pool.connection()` costs twice as
            # much (its context managers, and a commit call an autocommit one skips).
            try:
                conn = pool.getconn()
            except PoolTimeout as exc:
                raise self._state.unavailable(exc) from exc
            try:
                return enqueue.enqueue_sync(self._state, conn, jobs, now)
            except psycopg.OperationalError as exc:
                if attempt == tries or not (conn.broken or conn.closed):
                    raise self._state.unavailable(exc) from exc
            finally:
                pool.putconn(conn)  # a broken one is discarded, not reused
        raise AssertionError("unreachable")

    async def enqueue_jobs_in(self, enqueue_in: EnqueueIn) -> list[Job]:
        """Transactional enqueue on the caller's psycopg connection (sync or async):
        the jobs commit or roll back with the caller's transaction."""
        connection, jobs = enqueue_in.connection, enqueue_in.jobs
        now = self._clock()
        if isinstance(connection, psycopg.AsyncConnection):
            return await enqueue.enqueue_async(self._state, connection, jobs, now)
        if isinstance(connection, psycopg.Connection):
            # A sync connection blocks: keep the event loop free while it works.
            return await asyncio.to_thread(enqueue.enqueue_sync, self._state, connection, jobs, now)
        raise ConfigurationError(
            f"connection= must be a psycopg Connection or AsyncConnection, got "
            f"{type(connection).__name__} (with SQLAlchemy, pass "
            "session.connection().connection.driver_connection)"
        )

    # --- worker -------------------------------------------------------------------------
    async def fetch_jobs(self, request: ClaimRequest) -> ClaimedJobs:
        if request.limit <= 0 or not request.queues:
            return ClaimedJobs()
        now = self._clock()
        params = {
            "now": now,
            "worker_id": request.worker_id,
            "lease_expires_at": now + request.lease_seconds,
        }

        params.update(
            limit=request.limit,
            queues=[entry.name for entry in request.queues],
            quotas=[entry.quota for entry in request.queues],
            ceilings=[
                request.limit if entry.ceiling is None else entry.ceiling
                for entry in request.queues
            ],
        )
        order = {entry.name: i for i, entry in enumerate(request.queues)}
        limits = request.rate_limits
        if limits:
            params.update(
                rate_keys=[limit.key for limit in limits],
                rates=[limit.rate for limit in limits],
                bursts=[limit.burst for limit in limits],
            )
        new_buckets = bool({limit.key for limit in limits} - self._buckets_made)
        claim = self._claims["claim_rated_jobs" if limits else "claim_jobs"]

        async def op(conn: AsyncConn) -> ClaimedJobs:
            # One pipeline, so one round trip: on loopback no faster than two (psycopg's
            # pipeline bookkeeping costs what the round trip saves), over a slow link
            # one round trip less per claim (docs/performance.md).
            async with conn.pipeline():
                await conn.execute(self._queries["stage_due_jobs"], {"now": now})
                if new_buckets:  # once per bucket and process: a new bucket starts full
                    await conn.execute(self._queries["ensure_rate_buckets"], params)
                cur = psycopg.AsyncRawCursor(conn)
                await cur.execute(claim.sql, claim.args(params))
            rows = await cur.fetchall()
            next_token_at = rows[0][-1] if limits and rows else None
            if limits:
                rows = [r[:-1] for r in rows if r[0] is not None]
            # RETURNING has no order: by the request's queue order, then claim order.
            rows.sort(key=lambda r: (order.get(r[2], 0), claim_order(r)))
            return ClaimedJobs.of((job_from_row(r) for r in rows), next_token_at)

        try:  # generic plans, no JIT (queries.sql, claim_session)
            claimed = await self._claim_connection.run(op)
        except Busy:
            claimed = await self._run(op)
        self._buckets_made |= {limit.key for limit in limits}
        return claimed

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        if not settlements:
            return []
        params = {
            "now": self._clock(),
            "ids": [s.job_id for s in settlements],
            "tokens": [s.token for s in settlements],
            "states": [s.state.value for s in settlements],
            "results": [s.result for s in settlements],
            "errors": [None if s.error is None else jsonb(s.error.to_dict()) for s in settlements],
            "run_ats": [None if s.run_at is None else float(s.run_at) for s in settlements],
            "refunds": [s.refund_attempt for s in settlements],
            "result_ttls": [s.result_ttl for s in settlements],
            "version": __version__,
            "done_channel": self._config.done_channel,
        }
        wakes = any(s.state in (JobState.AVAILABLE, JobState.SCHEDULED) for s in settlements)

        async def op(conn: AsyncConn) -> set[str]:
            async with conn.pipeline():
                cur = await conn.execute(self._queries["settle_jobs"], params)
                if wakes:  # snoozed or released jobs: someone may claim them now
                    await self._state.notify(conn)
                rows = await cur.fetchall()
            if not wakes and any(row[1] for row in rows):  # dependants became available
                await self._state.notify(conn)
            return {row[0] for row in rows}

        applied = await self._run(op)
        return [s.job_id for s in settlements if s.job_id not in applied]

    async def heartbeat_jobs(self, heartbeat: Heartbeat) -> HeartbeatReply:
        leases, lease_seconds = heartbeat.leases, heartbeat.lease_seconds
        if not leases:
            return HeartbeatReply()
        params = {
            "ids": [lease.job_id for lease in leases],
            "tokens": [lease.token for lease in leases],
            "lease_expires_at": self._clock() + lease_seconds,
        }

        async def op(conn: AsyncConn) -> list[tuple[str, bool]]:
            cur = await conn.execute(self._queries["heartbeat_jobs"], params)
            return [(row[0], row[1]) for row in await cur.fetchall()]

        rows = await self._run(op)
        held = {job_id for job_id, _ in rows}
        return HeartbeatReply(
            lost=frozenset(lease.job_id for lease in leases if lease.job_id not in held),
            cancel_requested=frozenset(job_id for job_id, cancel in rows if cancel),
        )

    async def checkpoint_job(self, checkpoint_write: CheckpointWrite) -> bool:
        lease, checkpoint, progress = (
            checkpoint_write.lease,
            checkpoint_write.checkpoint,
            checkpoint_write.progress,
        )
        params = {
            "id": lease.job_id,
            "token": lease.token,
            "checkpoint": checkpoint,
            "progress": progress,
        }

        async def op(conn: AsyncConn) -> bool:
            return (await conn.execute(self._queries["checkpoint_job"], params)).rowcount == 1

        return await self._run(op)

    async def wait_for_jobs(self, job_wait: JobWait) -> None:
        timeout = job_wait.timeout
        state = self._state
        if state.wakeup_listener is None:
            state.wakeup_listener = Listener(
                self._config.conninfo, self._queries["listen"], self._config.redacted
            )
        await state.wakeup_listener.wait(timeout)

    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        """FinishWakeups: LISTEN on the done channel, count in as a waiter (a record the
        settle statement probes), look, then wait for a NOTIFY; a hint for any end."""
        job_id, timeout = finish_wait.job_id, finish_wait.timeout
        state = self._state
        fresh = state.done_listener is None
        if state.done_listener is None:
            state.done_listener = Listener(
                self._config.conninfo, self._queries["listen_done"], self._config.redacted
            )
            state.done_listener.start()
        listening = state.done_listener
        with contextlib.suppress(TimeoutError):  # not listening yet: the wait is a poll
            await asyncio.wait_for(listening.connected.wait(), min(timeout, 1.0))
        if fresh:  # its first connect says "look now" to everyone: this call looks anyway
            listening.event.clear()
        await self._records.incr_record(
            RecordIncrement(
                namespace="finish_waiters", key=job_id, amount=1, ttl=max(timeout, 1.0) + 60
            )
        )
        try:
            job = await self.get_job(job_id)
            if job is not None and not job.is_finished:
                await listening.wait(timeout)
        finally:
            if (
                await self._records.incr_record(
                    RecordIncrement(namespace="finish_waiters", key=job_id, amount=-1)
                )
                <= 0
            ):
                await self._records.delete_record(RecordKey(namespace="finish_waiters", key=job_id))

    # --- complete in transaction ------------------------------------------------------
    @asynccontextmanager
    async def complete_in_transaction(
        self, transactional_completion: TransactionalCompletion
    ) -> AsyncIterator[AsyncConn]:
        """A transaction that also completes the job, fenced by its lease token.

        The lease is checked first (no business write on a lost lease) and the
        completion is a guarded UPDATE just before COMMIT: if another attempt took
        the job meanwhile, StaleLease is raised and everything rolls back. Holding the
        row lock only at the end keeps heartbeats of other jobs from queueing behind
        a long transaction."""
        lease, result, result_ttl = (
            transactional_completion.lease,
            transactional_completion.result,
            transactional_completion.result_ttl,
        )
        async with self._state.connection() as conn, conn.transaction():
            cur = await conn.execute(
                self._queries["check_lease"], {"id": lease.job_id, "token": lease.token}
            )
            if await cur.fetchone() is None:
                raise StaleLease(f"job {lease.job_id}: lease {lease.token} lost; nothing written")
            yield conn
            params = {
                "id": lease.job_id,
                "token": lease.token,
                "result": result,
                "result_ttl": result_ttl,
                "now": self._clock(),
                "version": __version__,
                "done_channel": self._config.done_channel,
            }
            if await (await conn.execute(self._queries["complete_job"], params)).fetchone() is None:
                raise StaleLease(
                    f"job {lease.job_id}: lease {lease.token} lost during the "
                    "transaction; rolled back"
                )

    @contextmanager
    def complete_in_transaction_sync(
        self, transactional_completion: TransactionalCompletion
    ) -> Iterator[psycopg.Connection[Any]]:
        """Sync form of `complete_in_transaction`, for handlers run in threads."""
        lease, result, result_ttl = (
            transactional_completion.lease,
            transactional_completion.result,
            transactional_completion.result_ttl,
        )
        pool = self._state.sync_pool()
        try:
            with pool.connection() as conn, conn.transaction():
                cur = conn.execute(
                    self._queries["check_lease"], {"id": lease.job_id, "token": lease.token}
                )
                if cur.fetchone() is None:
                    raise StaleLease(
                        f"job {lease.job_id}: lease {lease.token} lost; nothing written"
                    )
                yield conn
                params = {
                    "id": lease.job_id,
                    "token": lease.token,
                    "result": result,
                    "result_ttl": result_ttl,
                    "now": self._clock(),
                    "version": __version__,
                    "done_channel": self._config.done_channel,
                }
                if conn.execute(self._queries["complete_job"], params).fetchone() is None:
                    raise StaleLease(
                        f"job {lease.job_id}: lease {lease.token} lost during the "
                        "transaction; rolled back"
                    )
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise self._state.unavailable(exc) from exc

    # --- maintenance ----------------------------------------------------------------
    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        params = {
            "expired_before": query.expired_before,
            "worker_ids": list(query.worker_ids),
            "limit": query.limit,
        }

        async def op(conn: AsyncConn) -> list[HeldLease]:
            cur = await conn.execute(self._queries["find_leases"], params)
            return [HeldLease(*row) for row in await cur.fetchall()]

        return await self._run(op)

    async def prune_jobs(self, retention: Retention) -> int:
        completed_before, dead_before = retention.completed_before, retention.dead_before
        total = 0
        while True:  # in slices, so a big prune never holds many row locks for long
            params = {
                "completed_before": completed_before,
                "dead_before": dead_before,
                "now": self._clock(),
                "limit": 1000,
            }

            async def op(conn: AsyncConn) -> int:
                # Run (and retried) by the _run below, within this iteration.
                return (await conn.execute(self._queries["prune_jobs"], params)).rowcount  # noqa: B023

            n = await self._run(op)
            total += n
            if n < 1000:
                return total

    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        now, limit = result_sweep.now, result_sweep.limit

        async def op(conn: AsyncConn) -> list[str]:
            cur = await conn.execute(self._queries["expire_results"], {"now": now, "limit": limit})
            return [str(row[0]) for row in await cur.fetchall()]

        return await self._run(op)

    async def get_job(self, job_id: str) -> Job | None:
        rows = await self._state.fetch("get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    async def force_state(self, forced_state: ForcedState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        job_id, state = forced_state.job_id, forced_state.state
        job = await self.get_job(job_id)

        async def op(conn: AsyncConn) -> None:
            await conn.execute(self._queries["force_state"], {"id": job_id, "state": state.value})

        try:
            await self._run(op)
        except psycopg.errors.CheckViolation as exc:
            if job is None:
                raise
            raise IllegalTransition(job.state, state) from exc

"""PostgreSQL: any number of worker hosts share one database.

`Conveyor("postgresql://user@host/db?schema=conveyor")`. Built on psycopg 3 and
an async connection pool; all SQL lives in queries.sql and migrations/. See
docs/postgres.md for transactional enqueue and complete-in-transaction.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from ...errors import BackendUnavailable, ConfigurationError, JobNotFound, StaleLease
from ...job import TERMINAL_STATES, Job, JobState, NewJob
from ...lifecycle import IllegalTransition
from ...timeutil import Clock, system_clock
from ...claiming import claim_in_passes_async
from ..base import (ClaimRequest, HeartbeatReply, HeldLease, JobFilter, Lease, LeaseQuery,
                    QueueStats, Settlement, queue_stats_from_rows, redrive_scope,
                    waiting_scope)
from ..sqlfiles import load_migrations
from . import enqueue, liveness
from .config import parse_postgres_url
from .connect import first_connection
from .lane import Busy, Lane
from .listener import Listener
from .records import PostgresRecords
from .rows import claim_order, filter_params, job_from_row, jsonb, load_schema_queries

log = logging.getLogger("conveyor.postgres")
T = TypeVar("T")
AsyncConn = psycopg.AsyncConnection[Any]


class PostgresBackend(PostgresRecords):
    """Every Backend verb over one async connection pool (autocommit connections:
    a statement is its own transaction unless a verb opens one)."""

    def __init__(self, url: str, clock: Clock = system_clock) -> None:
        self.config = parse_postgres_url(url)
        self.clock = clock
        self.schema = self.config.schema
        self.q = load_schema_queries(self.schema, self.config.channel)
        self._pool: AsyncConnectionPool[AsyncConn] | None = None
        self._sync_pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._sync_pool_lock = threading.Lock()
        self._listener: Listener | None = None
        self._lane = Lane(self.config.conninfo, self.config.timeout)
        self._open_lock = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<PostgresBackend {self.config.redacted}>"

    # --- plumbing -------------------------------------------------------------------
    async def open(self) -> None:
        """Connect once directly, then open the pool: a permanent mistake (unknown
        role or database, wrong password) is ConfigurationError at once, in the
        server's words, and an unreachable server BackendUnavailable saying why;
        the pool itself would only time out. See connect.py."""
        async with self._open_lock:
            if self._pool is not None:
                return
            self._lane.adopt(await first_connection(self.config))
            pool: AsyncConnectionPool[AsyncConn] = AsyncConnectionPool(
                self.config.conninfo, kwargs={"autocommit": True}, min_size=1,
                max_size=self.config.pool_size, timeout=self.config.timeout, open=False,
                name=f"conveyor-{self.schema}",
            )
            await pool.open()
            self._pool = pool

    async def close(self) -> None:
        await self._lane.close()
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()
        with self._sync_pool_lock:
            sync_pool, self._sync_pool = self._sync_pool, None
        if sync_pool is not None:
            try:
                await asyncio.to_thread(sync_pool.close)
            except RuntimeError:  # at interpreter exit no thread can be had: close here
                sync_pool.close()

    def _unavailable(self, exc: Exception) -> BackendUnavailable:
        return BackendUnavailable(
            f"PostgreSQL at {self.config.redacted} is unavailable ({type(exc).__name__}: "
            f"{str(exc).strip() or 'no detail'}); nothing was acknowledged, retry later"
        )

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[AsyncConn]:
        """A pooled connection; driver connection errors become BackendUnavailable."""
        if self._pool is None:
            await self.open()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self._unavailable(exc) from exc
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    async def _run(self, op: Callable[[AsyncConn], Awaitable[T]]) -> T:
        """Run `op` on a pooled connection, again on another if that one was dead
        (killed by pg_terminate_backend, a restart, a proxy): the pool only finds out
        by using it, and after a restart every idle connection is dead, so up to
        pool_size + 1 tries (a dead connection fails at once, no network wait).
        Every verb here is safe to repeat after a failure: enqueue dedups by id,
        writes are fenced by lease tokens, claims of a lost reply come back through
        lease expiry. getconn/putconn rather than two context managers: this wraps
        every call, and enqueue one by one is measured against a bare INSERT."""
        if self._pool is None:
            await self.open()
        pool = self._pool
        assert pool is not None
        tries = self.config.pool_size + 1
        for attempt in range(1, tries + 1):
            try:
                conn = await pool.getconn()
            except PoolTimeout as exc:
                raise self._unavailable(exc) from exc
            try:
                return await op(conn)
            except psycopg.OperationalError as exc:
                if attempt == tries or not (conn.broken or conn.closed):
                    raise self._unavailable(exc) from exc
                log.info("a pooled connection to %s was dead; retrying on another",
                         self.config.redacted)
            finally:
                await pool.putconn(conn)  # a broken one is discarded, not reused
        raise AssertionError("unreachable")

    # --- schema -----------------------------------------------------------------------
    async def migrate(self) -> list[int]:
        """Apply pending migrations, each in its own transaction, under an advisory
        lock so concurrent migrators (many workers starting at once) take turns."""
        applied: list[int] = []
        async with self._connection() as conn:
            async with conn.transaction():
                await conn.execute(self.q["lock_migrations"], {"schema": self.schema})
                await conn.execute(self.q["bootstrap_schema"])
                await conn.execute(self.q["bootstrap_migrations"])
            for migration in load_migrations(__package__ or "conveyor.backends.postgres"):
                async with conn.transaction():
                    await conn.execute(self.q["lock_migrations"], {"schema": self.schema})
                    cur = await conn.execute(self.q["applied_migrations"])
                    if migration.version in {row[0] for row in await cur.fetchall()}:
                        continue  # applied earlier, or by another process just now
                    await conn.execute(self.q["use_schema"], {"schema": self.schema})
                    # No parameters: psycopg sends the file as one script, so a migration
                    # may hold many statements and plpgsql bodies (and any % in them).
                    await conn.execute(migration.sql.encode(), prepare=False)
                    await conn.execute(
                        self.q["record_migration"],
                        {"version": migration.version, "name": migration.name, "now": self.clock()},
                    )
                applied.append(migration.version)
        if applied:
            log.info("migrated %s to version %d", self.config.redacted, applied[-1])
        return applied

    # --- producer -----------------------------------------------------------------
    async def enqueue_jobs(self, jobs: Sequence[NewJob]) -> list[Job]:
        now = self.clock()

        def insert(conn: AsyncConn) -> Awaitable[list[Job]]:
            return enqueue.enqueue_async(self, conn, jobs, now)

        try:
            return await self._lane.run(insert)  # see lane.py: the pool costs ~50 µs
        except Busy:
            return await self._run(insert)

    def enqueue_jobs_blocking(self, jobs: Sequence[NewJob]) -> list[Job]:
        """Enqueue from the caller's own thread on the sync pool: the sync facade
        (Django, Flask, scripts) skips two thread hops through the portal loop."""
        now = self.clock()
        pool = self._get_sync_pool()
        tries = self.config.pool_size + 1
        for attempt in range(1, tries + 1):
            try:
                with pool.connection() as conn:
                    return enqueue.enqueue_sync(self, conn, jobs, now)
            except PoolTimeout as exc:
                raise self._unavailable(exc) from exc
            except psycopg.OperationalError as exc:
                if attempt == tries or not (conn.broken or conn.closed):
                    raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")

    async def enqueue_jobs_in(self, connection: Any, jobs: Sequence[NewJob]) -> list[Job]:
        """Transactional enqueue on the caller's psycopg connection (sync or async):
        the jobs commit or roll back with the caller's transaction."""
        now = self.clock()
        if isinstance(connection, psycopg.AsyncConnection):
            return await enqueue.enqueue_async(self, connection, jobs, now)
        if isinstance(connection, psycopg.Connection):
            # A sync connection blocks: keep the event loop free while it works.
            return await asyncio.to_thread(enqueue.enqueue_sync, self, connection, jobs, now)
        raise ConfigurationError(
            f"connection= must be a psycopg Connection or AsyncConnection, got "
            f"{type(connection).__name__} (with SQLAlchemy, pass "
            "session.connection().connection.driver_connection)"
        )

    # --- worker -------------------------------------------------------------------------
    async def fetch_jobs(self, request: ClaimRequest) -> list[Job]:
        if request.limit <= 0 or not request.queues:
            return []
        now = self.clock()
        params = {"now": now, "worker_id": request.worker_id,
                  "lease_expires_at": now + request.lease_seconds}

        async def op(conn: AsyncConn) -> list[Job]:
            # Two statements, not one pipeline: measured no faster here (psycopg's
            # pipeline bookkeeping costs what the saved round trip gains on a LAN).
            await conn.execute(self.q["stage_due_jobs"], {"now": now})

            async def take(queue: str, n: int) -> list[Any]:
                cur = await conn.execute(self.q["claim_jobs"], {**params, "queue": queue,
                                                                "limit": n})
                return sorted(await cur.fetchall(), key=claim_order)

            return [job_from_row(r) for r in await claim_in_passes_async(request, take)]

        return await self._run(op)

    async def settle_jobs(self, settlements: Sequence[Settlement]) -> list[str]:
        if not settlements:
            return []
        params = {
            "now": self.clock(),
            "ids": [s.job_id for s in settlements],
            "tokens": [s.token for s in settlements],
            "states": [s.state.value for s in settlements],
            "results": [s.result for s in settlements],
            "errors": [None if s.error is None else jsonb(s.error.to_dict()) for s in settlements],
            "run_ats": [None if s.run_at is None else float(s.run_at) for s in settlements],
            "refunds": [s.refund_attempt for s in settlements],
        }
        wakes = any(s.state in (JobState.AVAILABLE, JobState.SCHEDULED) for s in settlements)

        async def op(conn: AsyncConn) -> set[str]:
            async with conn.pipeline():
                cur = await conn.execute(self.q["settle_jobs"], params)
                if wakes:  # snoozed or released jobs: someone may claim them now
                    await self._notify(conn)
                return {row[0] for row in await cur.fetchall()}

        applied = await self._run(op)
        return [s.job_id for s in settlements if s.job_id not in applied]

    async def _notify(self, conn: AsyncConn, queues: Sequence[str] = ("*",)) -> None:
        # The payload names queues, but a wake-up is a hint: "*" (some queue) will do.
        await conn.execute(self.q["notify_queues"],
                           {"channel": self.config.channel, "queues": list(queues)})

    async def heartbeat_jobs(self, leases: Sequence[Lease], lease_seconds: float) -> HeartbeatReply:
        if not leases:
            return HeartbeatReply()
        params = {"ids": [l.job_id for l in leases], "tokens": [l.token for l in leases],
                  "lease_expires_at": self.clock() + lease_seconds}

        async def op(conn: AsyncConn) -> list[tuple[str, bool]]:
            cur = await conn.execute(self.q["heartbeat_jobs"], params)
            return [(row[0], row[1]) for row in await cur.fetchall()]

        rows = await self._run(op)
        held = {job_id for job_id, _ in rows}
        return HeartbeatReply(
            lost=frozenset(l.job_id for l in leases if l.job_id not in held),
            cancel_requested=frozenset(job_id for job_id, cancel in rows if cancel),
        )

    async def checkpoint_job(self, lease: Lease, checkpoint: str | None, progress: str | None) -> bool:
        params = {"id": lease.job_id, "token": lease.token, "checkpoint": checkpoint,
                  "progress": progress}

        async def op(conn: AsyncConn) -> bool:
            return (await conn.execute(self.q["checkpoint_job"], params)).rowcount == 1

        return await self._run(op)

    async def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> None:
        if self._listener is None:
            self._listener = Listener(self.config.conninfo, self.q["listen"], self.config.redacted)
        await self._listener.wait(timeout)

    # --- complete in transaction ------------------------------------------------------
    @asynccontextmanager
    async def complete_in_transaction(
        self, lease: Lease, result: str | None = None
    ) -> AsyncIterator[AsyncConn]:
        """A transaction that also completes the job, fenced by its lease token.

        The lease is checked first (no business write on a lost lease) and the
        completion is a guarded UPDATE just before COMMIT: if another attempt took
        the job meanwhile, StaleLease is raised and everything rolls back. Holding the
        row lock only at the end keeps heartbeats of other jobs from queueing behind
        a long transaction."""
        async with self._connection() as conn, conn.transaction():
            cur = await conn.execute(self.q["check_lease"], {"id": lease.job_id, "token": lease.token})
            if await cur.fetchone() is None:
                raise StaleLease(f"job {lease.job_id}: lease {lease.token} lost; nothing written")
            yield conn
            params = {"id": lease.job_id, "token": lease.token, "result": result,
                      "now": self.clock()}
            if (await conn.execute(self.q["complete_job"], params)).rowcount != 1:
                raise StaleLease(f"job {lease.job_id}: lease {lease.token} lost during the "
                                 "transaction; rolled back")

    @contextmanager
    def complete_in_transaction_sync(
        self, lease: Lease, result: str | None = None
    ) -> Iterator[psycopg.Connection[Any]]:
        """Sync form of `complete_in_transaction`, for handlers run in threads."""
        pool = self._get_sync_pool()
        try:
            with pool.connection() as conn, conn.transaction():
                cur = conn.execute(self.q["check_lease"], {"id": lease.job_id, "token": lease.token})
                if cur.fetchone() is None:
                    raise StaleLease(f"job {lease.job_id}: lease {lease.token} lost; nothing written")
                yield conn
                params = {"id": lease.job_id, "token": lease.token, "result": result,
                          "now": self.clock()}
                if conn.execute(self.q["complete_job"], params).rowcount != 1:
                    raise StaleLease(f"job {lease.job_id}: lease {lease.token} lost during the "
                                     "transaction; rolled back")
        except (PoolTimeout, psycopg.OperationalError) as exc:
            raise self._unavailable(exc) from exc

    def _get_sync_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        with self._sync_pool_lock:
            if self._sync_pool is None:
                self._sync_pool = ConnectionPool(
                    self.config.conninfo, kwargs={"autocommit": True}, min_size=1,
                    max_size=self.config.pool_size, timeout=self.config.timeout,
                    name=f"conveyor-{self.schema}-sync", open=True,
                )
            return self._sync_pool

    # --- maintenance ----------------------------------------------------------------
    async def find_leases(self, query: LeaseQuery) -> list[HeldLease]:
        params = {"expired_before": query.expired_before, "worker_ids": list(query.worker_ids),
                  "limit": query.limit}

        async def op(conn: AsyncConn) -> list[HeldLease]:
            cur = await conn.execute(self.q["find_leases"], params)
            return [HeldLease(*row) for row in await cur.fetchall()]

        return await self._run(op)

    async def prune_jobs(self, completed_before: float, dead_before: float) -> int:
        total = 0
        while True:  # in slices, so a big prune never holds many row locks for long
            params = {"completed_before": completed_before, "dead_before": dead_before,
                      "now": self.clock(), "limit": 1000}

            async def op(conn: AsyncConn) -> int:
                return (await conn.execute(self.q["prune_jobs"], params)).rowcount

            n = await self._run(op)
            total += n
            if n < 1000:
                return total

    # --- liveness (WorkerLiveness; see liveness.py) -------------------------------------
    liveness_signal = liveness.SIGNAL

    async def hold_liveness(self, worker_id: str) -> liveness.AdvisoryLockHolder:
        holder = liveness.AdvisoryLockHolder(self.config.conninfo, self.q, worker_id)
        await holder.start(self.config.timeout)
        return holder

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        tokens, params = liveness.gone_params(candidates)
        if not tokens:
            return set()
        [(epoch, gone)] = await self._fetch("liveness_locks_gone", params)
        return liveness.dead_from_row(tokens, epoch, gone)

    # --- admin ---------------------------------------------------------------------
    async def _fetch(self, query: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async def op(conn: AsyncConn) -> list[tuple[Any, ...]]:
            return await (await conn.execute(self.q[query], params)).fetchall()

        return await self._run(op)

    async def get_job(self, job_id: str) -> Job | None:
        rows = await self._fetch("get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    async def list_jobs(
        self, where: JobFilter, limit: int = 50, offset: int = 0, after: str | None = None,
        oldest_finished_first: bool = False,
    ) -> list[Job]:
        params = {**filter_params(where), "limit": limit, "offset": offset,
                  "oldest_finished_first": oldest_finished_first}
        if oldest_finished_first:
            return [job_from_row(r) for r in await self._fetch("filter_jobs", params)]
        before_seq = None
        if after is not None:
            rows = await self._fetch("seq_of_job", {"id": after})
            if not rows:
                raise JobNotFound(f"job {after} (the page cursor) no longer exists; "
                                  "start again from the first page")
            before_seq = rows[0][0]
        params["before_seq"] = before_seq
        return [job_from_row(r) for r in await self._fetch("list_jobs_newest_first", params)]

    async def count_jobs(self, where: JobFilter) -> int:
        return int((await self._fetch("count_filtered_jobs", filter_params(where)))[0][0])

    async def cancel_job(self, job_id: str) -> Job | None:
        params = {"id": job_id, "now": self.clock()}

        async def op(conn: AsyncConn) -> None:
            async with conn.transaction():
                if (await conn.execute(self.q["cancel_waiting_job"], params)).rowcount == 0:
                    await conn.execute(self.q["request_cancel_running_job"], params)

        await self._run(op)
        return await self.get_job(job_id)

    async def redrive_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[Job]:
        scoped = redrive_scope(where)
        chosen = await self.list_jobs(scoped, limit, 0, oldest_finished_first=True)
        if dry_run or not chosen:
            return chosen
        ids = [job.id for job in chosen]

        async def op(conn: AsyncConn) -> list[tuple[Any, ...]]:
            async with conn.transaction():
                await conn.execute(self.q["redrive_jobs"], {"ids": ids, "now": self.clock()})
                await self._notify(conn)
                return await (await conn.execute(self.q["get_jobs"], {"ids": ids})).fetchall()

        by_id = {job.id: job for job in map(job_from_row, await self._run(op))}
        return [by_id[i] for i in ids if i in by_id]

    async def delete_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted, nor counted against the limit
        scoped = replace(where, states=tuple(sorted(finished)))
        ids = [j.id for j in await self.list_jobs(scoped, limit, 0, oldest_finished_first=True)]
        if dry_run or not ids:
            return ids
        deleted = {row[0] for row in await self._fetch("delete_jobs", {"ids": ids})}
        return [i for i in ids if i in deleted]

    async def cancel_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        scoped = waiting_scope(where)
        if scoped is None:
            return []
        ids = [j.id for j in await self.list_jobs(scoped, limit, 0)]
        if dry_run or not ids:
            return ids
        cancelled = {row[0] for row in await self._fetch(
            "cancel_waiting_jobs", {"ids": ids, "now": self.clock()})}
        return [i for i in ids if i in cancelled]

    async def task_names(self, where: JobFilter) -> list[str]:
        return [str(row[0]) for row in await self._fetch("task_names", filter_params(where))]

    async def queue_stats(self) -> list[QueueStats]:
        return queue_stats_from_rows(
            self.clock(),
            await self._fetch("count_by_queue_and_state", {}),
            await self._fetch("oldest_available_by_queue", {}),
            await self._fetch("all_queue_flags", {}),
        )

    async def pause_queue(self, queue: str, paused: bool) -> None:
        async def op(conn: AsyncConn) -> None:
            await conn.execute(self.q["set_queue_paused"], {"queue": queue, "paused": paused})
            if not paused:
                await self._notify(conn, [queue])

        await self._run(op)

    async def force_state(self, job_id: str, state: JobState) -> None:
        """Test hook: try a raw state write, to show storage guards transitions."""
        job = await self.get_job(job_id)

        async def op(conn: AsyncConn) -> None:
            await conn.execute(self.q["force_state"], {"id": job_id, "state": state.value})

        try:
            await self._run(op)
        except psycopg.errors.CheckViolation as exc:
            if job is None:
                raise
            raise IllegalTransition(job.state, state) from exc

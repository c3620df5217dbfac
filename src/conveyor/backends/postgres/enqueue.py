"""Batch insert with dedup, on a pooled connection or on a caller's own.

Fast path (no job of the batch has a unique_key, the common case): one INSERT
... ON CONFLICT (id) DO NOTHING statement that also notifies, so one round trip
and, in autocommit, no BEGIN/COMMIT: as cheap as a bare INSERT can be. Jobs
whose id is already taken (a retry of the same enqueue, a deterministic id)
then take the full path: in autocommit, a batch mixing new and taken ids
commits in two steps, each safe to repeat.

Full path: lock keys, drop finished jobs being replaced, insert with dedup,
notify - four statements in a pipeline inside one transaction (a savepoint when
the caller already has one open): one round trip, all or nothing.

On a caller's connection every statement joins the caller's transaction.

Race safety: ids are unique in the table, so two enqueues of one id cannot both
insert (ON CONFLICT DO NOTHING, and the loser reads the winner's row back).
Unique keys have no such index - a completed job holds its key only for
`unique_for` - so enqueues of one key serialise on a transaction-scoped advisory
lock taken in a statement of its own, before the insert's snapshot.

Jobs with a fairness key (conveyor.rules.fairness) take the full path too, after one more
round trip that reserves their virtual times (assign_fair_vtimes, in autocommit its
own short transaction, so producers of one key queue on its row only for that
statement); a reserved turn whose job turns out a duplicate is a gap, which only
moves that key's next job one turn later.

Bounded queues (conveyor.rules.backpressure) take the full path too, with a lock per
bounded queue taken the same way: after the insert, the queue's waiting jobs are
counted and the excess taken back (refused) or shed, in the same transaction (one
more round trip, for bounded queues only).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import TransactionStatus

from conveyor.backends.postgres.dependants import enqueue_with_parents, has_dependants
from conveyor.backends.postgres.rows import job_from_row, jsonb, opt_float
from conveyor.model.errors import ConfigurationError, RefusedJob
from conveyor.model.job import Job, NewJob
from conveyor.model.lifecycle import initial_state
from conveyor.model.version import __version__
from conveyor.rules.backpressure import bounds_of, over_bound, raise_if_refused, shed_error
from conveyor.rules.fairness import spread, vtime_step

if TYPE_CHECKING:
    from conveyor.backends.postgres.state import PostgresState


def plan(jobs: Sequence[NewJob], now: float) -> tuple[list[NewJob], list[int]]:
    """The jobs to send, and for each input the position of the sent job that answers
    it: a later job of the batch with the id or unique_key of an earlier one gets the
    earlier one's answer, as if the batch were enqueued one by one."""
    unique: list[NewJob] = []
    answer: list[int] = []
    by_id: dict[str, int] = {}
    by_key: dict[str, int] = {}
    for job in jobs:
        pos = by_id.get(job.id)
        if pos is None and job.unique_key is not None:
            pos = by_key.get(job.unique_key)
        if pos is None:
            pos = len(unique)
            unique.append(job)
            by_id[job.id] = pos
            if job.unique_key is not None:
                by_key.setdefault(job.unique_key, pos)
        answer.append(pos)
    return unique, answer


def params(state: PostgresState, jobs: Sequence[NewJob], now: float) -> dict[str, Any]:
    run_ats = [now if j.run_at is None else float(j.run_at) for j in jobs]
    return {
        "schema": state.schema,
        "channel": state.config.channel,
        "now": now,
        "ids": [j.id for j in jobs],
        "queues": [j.queue for j in jobs],
        "tasks": [j.task for j in jobs],
        "payloads": [j.payload for j in jobs],
        "states": [initial_state(r, now).value for r in run_ats],
        "priorities": [j.priority for j in jobs],
        "max_attempts": [j.max_attempts for j in jobs],
        "run_ats": run_ats,
        "keys": [j.unique_key for j in jobs],
        "unique_fors": [opt_float(j.unique_for) for j in jobs],
        "timeouts": [opt_float(j.timeout) for j in jobs],
        "metas": [jsonb(j.meta) for j in jobs],
        "agings": [opt_float(j.aging) for j in jobs],
        "fair_vtimes": [0] * len(jobs),
        "ckeys": [j.concurrency_key for j in jobs],
        "climits": [j.concurrency_limit for j in jobs],
        "rate_keys": [j.rate_key for j in jobs],
    }


def fair_params(state: PostgresState, jobs: Sequence[NewJob]) -> dict[str, Any] | None:
    """What assign_fair_vtimes reserves for the batch's jobs with a fairness key (None:
    it has none, and pays nothing)."""
    keyed = [j for j in jobs if j.fairness_key is not None]
    if not keyed:
        return None
    return {
        "schema": state.schema,
        "fair_queues": [j.queue for j in keyed],
        "fair_keys": [j.fairness_key for j in keyed],
        "fair_steps": [vtime_step(j.fairness_weight) for j in keyed],
    }


def fast_path(
    state: PostgresState, jobs: Sequence[NewJob], now: float
) -> tuple[str, dict[str, Any]]:
    """The fast insert for jobs without unique keys: scalar parameters for one job
    (cheaper to bind and plan: enqueue one by one is the common call), arrays for more."""
    if len(jobs) > 1:
        return state.queries["insert_new_jobs"], params(state, jobs, now)
    job = jobs[0]
    run_at = now if job.run_at is None else float(job.run_at)
    return state.queries["insert_new_job"], {
        "channel": state.config.channel,
        "now": now,
        "id": job.id,
        "queue": job.queue,
        "task": job.task,
        "payload": job.payload,
        "state": initial_state(run_at, now).value,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "run_at": run_at,
        "unique_for": opt_float(job.unique_for),
        "timeout": opt_float(job.timeout),
        "meta": jsonb(job.meta),
        "aging": opt_float(job.aging),
        "concurrency_key": job.concurrency_key,
        "concurrency_limit": job.concurrency_limit,
        "rate_key": job.rate_key,
    }


def as_inserted(jobs: Sequence[NewJob], ids: set[str], now: float) -> dict[str, Job]:
    """The Job rows the fast path just wrote, built here rather than read back."""
    out = {}
    for new in jobs:
        if new.id not in ids:
            continue
        run_at = now if new.run_at is None else float(new.run_at)
        out[new.id] = Job(
            id=new.id,
            task=new.task,
            queue=new.queue,
            payload=new.payload,
            state=initial_state(run_at, now),
            priority=new.priority,
            max_attempts=new.max_attempts,
            run_at=run_at,
            created_at=now,
            unique_for=opt_float(new.unique_for),
            timeout=opt_float(new.timeout),
            meta=dict(new.meta),
            aging=opt_float(new.aging),
            concurrency_key=new.concurrency_key,
            concurrency_limit=new.concurrency_limit,
            rate_key=new.rate_key,
        )
    return out


def transaction_scope(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> Any:
    """The transaction to enqueue in. A non-autocommit connection with nothing open
    is left to begin one implicitly and keep it open: `conn.transaction()` would
    commit at the end of the block, behind the caller's back. Otherwise a
    transaction block: a real one in autocommit mode (the pool's state), a
    savepoint inside the caller's open transaction."""
    if not conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        return None
    return conn.transaction()


def _answers(
    jobs: Sequence[NewJob], rows: list[Any], late: dict[str, Job], refused: dict[int, RefusedJob]
) -> list[Job | None]:
    by_pos = {row[0] - 1: job_from_row(row, start=2) for row in rows}
    return [None if i in refused else by_pos.get(i) or late[job.id] for i, job in enumerate(jobs)]


def _bound_params(p: dict[str, Any], unique: Sequence[NewJob]) -> dict[str, Any] | None:
    bounds = bounds_of(unique)
    if not bounds:
        return None
    p["bound_queues"] = sorted(bounds)
    return p


def _over_bound(
    unique: Sequence[NewJob], rows: list[Any], depths: list[Any]
) -> tuple[dict[int, RefusedJob], dict[str, int]]:
    """What the bounded queues refuse (by position in `unique`) and shed."""
    new_positions: dict[str, list[int]] = {}
    for row in sorted(rows):
        if row[1]:  # fresh: inserted by this call
            new_positions.setdefault(unique[row[0] - 1].queue, []).append(row[0] - 1)
    refused, shed, _ = over_bound(new_positions, dict(depths), bounds_of(unique))
    return refused, shed


def _fixes(
    state: PostgresState,
    unique: Sequence[NewJob],
    refused: dict[int, RefusedJob],
    shed: dict[str, int],
    now: float,
) -> list[tuple[str, dict[str, Any]]]:
    """The statements that take refused jobs back and shed the oldest waiting ones."""
    q, bounds = state.queries, bounds_of(unique)
    fixes: list[tuple[str, dict[str, Any]]] = (
        [(q["take_back_jobs"], {"ids": [unique[pos].id for pos in refused]})] if refused else []
    )
    # n is exact: the queue holds more than n waiting jobs, counted under its lock.
    for queue, n in shed.items():
        fixes += [
            (
                q["shed_oldest_waiting"],
                {
                    "queue": queue,
                    "n": n,
                    "now": now,
                    "error": shed_error(queue, bounds[queue].max_waiting, now),
                    "version": __version__,
                    "done_channel": state.config.done_channel,
                },
            ),
            (q["count_shed"], {"queue": queue, "n": n}),
        ]
    return fixes


def _by_input(
    answer: Sequence[int], stored: Sequence[Job | None], refused: dict[int, RefusedJob]
) -> tuple[list[Job | None], dict[int, RefusedJob]]:
    """Answers and refusals by input position (a job repeated in the batch shares one)."""
    return (
        [stored[pos] for pos in answer],
        {i: refused[pos] for i, pos in enumerate(answer) if pos in refused},
    )


def _missing(unique: Sequence[NewJob], rows: list[Any]) -> list[str]:
    # Lost an id race to a concurrent enqueue: its row is read back after commit.
    got = {row[0] - 1 for row in rows}
    return [job.id for i, job in enumerate(unique) if i not in got]


async def enqueue_async(
    state: PostgresState,
    conn: psycopg.AsyncConnection[Any],
    jobs: Sequence[NewJob],
    now: float,
) -> list[Job]:
    if not jobs:
        return []
    if has_dependants(jobs):

        async def plain(free: Sequence[NewJob]) -> list[Job]:
            return await enqueue_async(state, conn, free, now)

        return await enqueue_with_parents(state, conn, jobs, now, transaction_scope(conn), plain)
    unique, answer = plan(jobs, now)
    if not all(job.only_id_dedups for job in unique):
        stored, refused = _by_input(answer, *await _full_async(state, conn, unique, now))
        return raise_if_refused(jobs, stored, refused)
    cur = await psycopg.AsyncCursor(conn).execute(  # not conn's factory: see enqueue_sync
        *fast_path(state, unique, now), binary=True
    )
    inserted = as_inserted(unique, {row[0] for row in await cur.fetchall()}, now)
    taken = [job for job in unique if job.id not in inserted]
    if taken:
        inserted.update(
            (j.id, j) for j in (await _full_async(state, conn, taken, now))[0] if j is not None
        )
    return [inserted[unique[pos].id] for pos in answer]


def enqueue_sync(
    state: PostgresState,
    conn: psycopg.Connection[Any],
    jobs: Sequence[NewJob],
    now: float,
) -> list[Job]:
    """The same on a sync connection (a caller's own, for transactional enqueue)."""
    if not jobs:
        return []
    if has_dependants(jobs):
        raise ConfigurationError(
            "jobs with depends_on are enqueued on an async connection "
            "(psycopg.AsyncConnection) or without connection="
        )
    unique, answer = plan(jobs, now)
    if not all(job.only_id_dedups for job in unique):
        stored, refused = _by_input(answer, *_full_sync(state, conn, unique, now))
        return raise_if_refused(jobs, stored, refused)
    # A cursor of our own: the connection's cursor_factory may be a ClientCursor
    # (Django's default), which cannot return binary results.
    cur = psycopg.Cursor(conn).execute(*fast_path(state, unique, now), binary=True)
    inserted = as_inserted(unique, {row[0] for row in cur.fetchall()}, now)
    taken = [job for job in unique if job.id not in inserted]
    if taken:
        inserted.update((j.id, j) for j in _full_sync(state, conn, taken, now)[0] if j is not None)
    return [inserted[unique[pos].id] for pos in answer]


async def _full_async(
    state: PostgresState,
    conn: psycopg.AsyncConnection[Any],
    unique: Sequence[NewJob],
    now: float,
) -> tuple[list[Job | None], dict[int, RefusedJob]]:
    """The full dedup path for jobs unique by id and unique_key, and for bounded
    queues; one answer per job (None: refused), and the refusals by position."""
    q = state.queries
    p = params(state, unique, now)
    if (fair := fair_params(state, unique)) is not None:  # one round trip more
        cur = await conn.execute(q["assign_fair_vtimes"], fair)
        p["fair_vtimes"] = spread(unique, {(r[0], r[1]): r[2] for r in await cur.fetchall()})
    bounded = _bound_params(p, unique)
    refused: dict[int, RefusedJob] = {}
    scope = transaction_scope(conn)
    async with conn.pipeline():
        async with scope if scope is not None else nullcontext():
            if bounded:
                await conn.execute(q["lock_bounded_queues"], p)
            if any(k is not None for k in p["keys"]):
                await conn.execute(q["lock_enqueue_keys"], p)
            await conn.execute(q["delete_replaced_jobs"], p)
            cur = await conn.execute(q["insert_jobs"], p)
            await conn.execute(q["notify_queues"], p)
            if bounded:
                depths = await (await conn.execute(q["count_waiting"], p)).fetchall()
                rows = await cur.fetchall()
                refused, shed = _over_bound(unique, rows, depths)
                for statement, fix in _fixes(state, unique, refused, shed, now):
                    await conn.execute(statement, fix)
        rows = await cur.fetchall() if not bounded else rows
    late: dict[str, Job] = {}
    if missing := _missing(unique, rows):
        cur = await conn.execute(q["get_jobs"], {"ids": missing})
        late = {job.id: job for job in map(job_from_row, await cur.fetchall())}
    return _answers(unique, rows, late, refused), refused


def _full_sync(
    state: PostgresState,
    conn: psycopg.Connection[Any],
    unique: Sequence[NewJob],
    now: float,
) -> tuple[list[Job | None], dict[int, RefusedJob]]:
    q = state.queries
    p = params(state, unique, now)
    if (fair := fair_params(state, unique)) is not None:
        p["fair_vtimes"] = spread(
            unique,
            {(r[0], r[1]): r[2] for r in conn.execute(q["assign_fair_vtimes"], fair).fetchall()},
        )
    bounded = _bound_params(p, unique)
    refused: dict[int, RefusedJob] = {}
    scope = transaction_scope(conn)
    with conn.pipeline():
        with scope if scope is not None else nullcontext():
            if bounded:
                conn.execute(q["lock_bounded_queues"], p)
            if any(k is not None for k in p["keys"]):
                conn.execute(q["lock_enqueue_keys"], p)
            conn.execute(q["delete_replaced_jobs"], p)
            cur = conn.execute(q["insert_jobs"], p)
            conn.execute(q["notify_queues"], p)
            if bounded:
                depths = conn.execute(q["count_waiting"], p).fetchall()
                rows = cur.fetchall()
                refused, shed = _over_bound(unique, rows, depths)
                for statement, fix in _fixes(state, unique, refused, shed, now):
                    conn.execute(statement, fix)
        rows = cur.fetchall() if not bounded else rows
    late: dict[str, Job] = {}
    if missing := _missing(unique, rows):
        cur = conn.execute(q["get_jobs"], {"ids": missing})
        late = {job.id: job for job in map(job_from_row, cur.fetchall())}
    return _answers(unique, rows, late, refused), refused

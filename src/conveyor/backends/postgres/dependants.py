"""Enqueue of a batch with dependants (workflows, conveyor.dependencies) on PostgreSQL.

One transaction (a savepoint inside the caller's): the parents named by the batch
are locked in id order first, so a parent that ends meanwhile either ended before
(its state says so here) or waits for this commit and then finds the new dependant
in its `dependants` (the settle statement releases it). Jobs without parents go
through the ordinary enqueue, in the same transaction; each dependant is one insert
and one update of its parents' lists. Dependants are deduplicated by id only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import psycopg

from ...dependencies import check_parents, dependency_error, start_of
from ...job import Job, JobState, NewJob
from ...lifecycle import initial_state
from .rows import job_from_row, jsonb, opt_float

if TYPE_CHECKING:
    from .connections import PostgresConnections


def has_dependants(jobs: Sequence[NewJob]) -> bool:
    return any(new.depends_on for new in jobs)


async def enqueue_with_parents(backend: PostgresConnections, conn: psycopg.AsyncConnection[Any],
                               jobs: Sequence[NewJob], now: float, scope: Any,
                               plain: Callable[[NewJob], Awaitable[Job]]) -> list[Job]:
    """`scope`: the transaction to work in (None: the one the connection began);
    `plain`: the ordinary enqueue of one job, on `conn`."""
    q = backend.q
    out: list[Job] = []
    async with scope if scope is not None else nullcontext():
        named = sorted({p for new in jobs for p in new.depends_on})
        cur = await conn.execute(q["lock_parents"], {"ids": named})
        states = {row[0]: JobState(row[1]) for row in await cur.fetchall()}
        check_parents(jobs, states.__contains__)
        for new in jobs:
            if new.depends_on:
                job = await _insert_dependant(backend, conn, new, states, now)
            else:
                job = await plain(new)
            states[new.id] = job.state
            out.append(job)
    return out


async def _insert_dependant(backend: PostgresConnections, conn: psycopg.AsyncConnection[Any],
                            new: NewJob, states: dict[str, JobState], now: float) -> Job:
    q = backend.q
    run_at = now if new.run_at is None else float(new.run_at)
    start = start_of(new.id, new.depends_on, states, new.allow_failure,
                     initial_state(run_at, now))
    error = None if start.failed_parent is None else dependency_error(*start.failed_parent, now)
    cur = await conn.execute(q["insert_dependant"], {
        "channel": backend.config.channel, "now": now, "id": new.id, "queue": new.queue,
        "task": new.task, "payload": new.payload, "state": start.state.value,
        "priority": new.priority, "max_attempts": new.max_attempts, "run_at": run_at,
        "unique_for": opt_float(new.unique_for), "timeout": opt_float(new.timeout),
        "meta": jsonb(new.meta), "aging": opt_float(new.aging),
        "concurrency_key": new.concurrency_key, "concurrency_limit": new.concurrency_limit,
        "pending_parents": len(start.pending), "allow_failure": new.allow_failure,
        "parents": list(new.depends_on),
        "error": error})
    row = await cur.fetchone()
    if row is None:  # the id is taken: the job holding it answers
        got = await (await conn.execute(q["get_job"], {"id": new.id})).fetchone()
        assert got is not None
        return job_from_row(got)
    if start.pending:
        await conn.execute(q["add_dependant"], {"ids": list(start.pending), "child": new.id})
    return job_from_row(row[:-1])

"""Enqueue of a batch with dependants (workflows, conveyor.rules.dependencies) on PostgreSQL.

One transaction (a savepoint inside the caller's): the parents named by the batch
are locked in id order first, so a parent that ends meanwhile either ended before
(its state says so here) or waits for this commit and then finds the new dependant
in its `dependants` (the settle statement releases it). Then the jobs without
parents go through the ordinary enqueue, as one batch in the same transaction, and
every dependant is inserted by one statement (insert_dependants), which also
appends them to their stored parents' lists: three round trips whatever the size of
the workflow. Dependants are deduplicated by id only: when one names a stored job
(or the batch names one twice) that statement is undone and the dependants are
inserted one at a time, each answered by the job holding its id.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

import psycopg

from conveyor.backends.postgres.rows import job_from_row, jsonb, opt_float
from conveyor.model.job import Job, JobState, NewJob
from conveyor.model.lifecycle import initial_state
from conveyor.rules.dependencies import check_parents, dependency_error, start_of

if TYPE_CHECKING:
    from conveyor.backends.postgres.state import PostgresState


def has_dependants(jobs: Sequence[NewJob]) -> bool:
    return any(new.depends_on for new in jobs)


class _IdTaken(Exception):
    """A dependant's id names a stored job: undo the batched insert."""


async def enqueue_with_parents(
    state: PostgresState,
    conn: psycopg.AsyncConnection[Any],
    jobs: Sequence[NewJob],
    now: float,
    scope: Any,
    plain: Callable[[Sequence[NewJob]], Awaitable[list[Job]]],
) -> list[Job]:
    """`scope`: the transaction to work in (None: the one the connection began);
    `plain`: the ordinary enqueue of a batch of jobs without parents, on `conn`."""
    q = state.queries
    async with scope if scope is not None else nullcontext():
        named = sorted({p for new in jobs for p in new.depends_on})
        cur = await conn.execute(q["lock_parents"], {"ids": named})
        states = {row[0]: JobState(row[1]) for row in await cur.fetchall()}
        check_parents(jobs, states.__contains__)
        # Parents come before their dependants in a batch, so the plain jobs can all go
        # first: no dependant is a parent of one of them.
        free = [new for new in jobs if not new.depends_on]
        stored = dict(zip((new.id for new in free), await plain(free) if free else [], strict=True))
        states.update((job_id, job.state) for job_id, job in stored.items())
        dependants = [new for new in jobs if new.depends_on]
        try:
            async with conn.transaction():  # a savepoint: _IdTaken undoes the statement
                stored.update(await _insert_dependants(state, conn, dependants, dict(states), now))
        except _IdTaken:
            for new in dependants:
                stored[new.id] = job = await _insert_dependant(state, conn, new, states, now)
                states[new.id] = job.state
    return [stored[new.id] for new in jobs]


async def _insert_dependants(
    state: PostgresState,
    conn: psycopg.AsyncConnection[Any],
    dependants: Sequence[NewJob],
    states: dict[str, JobState],
    now: float,
) -> dict[str, Job]:
    """Every dependant by one statement; _IdTaken if an id is taken."""
    starts, errors = [], []
    children: dict[str, list[str]] = {new.id: [] for new in dependants}
    links: list[tuple[str, str]] = []  # (stored parent, dependant): their lists grow
    for new in dependants:
        run_at = now if new.run_at is None else float(new.run_at)
        start = start_of(
            new.id, new.depends_on, states, new.allow_failure, initial_state(run_at, now)
        )
        states[new.id] = start.state
        starts.append((start, run_at))
        errors.append(
            None
            if start.failed_parent is None
            else jsonb(json.loads(dependency_error(*start.failed_parent, now)))
        )
        for parent in start.pending:
            if parent in children:
                children[parent].append(new.id)
            else:
                links.append((parent, new.id))
    cur = await conn.execute(
        state.queries["insert_dependants"],
        {
            "channel": state.config.channel,
            "now": now,
            "ids": [n.id for n in dependants],
            "queues": [n.queue for n in dependants],
            "tasks": [n.task for n in dependants],
            "payloads": [n.payload for n in dependants],
            "states": [start.state.value for start, _ in starts],
            "priorities": [n.priority for n in dependants],
            "max_attempts": [n.max_attempts for n in dependants],
            "run_ats": [run_at for _, run_at in starts],
            "unique_fors": [opt_float(n.unique_for) for n in dependants],
            "timeouts": [opt_float(n.timeout) for n in dependants],
            "metas": [jsonb(n.meta) for n in dependants],
            "agings": [opt_float(n.aging) for n in dependants],
            "ckeys": [n.concurrency_key for n in dependants],
            "climits": [n.concurrency_limit for n in dependants],
            "rate_keys": [n.rate_key for n in dependants],
            "pendings": [len(start.pending) for start, _ in starts],
            "allows": [n.allow_failure for n in dependants],
            "parents": [jsonb(list(n.depends_on)) for n in dependants],
            "children": [jsonb(children[n.id]) if children[n.id] else None for n in dependants],
            "errors": errors,
            "link_parents": [p for p, _ in links],
            "link_children": [c for _, c in links],
        },
    )
    rows = await cur.fetchall()
    if len(rows) < len(dependants):
        raise _IdTaken
    return {job.id: job for job in (job_from_row(row[:-2]) for row in rows)}


async def _insert_dependant(
    state: PostgresState,
    conn: psycopg.AsyncConnection[Any],
    new: NewJob,
    states: dict[str, JobState],
    now: float,
) -> Job:
    q = state.queries
    run_at = now if new.run_at is None else float(new.run_at)
    start = start_of(new.id, new.depends_on, states, new.allow_failure, initial_state(run_at, now))
    error = None if start.failed_parent is None else dependency_error(*start.failed_parent, now)
    cur = await conn.execute(
        q["insert_dependant"],
        {
            "channel": state.config.channel,
            "now": now,
            "id": new.id,
            "queue": new.queue,
            "task": new.task,
            "payload": new.payload,
            "state": start.state.value,
            "priority": new.priority,
            "max_attempts": new.max_attempts,
            "run_at": run_at,
            "unique_for": opt_float(new.unique_for),
            "timeout": opt_float(new.timeout),
            "meta": jsonb(new.meta),
            "aging": opt_float(new.aging),
            "concurrency_key": new.concurrency_key,
            "concurrency_limit": new.concurrency_limit,
            "rate_key": new.rate_key,
            "pending_parents": len(start.pending),
            "allow_failure": new.allow_failure,
            "parents": list(new.depends_on),
            "error": error,
        },
    )
    row = await cur.fetchone()
    if row is None:  # the id is taken: the job holding it answers
        got = await (await conn.execute(q["get_job"], {"id": new.id})).fetchone()
        assert got is not None
        return job_from_row(got)
    if start.pending:
        await conn.execute(q["add_dependant"], {"ids": list(start.pending), "child": new.id})
    return job_from_row(row[:-1])

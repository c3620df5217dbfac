"""SQLite enqueue: dedup by id and unique key, bounded queues, fairness, workflows.

Three paths, from the cheapest:
* one job that only its id can deduplicate (no unique key, queue bound, fairness
  key or parents: `NewJob.only_id_dedups`): one `INSERT ... ON CONFLICT DO NOTHING`
  in autocommit, a transaction of its own as the bare insert it costs about the same
  as; SQLite takes the write lock for the statement with the busy handler, as
  `BEGIN IMMEDIATE` does;
* a batch of such jobs with distinct ids: one `executemany` of that insert in one
  transaction (the full path's look-up per job was most of a bulk enqueue);
* the full path, one job at a time inside one write transaction: the look-ups that
  deduplicate, the queue bound (enqueue_capacity.py), the fairness vtimes, the parents.
A fast path that finds an id taken writes nothing (the batch's insert is rolled
back) and hands the jobs to the full path, which decides what the id holds. Dedup is
exact across processes: every path writes under SQLite's one write lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from conveyor.backends.codec import job_from_row
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.dependants import link, states_of
from conveyor.backends.sqlite.enqueue_capacity import EnqueueCapacity
from conveyor.backends.sqlite.rows import read_job
from conveyor.model.errors import RefusedJob
from conveyor.model.job import Job, JobState, NewJob
from conveyor.model.lifecycle import initial_state
from conveyor.rules.backpressure import bounds_of, raise_if_refused
from conveyor.rules.dependencies import check_parents, start_of
from conveyor.rules.fairness import VtimeAssigner, as_vtime


class _IdTaken(Exception):
    """A batch's id is taken: its insert is rolled back (`_insert_fresh`)."""


def enqueue_jobs(connection: SqliteConnection, jobs: Sequence[NewJob]) -> list[Job]:
    now = connection.clock()
    if len(jobs) == 1 and jobs[0].only_id_dedups:  # enqueue one by one, the common call
        state = initial_state(_run_at(jobs[0], now), now)
        row = _row(jobs[0], now, 0, state)
        if connection.conn.execute(Q["insert_job"], row).rowcount == 1:
            return [_inserted(jobs[0], row, state)]
    elif len(jobs) > 1 and all(new.only_id_dedups for new in jobs):
        fresh = _insert_fresh(connection, jobs, now)
        if fresh is not None:
            return fresh
    out: list[Job | None] = []
    refused: dict[int, RefusedJob] = {}
    with connection.write() as db:
        if any(new.depends_on for new in jobs):  # a workflow (conveyor.rules.dependencies)
            stored = states_of(db, [p for new in jobs for p in new.depends_on])
            check_parents(jobs, stored.__contains__)
        capacity = EnqueueCapacity(db, now, bounds_of(jobs))
        vtimes = fair_vtimes(db)
        for pos, new in enumerate(jobs):
            existing = _find_duplicate(db, new, now)
            if existing is not None:
                out.append(existing)
                continue
            if new.depends_on:  # blocked jobs take no capacity of a bounded queue
                out.append(_insert_dependant(db, new, now, vtimes.assign(new) or 0))
                continue
            refusal = capacity.admit(new.queue)
            if refusal is not None:
                refused[pos] = refusal
                out.append(None)
                continue
            out.append(_insert(db, new, now, vtimes.assign(new) or 0))
        capacity.shed()
        db.executemany(
            Q["set_fair_key_vtime"],
            [
                {"queue": queue, "key": key, "vtime": vtime}
                for (queue, key), vtime in vtimes.last.items()
            ],
        )
    return raise_if_refused(jobs, out, refused)


def _insert_fresh(
    connection: SqliteConnection, jobs: Sequence[NewJob], now: float
) -> list[Job] | None:
    """The batch in one transaction, or None with nothing written when one of its ids
    is taken or the batch names an id twice (a later job then gets the earlier one's
    answer, which only the full path gives)."""
    if len({new.id for new in jobs}) < len(jobs):
        return None
    states = [initial_state(_run_at(new, now), now) for new in jobs]
    rows = [_row(new, now, 0, state) for new, state in zip(jobs, states, strict=True)]
    try:
        with connection.write() as db:
            if db.executemany(Q["insert_job"], rows).rowcount < len(rows):
                raise _IdTaken  # write() rolls the batch back
    except _IdTaken:
        return None
    return [_inserted(new, row, state) for new, row, state in zip(jobs, rows, states, strict=True)]


def _insert_dependant(db: sqlite3.Connection, new: NewJob, now: float, fair_vtime: int) -> Job:
    run_at = now if new.run_at is None else new.run_at
    states = {i: JobState(v) for i, v in states_of(db, new.depends_on).items()}
    start = start_of(new.id, new.depends_on, states, new.allow_failure, initial_state(run_at, now))
    _insert(db, new, now, fair_vtime, start.state)
    link(db, new.id, start, new.allow_failure, now, new.depends_on)
    job = read_job(db, new.id)
    assert job is not None
    return job


def _insert(
    db: sqlite3.Connection, new: NewJob, now: float, fair_vtime: int, state: JobState | None = None
) -> Job:
    state = initial_state(_run_at(new, now), now) if state is None else state
    row = _row(new, now, fair_vtime, state)
    if db.execute(Q["insert_job"], row).rowcount == 0:
        # The id names a finished job whose dedup window is over: replace it.
        db.execute(Q["delete_finished_job"], {"id": new.id})
        db.execute(Q["insert_job"], row)
    return _inserted(new, row, state)


def _find_duplicate(db: sqlite3.Connection, new: NewJob, now: float) -> Job | None:
    hit = db.execute(Q["find_duplicate_by_id"], {"id": new.id, "now": now}).fetchone()
    if hit is None and new.unique_key is not None:
        hit = db.execute(
            Q["find_duplicate_by_unique_key"], {"unique_key": new.unique_key, "now": now}
        ).fetchone()
    return None if hit is None else job_from_row(hit)


def fair_vtimes(db: sqlite3.Connection) -> VtimeAssigner:
    """The vtimes of a batch, read from the fairness tables (written back by the caller)."""

    def read_last(queue: str, key: str) -> int:
        row = db.execute(Q["fair_key_vtime"], {"queue": queue, "key": key}).fetchone()
        return 0 if row is None else as_vtime(row[0])

    def read_queue(queue: str) -> int:
        row = db.execute(Q["fair_queue_vtime"], {"queue": queue}).fetchone()
        return 0 if row is None else as_vtime(row[0])

    return VtimeAssigner(read_last, read_queue)


def _run_at(new: NewJob, now: float) -> float:
    return now if new.run_at is None else new.run_at


def _row(new: NewJob, now: float, fair_vtime: int, state: JobState) -> tuple[Any, ...]:
    """The insert_job parameters of a new job, in its columns' order."""
    return (
        new.id,
        new.queue,
        new.task,
        new.payload,
        state.value,
        new.priority,
        new.max_attempts,
        _run_at(new, now),
        now,
        new.unique_key,
        new.unique_for,
        new.timeout,
        json.dumps(new.meta) if new.meta else "{}",
        new.aging,
        fair_vtime,
        new.concurrency_key,
        new.concurrency_limit,
        new.rate_key,
    )


def _inserted(new: NewJob, row: tuple[Any, ...], state: JobState) -> Job:
    """The job just stored from `row`, built here rather than read back."""
    return Job(
        id=new.id,
        task=new.task,
        queue=new.queue,
        payload=new.payload,
        state=state,
        priority=new.priority,
        max_attempts=new.max_attempts,
        run_at=row[7],
        created_at=row[8],
        unique_key=new.unique_key,
        unique_for=new.unique_for,
        timeout=new.timeout,
        meta=new.meta,
        aging=new.aging,
        concurrency_key=new.concurrency_key,
        concurrency_limit=new.concurrency_limit,
        rate_key=new.rate_key,
    )

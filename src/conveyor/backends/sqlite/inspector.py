"""The Inspector verbs on SQLite: what operators read and do (listing, counting, bulk
actions, stats), every bulk action in one write transaction.

`SqliteInspector`'s async verbs hop to the store thread (state.py) with the sync
function of the same name below, which takes the connection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conveyor.backends.codec import job_from_row
from conveyor.backends.filtering import ascii_lower, redrive_scope, waiting_scope
from conveyor.backends.folding import queue_stats_from_rows
from conveyor.backends.params import BulkAction, JobFilter, JobPage, QueueStats
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.dependants import SqliteDependants
from conveyor.backends.sqlite.rows import read_job
from conveyor.backends.sqlite.state import SqliteState
from conveyor.model.errors import JobNotFound
from conveyor.model.escaping import readable_text
from conveyor.model.job import TERMINAL_STATES, Job, JobState
from conveyor.rules.dependencies import release_dependants, resume_dependants


class SqliteInspector:
    """What operators read and do, on one backend's state."""

    def __init__(self, state: SqliteState) -> None:
        self.state = state

    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        return await self.state.run(lambda c: list_jobs(c, job_page))

    async def count_jobs(self, where: JobFilter) -> int:
        return await self.state.run(lambda c: count_jobs(c, where))

    async def cancel_job(self, job_id: str) -> Job | None:
        job = await self.state.run(lambda c: cancel_job(c, job_id))
        if self.state.wake_result_waiters is not None and job is not None and job.is_finished:
            self.state.wake_result_waiters.notify()
        return job

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        jobs = await self.state.run(lambda c: redrive_jobs(c, bulk_action))
        if jobs and not bulk_action.dry_run and self.state.wake_workers is not None:
            self.state.wake_workers.notify()
        return jobs

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        return await self.state.run(lambda c: delete_jobs(c, bulk_action))

    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        return await self.state.run(lambda c: cancel_jobs(c, bulk_action))

    async def task_names(self, where: JobFilter) -> list[str]:
        return await self.state.run(lambda c: task_names(c, where))

    async def dependants_of(self, job_id: str) -> list[str]:
        return await self.state.run(lambda c: SqliteDependants(c.conn, 0.0).dependants(job_id))

    async def parents_of(self, job_id: str) -> list[str]:
        return await self.state.run(lambda c: SqliteDependants(c.conn, 0.0).parents(job_id))

    async def queue_stats(self) -> list[QueueStats]:
        return await self.state.run(queue_stats)


# --- the verbs, sync, on the connection ---------------------------------------------
def list_jobs(connection: SqliteConnection, job_page: JobPage) -> list[Job]:
    before_seq = None
    if job_page.after is not None:
        row = connection.conn.execute(Q["seq_of_job"], {"id": job_page.after}).fetchone()
        if row is None:
            raise JobNotFound(
                f"job {job_page.after} (the page cursor) no longer exists; "
                "start again from the first page"
            )
        before_seq = row[0]
    params = {
        **_filter_params(job_page.where),
        "limit": job_page.limit,
        "offset": job_page.offset,
        "before_seq": before_seq,
    }
    return [job_from_row(r) for r in connection.conn.execute(Q["list_jobs_newest_first"], params)]


def count_jobs(connection: SqliteConnection, where: JobFilter) -> int:
    return int(
        connection.conn.execute(Q["count_filtered_jobs"], _filter_params(where)).fetchone()[0]
    )


def cancel_job(connection: SqliteConnection, job_id: str) -> Job | None:
    with connection.write() as db:
        now = connection.clock()
        params = {"id": job_id, "now": now}
        cancelled = db.execute(Q["cancel_not_started_job"], params).fetchone()
        if cancelled is None:
            db.execute(Q["request_cancel_running_job"], params)
        elif cancelled[0]:  # it has dependants: they follow it (docs/workflows.md)
            release_dependants(SqliteDependants(db, now), job_id, JobState.CANCELLED, now)
        return read_job(db, job_id)


def redrive_jobs(connection: SqliteConnection, bulk_action: BulkAction) -> list[Job]:
    scoped = redrive_scope(bulk_action.where)
    with connection.write() as db:
        params = {
            **_filter_params(scoped),
            "limit": bulk_action.limit,
            "offset": 0,
            "oldest_finished_first": True,
        }
        chosen = [job_from_row(r) for r in db.execute(Q["filter_jobs"], params)]
        if bulk_action.dry_run:
            return chosen
        now = connection.clock()
        for job in chosen:
            redriven = db.execute(Q["redrive_job"], {"id": job.id, "now": now}).fetchone()
            if redriven is not None and redriven[0]:  # a workflow member: resume it
                resume_dependants(SqliteDependants(db, now), job.id)
        return [j for j in (read_job(db, job.id) for job in chosen) if j is not None]


def delete_jobs(connection: SqliteConnection, bulk_action: BulkAction) -> list[str]:
    where = bulk_action.where
    finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
    if not finished:
        return []  # active jobs are never deleted
    scoped = replace(where, states=tuple(sorted(finished)))
    with connection.write() as db:
        params = {
            **_filter_params(scoped),
            "limit": bulk_action.limit,
            "offset": 0,
            "oldest_finished_first": True,
        }
        ids = [job.id for job in map(job_from_row, db.execute(Q["filter_jobs"], params))]
        if not bulk_action.dry_run:
            for job_id in ids:
                db.execute(Q["delete_job"], {"id": job_id})
        return ids


def cancel_jobs(connection: SqliteConnection, bulk_action: BulkAction) -> list[str]:
    scoped = waiting_scope(bulk_action.where)
    if scoped is None:
        return []
    with connection.write() as db:
        params = {
            **_filter_params(scoped),
            "limit": bulk_action.limit,
            "offset": 0,
            "oldest_finished_first": False,
        }
        ids = [job.id for job in map(job_from_row, db.execute(Q["filter_jobs"], params))]
        if bulk_action.dry_run:
            return ids
        now = connection.clock()
        cancelled = []
        for job_id in ids:
            row = db.execute(Q["cancel_waiting_job"], {"id": job_id, "now": now}).fetchone()
            if row is not None:
                cancelled.append(job_id)
                if row[0]:  # a workflow member's dependants follow it
                    release_dependants(SqliteDependants(db, now), job_id, JobState.CANCELLED, now)
        return cancelled


def task_names(connection: SqliteConnection, where: JobFilter) -> list[str]:
    rows = connection.conn.execute(Q["task_names"], _filter_params(where))
    return [readable_text(r[0]) for r in rows]


def queue_stats(connection: SqliteConnection) -> list[QueueStats]:
    conn = connection.conn
    return queue_stats_from_rows(
        connection.clock(),
        conn.execute(Q["count_by_queue_and_state"]).fetchall(),
        conn.execute(Q["oldest_available_by_queue"]).fetchall(),
        conn.execute(Q["all_queue_flags"]).fetchall(),
        conn.execute(Q["throttled_by_queue"]).fetchall(),
        conn.execute(Q["parked_by_queue"]).fetchall(),
        conn.execute(Q["shed_by_queue"]).fetchall(),
    )


def _filter_params(where: JobFilter) -> dict[str, Any]:
    def as_json(values: Sequence[str]) -> str | None:
        return json.dumps([str(v) for v in values]) if values else None

    return {
        "states": as_json(where.states),
        "queues": as_json(where.queues),
        "tasks": as_json(where.tasks),
        "ids": as_json(where.ids),
        "error_type": None if where.error_type is None else ascii_lower(where.error_type),
        "args_contains": where.args_contains,
    }

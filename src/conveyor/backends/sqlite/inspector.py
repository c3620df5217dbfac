"""The operators' verbs (the Inspector role) on SQLite: listing, counting, bulk
actions, stats, pauses; every bulk action in one write transaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from conveyor.backends.codec import job_from_row
from conveyor.backends.filtering import ascii_lower, redrive_scope, waiting_scope
from conveyor.backends.folding import flow_loads_from_rows, queue_stats_from_rows
from conveyor.backends.params import FlowLoads, FlowQuery, JobFilter, QueueStats
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.dependants import SqliteDependants
from conveyor.model.errors import JobNotFound
from conveyor.model.escaping import readable_text
from conveyor.model.job import TERMINAL_STATES, Job, JobState
from conveyor.rules.dependencies import release_dependants, resume_dependants


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


class SqliteInspector(SqliteConnection):
    """Mixed into SqliteStore."""

    def list_jobs(
        self,
        where: JobFilter,
        limit: int = 50,
        offset: int = 0,
        oldest_finished_first: bool = False,
        after: str | None = None,
    ) -> list[Job]:
        before_seq = None
        if after is not None:
            row = self.conn.execute(Q["seq_of_job"], {"id": after}).fetchone()
            if row is None:
                raise JobNotFound(
                    f"job {after} (the page cursor) no longer exists; "
                    "start again from the first page"
                )
            before_seq = row[0]
        params = {
            **_filter_params(where),
            "limit": limit,
            "offset": offset,
            "oldest_finished_first": oldest_finished_first,
            "before_seq": before_seq,
        }
        query = Q["filter_jobs"] if oldest_finished_first else Q["list_jobs_newest_first"]
        return [job_from_row(r) for r in self.conn.execute(query, params)]

    def count_jobs(self, where: JobFilter) -> int:
        return int(self.conn.execute(Q["count_filtered_jobs"], _filter_params(where)).fetchone()[0])

    def count_running_of_key(self, concurrency_key: str) -> int:
        return int(self.conn.execute(Q["running_of_key"], {"key": concurrency_key}).fetchone()[0])

    def set_key_limit(self, concurrency_key: str, limit: int | None) -> None:
        with self.write() as db:
            if limit is None:
                db.execute(Q["drop_key_limit"], {"key": concurrency_key})
            else:
                db.execute(Q["set_key_limit"], {"key": concurrency_key, "limit": limit})

    def key_limit(self, concurrency_key: str) -> int | None:
        row = self.conn.execute(Q["key_limit"], {"key": concurrency_key}).fetchone()
        return None if row is None else int(row[0])

    def cancel_job(self, job_id: str) -> Job | None:
        with self.write() as db:
            now = self.clock()
            params = {"id": job_id, "now": now}
            cancelled = db.execute(Q["cancel_not_started_job"], params).fetchone()
            if cancelled is None:
                db.execute(Q["request_cancel_running_job"], params)
            elif cancelled[0]:  # it has dependants: they follow it (docs/workflows.md)
                release_dependants(SqliteDependants(db, now), job_id, JobState.CANCELLED, now)
            return self._get(db, job_id)

    def redrive_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[Job]:
        scoped = redrive_scope(where)
        with self.write() as db:
            params = {
                **_filter_params(scoped),
                "limit": limit,
                "offset": 0,
                "oldest_finished_first": True,
            }
            chosen = [job_from_row(r) for r in db.execute(Q["filter_jobs"], params)]
            if dry_run:
                return chosen
            now = self.clock()
            for job in chosen:
                redriven = db.execute(Q["redrive_job"], {"id": job.id, "now": now}).fetchone()
                if redriven is not None and redriven[0]:  # a workflow member: resume it
                    resume_dependants(SqliteDependants(db, now), job.id)
            return [j for j in (self._get(db, job.id) for job in chosen) if j is not None]

    def delete_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted
        scoped = replace(where, states=tuple(sorted(finished)))
        with self.write() as db:
            params = {
                **_filter_params(scoped),
                "limit": limit,
                "offset": 0,
                "oldest_finished_first": True,
            }
            ids = [job.id for job in map(job_from_row, db.execute(Q["filter_jobs"], params))]
            if not dry_run:
                for job_id in ids:
                    db.execute(Q["delete_job"], {"id": job_id})
            return ids

    def cancel_jobs(self, where: JobFilter, limit: int, dry_run: bool) -> list[str]:
        scoped = waiting_scope(where)
        if scoped is None:
            return []
        with self.write() as db:
            params = {
                **_filter_params(scoped),
                "limit": limit,
                "offset": 0,
                "oldest_finished_first": False,
            }
            ids = [job.id for job in map(job_from_row, db.execute(Q["filter_jobs"], params))]
            if dry_run:
                return ids
            now = self.clock()
            cancelled = []
            for job_id in ids:
                row = db.execute(Q["cancel_waiting_job"], {"id": job_id, "now": now}).fetchone()
                if row is not None:
                    cancelled.append(job_id)
                    if row[0]:  # a workflow member's dependants follow it
                        release_dependants(
                            SqliteDependants(db, now), job_id, JobState.CANCELLED, now
                        )
            return cancelled

    def task_names(self, where: JobFilter) -> list[str]:
        rows = self.conn.execute(Q["task_names"], _filter_params(where))
        return [readable_text(r[0]) for r in rows]

    def queue_stats(self) -> list[QueueStats]:
        return queue_stats_from_rows(
            self.clock(),
            self.conn.execute(Q["count_by_queue_and_state"]).fetchall(),
            self.conn.execute(Q["oldest_available_by_queue"]).fetchall(),
            self.conn.execute(Q["all_queue_flags"]).fetchall(),
            self.conn.execute(Q["throttled_by_queue"]).fetchall(),
            self.conn.execute(Q["parked_by_queue"]).fetchall(),
            self.conn.execute(Q["shed_by_queue"]).fetchall(),
        )

    def flow_loads(self, query: FlowQuery) -> FlowLoads:
        params = {"queue": query.queue}
        return flow_loads_from_rows(
            query.top,
            self.conn.execute(Q["key_loads"], params),
            self.conn.execute(Q["throttled_by_bucket"], params),
        )

    def queue_paused(self, queue: str) -> bool:
        row = self.conn.execute(Q["queue_paused"], {"queue": queue}).fetchone()
        return row is not None and bool(row[0])

    def pause_queue(self, queue: str, paused: bool) -> None:
        with self.write() as db:
            db.execute(Q["set_queue_paused"], {"queue": queue, "paused": int(paused)})

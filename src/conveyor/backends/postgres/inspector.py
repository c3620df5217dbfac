"""The operators' verbs (the Inspector role) on PostgreSQL: listing, counting,
bulk actions, stats. All SQL in queries.sql."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from conveyor.backends.filtering import redrive_scope, waiting_scope
from conveyor.backends.folding import queue_stats_from_rows
from conveyor.backends.params import BulkAction, JobFilter, JobPage, QueueStats
from conveyor.backends.postgres.rows import filter_params, job_from_row
from conveyor.backends.postgres.state import AsyncConn, PostgresState
from conveyor.model.errors import JobNotFound
from conveyor.model.job import TERMINAL_STATES, Job
from conveyor.model.version import __version__


class PostgresInspector:
    """Inspector. `get_job` is the lifecycle's: what cancel_job answers with."""

    def __init__(
        self, state: PostgresState, get_job: Callable[[str], Awaitable[Job | None]]
    ) -> None:
        self._state = state
        self._queries = state.queries
        self._clock = state.clock
        self._get_job = get_job

    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        where, limit, offset, after = (
            job_page.where,
            job_page.limit,
            job_page.offset,
            job_page.after,
        )
        return await self._list_jobs(where, limit, offset, after)

    async def _list_jobs(
        self,
        where: JobFilter,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
        oldest_finished_first: bool = False,
    ) -> list[Job]:
        params = {
            **filter_params(where),
            "limit": limit,
            "offset": offset,
            "oldest_finished_first": oldest_finished_first,
        }
        if oldest_finished_first:
            return [job_from_row(r) for r in await self._state.fetch("filter_jobs", params)]
        before_seq = None
        if after is not None:
            rows = await self._state.fetch("seq_of_job", {"id": after})
            if not rows:
                raise JobNotFound(
                    f"job {after} (the page cursor) no longer exists; "
                    "start again from the first page"
                )
            before_seq = rows[0][0]
            if before_seq <= -(2**63):  # nothing sorts before it (and - 1 would overflow)
                return []
        params["before_seq"] = before_seq
        return [job_from_row(r) for r in await self._state.fetch("list_jobs_newest_first", params)]

    async def count_jobs(self, where: JobFilter) -> int:
        return int((await self._state.fetch("count_filtered_jobs", filter_params(where)))[0][0])

    async def cancel_job(self, job_id: str) -> Job | None:
        params = {
            "id": job_id,
            "now": self._clock(),
            "version": __version__,
            "done_channel": self._state.config.done_channel,
        }

        async def op(conn: AsyncConn) -> None:
            async with conn.transaction():
                cur = await conn.execute(self._queries["cancel_waiting_job"], params)
                if await cur.fetchone() is None:
                    await conn.execute(self._queries["request_cancel_running_job"], params)

        await self._state.run(op)
        return await self._get_job(job_id)

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        scoped = redrive_scope(where)
        chosen = await self._list_jobs(scoped, limit, 0, oldest_finished_first=True)
        if dry_run or not chosen:
            return chosen
        ids = [job.id for job in chosen]

        async def op(conn: AsyncConn) -> list[tuple[Any, ...]]:
            async with conn.transaction():
                await conn.execute(
                    self._queries["redrive_jobs"], {"ids": ids, "now": self._clock()}
                )
                await self._state.notify(conn)
                return await (
                    await conn.execute(self._queries["get_jobs"], {"ids": ids})
                ).fetchall()

        by_id = {job.id: job for job in map(job_from_row, await self._state.run(op))}
        return [by_id[i] for i in ids if i in by_id]

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted, nor counted against the limit
        scoped = replace(where, states=tuple(sorted(finished)))
        ids = [j.id for j in await self._list_jobs(scoped, limit, 0, oldest_finished_first=True)]
        if dry_run or not ids:
            return ids
        deleted = {row[0] for row in await self._state.fetch("delete_jobs", {"ids": ids})}
        return [i for i in ids if i in deleted]

    async def cancel_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        scoped = waiting_scope(where)
        if scoped is None:
            return []
        ids = [j.id for j in await self.list_jobs(JobPage(where=scoped, limit=limit, offset=0))]
        if dry_run or not ids:
            return ids
        cancelled = {
            row[0]
            for row in await self._state.fetch(
                "cancel_waiting_jobs",
                {
                    "ids": ids,
                    "now": self._clock(),
                    "version": __version__,
                    "done_channel": self._state.config.done_channel,
                },
            )
        }
        return [i for i in ids if i in cancelled]

    async def dependants_of(self, job_id: str) -> list[str]:
        rows = await self._state.fetch("dependants_of", {"id": job_id})
        return [str(i) for i in rows[0][0]] if rows and rows[0][0] else []

    async def parents_of(self, job_id: str) -> list[str]:
        rows = await self._state.fetch("parents_of", {"id": job_id})
        return [str(i) for i in rows[0][0]] if rows and rows[0][0] else []

    async def task_names(self, where: JobFilter) -> list[str]:
        return [str(row[0]) for row in await self._state.fetch("task_names", filter_params(where))]

    async def queue_stats(self) -> list[QueueStats]:
        return queue_stats_from_rows(
            self._clock(),
            await self._state.fetch("count_by_queue_and_state", {}),
            await self._state.fetch("oldest_available_by_queue", {}),
            await self._state.fetch("all_queue_flags", {}),
            await self._state.fetch("throttled_by_queue", {}),
            await self._state.fetch("parked_by_queue", {}),
            await self._state.fetch("shed_by_queue", {}),
        )

"""The operators' verbs (the Inspector role) on PostgreSQL: listing, counting,
bulk actions, stats, pauses. All SQL in queries.sql."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from conveyor.backends.filtering import redrive_scope, waiting_scope
from conveyor.backends.folding import flow_loads_from_rows, queue_stats_from_rows
from conveyor.backends.params import (
    BulkAction,
    FlowLoads,
    FlowQuery,
    JobFilter,
    JobPage,
    KeyLimit,
    QueuePause,
    QueueStats,
)
from conveyor.backends.postgres.connections import AsyncConn, PostgresConnections
from conveyor.backends.postgres.rows import filter_params, job_from_row
from conveyor.model.errors import JobNotFound
from conveyor.model.job import TERMINAL_STATES, Job
from conveyor.model.version import __version__


class PostgresInspector(PostgresConnections):
    """Mixed into PostgresBackend."""

    async def get_job(self, job_id: str) -> Job | None:
        rows = await self._fetch("get_job", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

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
            return [job_from_row(r) for r in await self._fetch("filter_jobs", params)]
        before_seq = None
        if after is not None:
            rows = await self._fetch("seq_of_job", {"id": after})
            if not rows:
                raise JobNotFound(
                    f"job {after} (the page cursor) no longer exists; "
                    "start again from the first page"
                )
            before_seq = rows[0][0]
            if before_seq <= -(2**63):  # nothing sorts before it (and - 1 would overflow)
                return []
        params["before_seq"] = before_seq
        return [job_from_row(r) for r in await self._fetch("list_jobs_newest_first", params)]

    async def count_jobs(self, where: JobFilter) -> int:
        return int((await self._fetch("count_filtered_jobs", filter_params(where)))[0][0])

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return int((await self._fetch("running_of_key", {"key": concurrency_key}))[0][0])

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        concurrency_key, limit = key_limit.concurrency_key, key_limit.limit
        params = {"key": concurrency_key, "limit": limit}

        async def op(conn: AsyncConn) -> None:
            async with conn.transaction():
                await conn.execute(
                    self.q["drop_key_limit" if limit is None else "set_key_limit"], params
                )
                await self._notify(conn)  # a raised limit may have unparked jobs

        await self._run(op)

    async def key_limit(self, concurrency_key: str) -> int | None:
        rows = await self._fetch("key_limit", {"key": concurrency_key})
        return int(rows[0][0]) if rows else None

    async def cancel_job(self, job_id: str) -> Job | None:
        params = {
            "id": job_id,
            "now": self.clock(),
            "version": __version__,
            "done_channel": self.config.done_channel,
        }

        async def op(conn: AsyncConn) -> None:
            async with conn.transaction():
                cur = await conn.execute(self.q["cancel_waiting_job"], params)
                if await cur.fetchone() is None:
                    await conn.execute(self.q["request_cancel_running_job"], params)

        await self._run(op)
        return await self.get_job(job_id)

    async def redrive_jobs(self, bulk_action: BulkAction) -> list[Job]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        scoped = redrive_scope(where)
        chosen = await self._list_jobs(scoped, limit, 0, oldest_finished_first=True)
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

    async def delete_jobs(self, bulk_action: BulkAction) -> list[str]:
        where, limit, dry_run = bulk_action.where, bulk_action.limit, bulk_action.dry_run
        finished = [s for s in where.states or TERMINAL_STATES if s in TERMINAL_STATES]
        if not finished:
            return []  # active jobs are never deleted, nor counted against the limit
        scoped = replace(where, states=tuple(sorted(finished)))
        ids = [j.id for j in await self._list_jobs(scoped, limit, 0, oldest_finished_first=True)]
        if dry_run or not ids:
            return ids
        deleted = {row[0] for row in await self._fetch("delete_jobs", {"ids": ids})}
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
            for row in await self._fetch(
                "cancel_waiting_jobs",
                {
                    "ids": ids,
                    "now": self.clock(),
                    "version": __version__,
                    "done_channel": self.config.done_channel,
                },
            )
        }
        return [i for i in ids if i in cancelled]

    async def dependants_of(self, job_id: str) -> list[str]:
        rows = await self._fetch("dependants_of", {"id": job_id})
        return [str(i) for i in rows[0][0]] if rows and rows[0][0] else []

    async def parents_of(self, job_id: str) -> list[str]:
        rows = await self._fetch("parents_of", {"id": job_id})
        return [str(i) for i in rows[0][0]] if rows and rows[0][0] else []

    async def task_names(self, where: JobFilter) -> list[str]:
        return [str(row[0]) for row in await self._fetch("task_names", filter_params(where))]

    async def queue_stats(self) -> list[QueueStats]:
        return queue_stats_from_rows(
            self.clock(),
            await self._fetch("count_by_queue_and_state", {}),
            await self._fetch("oldest_available_by_queue", {}),
            await self._fetch("all_queue_flags", {}),
            await self._fetch("throttled_by_queue", {}),
            await self._fetch("parked_by_queue", {}),
            await self._fetch("shed_by_queue", {}),
        )

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        params = {"queue": query.queue}
        return flow_loads_from_rows(
            query.top,
            await self._fetch("key_loads", params),
            await self._fetch("throttled_by_bucket", params),
        )

    async def queue_paused(self, queue: str) -> bool:
        rows = await self._fetch("queue_paused", {"queue": queue})
        return bool(rows and rows[0][0])

    async def pause_queue(self, queue_pause: QueuePause) -> None:
        queue, paused = queue_pause.queue, queue_pause.paused

        async def op(conn: AsyncConn) -> None:
            await conn.execute(self.q["set_queue_paused"], {"queue": queue, "paused": paused})
            if not paused:
                await self._notify(conn, [queue])

        await self._run(op)

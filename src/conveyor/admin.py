"""The one inspection and admin API, used by the CLI, the dashboard and users.

`app.admin` is async; `app.jobs` is the same API for sync code.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .backends.base import JobFilter, QueueStats
from .job import Job, JobState
from .minute_stats import STATS_NAMESPACE, Minute, merge_records, minute_of
from .worker.worker import WORKERS_NAMESPACE

if TYPE_CHECKING:
    from .app import Conveyor


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker, as it last announced itself."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    concurrency: int
    in_flight: int
    started_at: float
    last_heartbeat: float
    version: str
    stopping: bool

    @classmethod
    def from_json(cls, key: str, text: str) -> WorkerInfo:
        data: dict[str, Any] = json.loads(text)
        return cls(
            id=str(data.get("id", key)), host=str(data.get("host", "")),
            pid=int(data.get("pid", 0)), queues=tuple(str(q) for q in data.get("queues", [])),
            concurrency=int(data.get("concurrency", 0)), in_flight=int(data.get("in_flight", 0)),
            started_at=float(data.get("started_at", 0.0)),
            last_heartbeat=float(data.get("last_heartbeat", 0.0)),
            version=str(data.get("version", "")), stopping=bool(data.get("stopping", False)),
        )



def make_filter(
    *,
    states: Sequence[JobState | str] = (),
    queues: Sequence[str] = (),
    tasks: Sequence[str] = (),
    error_type: str | None = None,
    ids: Sequence[str] = (),
    args_contains: str | None = None,
) -> JobFilter:
    return JobFilter(
        states=tuple(JobState(s) for s in states),
        queues=tuple(queues),
        tasks=tuple(tasks),
        error_type=error_type,
        ids=tuple(ids),
        args_contains=args_contains or None,
    )


class Admin:
    def __init__(self, app: Conveyor) -> None:
        self.app = app

    async def get(self, job_id: str) -> Job | None:
        return await (await self.app.backend()).get_job(job_id)

    async def list(  # noqa: A003 - mirrors list_jobs; the builtin is builtins.list here
        self, where: JobFilter = JobFilter(), limit: int = 50, offset: int = 0,
        after: str | None = None,
    ) -> builtins.list[Job]:
        """Newest enqueued first. Page with `after=<id of the last job shown>`:
        keyset pagination, as fast on page 10,000 as on page 1.

        >>> page = await app.admin.list(make_filter(states=["dead"]), limit=50)
        >>> more = await app.admin.list(make_filter(states=["dead"]), 50, after=page[-1].id)
        """
        backend = await self.app.backend()
        if after is None:
            return await backend.list_jobs(where, limit, offset)
        return await backend.list_jobs(where, limit, offset, after=after)

    async def count(self, where: JobFilter = JobFilter()) -> int:
        return await (await self.app.backend()).count_jobs(where)

    async def cancel(self, job_id: str) -> Job | None:
        """Cancel a waiting job; ask a running one to stop (its handler sees
        `ctx.cancel_requested`). Returns the job as it is now, None if unknown."""
        return await (await self.app.backend()).cancel_job(job_id)

    async def redrive(
        self, where: JobFilter = JobFilter(states=(JobState.DEAD,)), limit: int = 100,
        dry_run: bool = False,
    ) -> builtins.list[Job]:
        """Send up to `limit` dead jobs matching `where` back to work, oldest failure
        first, with fresh attempts. With dry_run, only show which would move."""
        return await (await self.app.backend()).redrive_jobs(where, limit, dry_run)

    async def delete(self, where: JobFilter, limit: int = 1000, dry_run: bool = False) -> builtins.list[str]:
        """Delete finished jobs matching `where` (active jobs are never deleted)."""
        return await (await self.app.backend()).delete_jobs(where, limit, dry_run)

    async def stats(self) -> builtins.list[QueueStats]:
        return await (await self.app.backend()).queue_stats()

    async def workers(self) -> builtins.list[WorkerInfo]:
        """Live workers (each announces itself with a short TTL), by host and pid."""
        records = await (await self.app.backend()).list_records(WORKERS_NAMESPACE)
        found = []
        for key, text in records.items():
            try:
                found.append(WorkerInfo.from_json(key, text))
            except (ValueError, TypeError):
                continue  # a record from an incompatible version: not shown
        return sorted(found, key=lambda w: (w.host, w.pid, w.id))

    async def throughput(self, minutes: int = 60) -> builtins.list[Minute]:
        """Jobs finished per minute, by queue, with wait and run latency, for the last
        `minutes` minutes (the current one included), oldest first; minutes without
        any finished job are present and empty."""
        now_minute = minute_of(self.app.clock())
        since = now_minute - 60 * (minutes - 1)
        records = await (await self.app.backend()).list_records(STATS_NAMESPACE)
        merged = merge_records(records.values(), since)
        return [merged.get(start, Minute(start)) for start in range(since, now_minute + 1, 60)]

    async def pause(self, queue: str) -> None:
        await (await self.app.backend()).pause_queue(queue, True)

    async def resume(self, queue: str) -> None:
        await (await self.app.backend()).pause_queue(queue, False)

    async def prune(self, completed_before: float, dead_before: float) -> int:
        return await (await self.app.backend()).prune_jobs(completed_before, dead_before)

    async def migrate(self) -> builtins.list[int]:
        """Apply pending schema migrations; return the versions applied now (empty
        when the schema was up to date). An app built with `auto_migrate=True`
        (the default) has already migrated on first use, so this returns []."""
        return await (await self.app.backend()).migrate()


class Jobs:
    """Sync face of `Admin`: `app.jobs.get(job_id).state`."""

    def __init__(self, app: Conveyor) -> None:
        self.app = app

    def get(self, job_id: str) -> Job | None:
        return self.app.portal.call(self.app.admin.get(job_id))

    def list(
        self, where: JobFilter = JobFilter(), limit: int = 50, offset: int = 0,
        after: str | None = None,
    ) -> builtins.list[Job]:
        return self.app.portal.call(self.app.admin.list(where, limit, offset, after))

    def count(self, where: JobFilter = JobFilter()) -> int:
        return self.app.portal.call(self.app.admin.count(where))

    def cancel(self, job_id: str) -> Job | None:
        return self.app.portal.call(self.app.admin.cancel(job_id))

    def redrive(
        self, where: JobFilter = JobFilter(states=(JobState.DEAD,)), limit: int = 100,
        dry_run: bool = False,
    ) -> builtins.list[Job]:
        return self.app.portal.call(self.app.admin.redrive(where, limit, dry_run))

    def delete(self, where: JobFilter, limit: int = 1000, dry_run: bool = False) -> builtins.list[str]:
        return self.app.portal.call(self.app.admin.delete(where, limit, dry_run))

    def stats(self) -> builtins.list[QueueStats]:
        return self.app.portal.call(self.app.admin.stats())

    def workers(self) -> builtins.list[WorkerInfo]:
        return self.app.portal.call(self.app.admin.workers())

    def throughput(self, minutes: int = 60) -> builtins.list[Minute]:
        return self.app.portal.call(self.app.admin.throughput(minutes))

    def pause(self, queue: str) -> None:
        self.app.portal.call(self.app.admin.pause(queue))

    def resume(self, queue: str) -> None:
        self.app.portal.call(self.app.admin.resume(queue))

    def migrate(self) -> builtins.list[int]:
        return self.app.portal.call(self.app.admin.migrate())

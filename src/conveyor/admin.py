"""The one inspection and admin API, used by the CLI, the dashboard and users.

`app.admin` is async; `app.jobs` is the same API for sync code.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .backends.base import JobFilter, QueueStats
from .job import Job, JobState

if TYPE_CHECKING:
    from .app import Conveyor


def make_filter(
    *,
    states: Sequence[JobState | str] = (),
    queues: Sequence[str] = (),
    tasks: Sequence[str] = (),
    error_type: str | None = None,
    ids: Sequence[str] = (),
) -> JobFilter:
    return JobFilter(
        states=tuple(JobState(s) for s in states),
        queues=tuple(queues),
        tasks=tuple(tasks),
        error_type=error_type,
        ids=tuple(ids),
    )


class Admin:
    def __init__(self, app: Conveyor) -> None:
        self.app = app

    async def get(self, job_id: str) -> Job | None:
        return await (await self.app.backend()).get_job(job_id)

    async def list(self, where: JobFilter = JobFilter(), limit: int = 50, offset: int = 0) -> builtins.list[Job]:
        return await (await self.app.backend()).list_jobs(where, limit, offset)

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

    def list(self, where: JobFilter = JobFilter(), limit: int = 50, offset: int = 0) -> builtins.list[Job]:
        return self.app.portal.call(self.app.admin.list(where, limit, offset))

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

    def pause(self, queue: str) -> None:
        self.app.portal.call(self.app.admin.pause(queue))

    def resume(self, queue: str) -> None:
        self.app.portal.call(self.app.admin.resume(queue))

    def migrate(self) -> builtins.list[int]:
        return self.app.portal.call(self.app.admin.migrate())

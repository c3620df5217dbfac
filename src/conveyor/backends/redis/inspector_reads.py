"""The Inspector's reads on Redis, for RedisBackend: each hands over to `JobQueries`
(queries.py) or reads one key, with Redis errors translated at the boundary."""

from __future__ import annotations

from typing import Any

from conveyor.backends.codec import job_from_fields
from conveyor.backends.params import JobFilter, JobPage, QueueStats
from conveyor.backends.redis.errors import translated
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.queries import JobQueries
from conveyor.model.clock import Clock
from conveyor.model.job import Job


class InspectorReads:
    client: Any
    keys: Keys
    clock: Clock

    @property
    def queries(self) -> JobQueries:
        raise NotImplementedError  # RedisBackend's

    @translated
    async def get_job(self, job_id: str) -> Job | None:
        fields = await self.client.hgetall(self.keys.job(job_id))
        return job_from_fields(fields, job_id) if fields else None

    @translated
    async def list_jobs(self, job_page: JobPage) -> list[Job]:
        where, limit, offset, after = (
            job_page.where,
            job_page.limit,
            job_page.offset,
            job_page.after,
        )
        return await self.queries.list_jobs(where, limit, offset, after)

    @translated
    async def count_jobs(self, where: JobFilter) -> int:
        return await self.queries.count_jobs(where)

    @translated
    async def task_names(self, where: JobFilter) -> list[str]:
        return await self.queries.task_names(where)

    @translated
    async def queue_stats(self) -> list[QueueStats]:
        return await self.queries.queue_stats(self.clock())

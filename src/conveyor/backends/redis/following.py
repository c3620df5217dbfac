"""Following jobs on Redis: a job's dependants and parents (the `dependants` and
`parents` fields written by enqueue_dependants.lua) and waiting for a job's end (job.result()).

A waiter counts itself in `{p}:watching` (a sorted set: id -> number of waiters),
then looks at the job; a settle or cancel script that ends a watched job pushes a
token onto `{p}:done:<id>` (signal_end in _lib.lua), which the waiter BLPOPs. The
waiter puts the token back for any other waiter of the same job."""

from __future__ import annotations

import json
from typing import Any

from conveyor.backends.params import FinishWait
from conveyor.backends.redis.errors import translated
from conveyor.backends.redis.keys import Keys

_ENDED = {b"completed", b"dead", b"cancelled", "completed", "dead", "cancelled"}


class Following:
    """`dependants_of`, `parents_of` (Inspector) and `wait_for_finish` (FinishWakeups)
    for RedisBackend."""

    client: Any
    keys: Keys

    @translated
    async def dependants_of(self, job_id: str) -> list[str]:
        return await self._ids_in(job_id, "dependants")

    @translated
    async def parents_of(self, job_id: str) -> list[str]:
        return await self._ids_in(job_id, "parents")

    async def _ids_in(self, job_id: str, field: str) -> list[str]:
        raw = await self.client.hget(self.keys.job(job_id), field)
        try:
            ids = json.loads(raw) if raw else []
        except ValueError:  # a damaged list shows as none
            return []
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []

    @translated
    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        job_id, timeout = finish_wait.job_id, finish_wait.timeout
        watching, done = f"{self.keys.base}watching", f"{self.keys.base}done:{job_id}"
        await self.client.zincrby(watching, 1, job_id)
        try:
            if await self.client.hget(self.keys.job(job_id), "state") in _ENDED | {None}:
                return
            if await self.client.blpop([done], timeout=max(timeout, 0.01)) is not None:
                await self.client.rpush(done, "1")  # for another waiter of the same job
                await self.client.pexpire(done, 60_000)
        finally:
            if await self.client.zincrby(watching, -1, job_id) <= 0:
                await self.client.zrem(watching, job_id)

"""Waiting for a job's end on Redis (FinishWakeups, for job.result()).

A waiter counts itself in `{p}:watching` (a sorted set: id -> number of waiters),
then looks at the job; a settle or cancel script that ends a watched job pushes a
token onto `{p}:done:<id>` (signal_end in _lib.lua), which the waiter BLPOPs. The
waiter puts the token back for any other waiter of the same job."""

from __future__ import annotations

from conveyor.backends.params import FinishWait
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.errors import translated

_ENDED = {b"completed", b"dead", b"cancelled", "completed", "dead", "cancelled"}


class RedisFinishWakeups:
    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys

    @translated
    async def wait_for_finish(self, finish_wait: FinishWait) -> None:
        job_id, timeout = finish_wait.job_id, finish_wait.timeout
        client = self.connection.client
        watching, done = f"{self.keys.base}watching", f"{self.keys.base}done:{job_id}"
        await client.zincrby(watching, 1, job_id)
        try:
            if await client.hget(self.keys.job(job_id), "state") in _ENDED | {None}:
                return
            if await client.blpop([done], timeout=max(timeout, 0.01)) is not None:
                await client.rpush(done, "1")  # for another waiter of the same job
                await client.pexpire(done, 60_000)
        finally:
            if await client.zincrby(watching, -1, job_id) <= 0:
                await client.zrem(watching, job_id)

"""Flow control's state on Redis (FlowState): queue pauses, rate limit buckets, the
limits set on concurrency keys, and what they hold back.

A concurrency key's set limit (conveyor.rules.adaptive) is a string beside the key's
slots, read by the rebalance in every script that moves a keyed job (_lib.lua), written
by scripts/set_key_limit.lua together with a rebalance. A bucket's tokens are a hash
claim.lua reads and writes.
"""

from __future__ import annotations

from conveyor.backends.folding import flow_loads_from_rows
from conveyor.backends.params import BucketHold, FlowLoads, FlowQuery, KeyLimit, QueuePause
from conveyor.backends.redis.codec import float_arg
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.errors import translated
from conveyor.backends.redis.rate_limit_lanes import lane_sizes_by_bucket
from conveyor.model.job import JobState

# Jobs key_loads.lua reads per call (one field a job), so that each call holds the
# server a few milliseconds (docs/performance.md).
_KEY_PAGE = 5000


class RedisFlowState:
    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection
        self.keys = connection.keys

    @translated
    async def pause_queue(self, queue_pause: QueuePause) -> None:
        queue, paused = queue_pause.queue, queue_pause.paused
        async with self.connection.client.pipeline(transaction=True) as pipe:
            pipe.hset(self.keys.paused, queue, "1" if paused else "0")
            if not paused:  # idle workers may have work waiting in it
                pipe.rpush(self.keys.wake(queue), "1")
                pipe.ltrim(self.keys.wake(queue), 0, 0)
            await pipe.execute()

    @translated
    async def queue_paused(self, queue: str) -> bool:
        return bool(await self.connection.client.hget(self.keys.paused, queue) == "1")

    @translated
    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        key, tokens, until = bucket_hold.key, bucket_hold.tokens, bucket_hold.until
        # One HSET: atomic against claim.lua, which reads and writes the same fields.
        await self.connection.client.hset(
            self.keys.bucket(key),
            mapping={"tokens": float_arg(tokens), "updated_at": float_arg(until)},
        )

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        concurrency_key, limit = key_limit.concurrency_key, key_limit.limit
        await self.connection.scripts.call(
            "set_key_limit",
            [self.keys.key_limit(concurrency_key)],
            [concurrency_key, "" if limit is None else str(limit)],
        )

    @translated
    async def key_limit(self, concurrency_key: str) -> int | None:
        value = await self.connection.client.get(self.keys.key_limit(concurrency_key))
        return None if value is None else int(value)

    @translated
    async def count_running_of_key(self, concurrency_key: str) -> int:
        """The running jobs among a concurrency key's slot holders (at most its limit)."""
        client = self.connection.client
        holders = await client.smembers(self.keys.key_holders(concurrency_key))
        async with client.pipeline(transaction=False) as pipe:
            for job_id in holders:
                pipe.hget(self.keys.job(job_id), "state")
            states = await pipe.execute()
        return sum(state == JobState.RUNNING.value for state in states)

    @translated
    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        """Each running and parked job's key, counted by key_loads.lua a page at a time
        (a bounded time on the server per call; pages are not one snapshot: a job that
        moves between two calls may be counted in both indexes or in neither), and each
        rate limit lane's size."""
        client = self.connection.client
        queues = (
            [query.queue]
            if query.queue is not None
            else sorted(await client.smembers(self.keys.queues))
        )
        rows: list[tuple[str, int, int]] = []
        for queue in queues:
            for index, held in (
                (self.keys.state(queue, JobState.RUNNING), 0),
                (self.keys.parked(queue), 1),
            ):
                for reply in await self.connection.scripts.call_in_pages(
                    "key_loads", index, _KEY_PAGE
                ):
                    rows += [
                        (key, int(n) * (1 - held), int(n) * held)
                        for key, n in zip(reply[1::2], reply[2::2], strict=True)
                    ]
        by_lane = await lane_sizes_by_bucket(client, self.keys, queues)
        return flow_loads_from_rows(
            query.top, rows, [(bucket, n) for (_, bucket), n in by_lane.items()]
        )

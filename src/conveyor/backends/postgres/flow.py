"""Flow control's state (the FlowState role) on PostgreSQL: queue pauses, rate limit
buckets, concurrency keys' limits, and what they hold back. All SQL in queries.sql."""

from __future__ import annotations

from conveyor.backends.folding import flow_loads_from_rows
from conveyor.backends.params import BucketHold, FlowLoads, FlowQuery, KeyLimit, QueuePause
from conveyor.backends.postgres.state import AsyncConn, PostgresState


class PostgresFlow:
    """FlowState."""

    def __init__(self, state: PostgresState) -> None:
        self._state = state
        self._queries = state.queries

    async def pause_queue(self, queue_pause: QueuePause) -> None:
        queue, paused = queue_pause.queue, queue_pause.paused

        async def op(conn: AsyncConn) -> None:
            await conn.execute(
                self._queries["set_queue_paused"], {"queue": queue, "paused": paused}
            )
            if not paused:
                await self._state.notify(conn, [queue])

        await self._state.run(op)

    async def queue_paused(self, queue: str) -> bool:
        rows = await self._state.fetch("queue_paused", {"queue": queue})
        return bool(rows and rows[0][0])

    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        key, tokens, until = bucket_hold.key, bucket_hold.tokens, bucket_hold.until
        params = {"name": key, "tokens": tokens, "until": until}

        async def op(conn: AsyncConn) -> None:
            await conn.execute(self._queries["hold_rate_bucket"], params)

        await self._state.run(op)

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        concurrency_key, limit = key_limit.concurrency_key, key_limit.limit
        params = {"key": concurrency_key, "limit": limit}

        async def op(conn: AsyncConn) -> None:
            async with conn.transaction():
                await conn.execute(
                    self._queries["drop_key_limit" if limit is None else "set_key_limit"], params
                )
                await self._state.notify(conn)  # a raised limit may have unparked jobs

        await self._state.run(op)

    async def key_limit(self, concurrency_key: str) -> int | None:
        rows = await self._state.fetch("key_limit", {"key": concurrency_key})
        return int(rows[0][0]) if rows else None

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return int((await self._state.fetch("running_of_key", {"key": concurrency_key}))[0][0])

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        params = {"queue": query.queue}
        return flow_loads_from_rows(
            query.top,
            await self._state.fetch("key_loads", params),
            await self._state.fetch("throttled_by_bucket", params),
        )

"""The FlowState verbs on SQLite: queue pauses, rate limit buckets, concurrency key
limits, and what they hold back (flow loads).

`SqliteFlow`'s async verbs hop to the store thread (state.py) with the sync function
of the same name below, which takes the connection. The claim reads this state inside
its own write transaction (lifecycle.py), so a write here is serialised with claims.
"""

from __future__ import annotations

from conveyor.backends.folding import flow_loads_from_rows
from conveyor.backends.params import BucketHold, FlowLoads, FlowQuery, KeyLimit, QueuePause
from conveyor.backends.sqlite.connection import Q, SqliteConnection
from conveyor.backends.sqlite.state import SqliteState


class SqliteFlow:
    """Flow control's state, on one backend's state."""

    def __init__(self, state: SqliteState) -> None:
        self.state = state

    async def pause_queue(self, queue_pause: QueuePause) -> None:
        await self.state.run(lambda c: pause_queue(c, queue_pause))

    async def queue_paused(self, queue: str) -> bool:
        return await self.state.run(lambda c: queue_paused(c, queue))

    async def hold_rate_bucket(self, bucket_hold: BucketHold) -> None:
        await self.state.run(lambda c: hold_rate_bucket(c, bucket_hold))

    async def set_key_limit(self, key_limit: KeyLimit) -> None:
        await self.state.run(lambda c: set_key_limit(c, key_limit))
        if self.state.wake_workers is not None:  # a raised limit may have unparked jobs
            self.state.wake_workers.notify()

    async def key_limit(self, concurrency_key: str) -> int | None:
        return await self.state.run(lambda c: key_limit(c, concurrency_key))

    async def count_running_of_key(self, concurrency_key: str) -> int:
        return await self.state.run(lambda c: count_running_of_key(c, concurrency_key))

    async def flow_loads(self, query: FlowQuery) -> FlowLoads:
        return await self.state.run(lambda c: flow_loads(c, query))


# --- the verbs, sync, on the connection ---------------------------------------------
def pause_queue(connection: SqliteConnection, queue_pause: QueuePause) -> None:
    with connection.write() as db:
        db.execute(
            Q["set_queue_paused"],
            {"queue": queue_pause.queue, "paused": int(queue_pause.paused)},
        )


def queue_paused(connection: SqliteConnection, queue: str) -> bool:
    row = connection.conn.execute(Q["queue_paused"], {"queue": queue}).fetchone()
    return row is not None and bool(row[0])


def hold_rate_bucket(connection: SqliteConnection, bucket_hold: BucketHold) -> None:
    """A write the claims serialise with."""
    with connection.write() as db:
        db.execute(
            Q["hold_rate_bucket"],
            {"name": bucket_hold.key, "tokens": bucket_hold.tokens, "until": bucket_hold.until},
        )


def set_key_limit(connection: SqliteConnection, key_limit: KeyLimit) -> None:
    with connection.write() as db:
        if key_limit.limit is None:
            db.execute(Q["drop_key_limit"], {"key": key_limit.concurrency_key})
        else:
            db.execute(
                Q["set_key_limit"], {"key": key_limit.concurrency_key, "limit": key_limit.limit}
            )


def key_limit(connection: SqliteConnection, concurrency_key: str) -> int | None:
    row = connection.conn.execute(Q["key_limit"], {"key": concurrency_key}).fetchone()
    return None if row is None else int(row[0])


def count_running_of_key(connection: SqliteConnection, concurrency_key: str) -> int:
    return int(connection.conn.execute(Q["running_of_key"], {"key": concurrency_key}).fetchone()[0])


def flow_loads(connection: SqliteConnection, query: FlowQuery) -> FlowLoads:
    params = {"queue": query.queue}
    return flow_loads_from_rows(
        query.top,
        connection.conn.execute(Q["key_loads"], params),
        connection.conn.execute(Q["throttled_by_bucket"], params),
    )

"""How near the floors of `enqueue_cost.py` any enqueue could come, with no Conveyor code.

    python benchmarks/enqueue_bounds.py --repeat 5
    python benchmarks/enqueue_bounds.py --backends postgres,redis --repeat 3

The issue's one-by-one target (90 % of the floor, from the sync API and from the async
one) is measured here against the least work the enqueue itself must do, written by
hand on the bare drivers, each against the same floor as `enqueue_cost.py`:
  * SQLite, async API: the floor is a bare INSERT committed on the caller's thread
    (into Conveyor's table, as `enqueue_cost.py`'s floor). An
    async API that never blocks its event loop on the disk (a commit waits for an
    fsync with synchronous=FULL) runs that INSERT on another thread and awaits it:
    here a thread of its own fed by a SimpleQueue, answering through
    `call_soon_threadsafe` (what Conveyor's store thread does), and `asyncio.to_thread`.
  * PostgreSQL: the floor is a bare INSERT on a held connection in autocommit. "our
    statement" is Conveyor's one-job INSERT with its parameters built as `enqueue`
    builds them (the message, then the statement's 17 parameters) on that connection;
    "async INSERT" is the floor's INSERT and "async ours" our statement, awaited one
    by one on a psycopg AsyncConnection.
  * Redis: the floor is one EVALSHA of a script that returns at once. The least an
    enqueue writes: a check that the id is free (dedup by id), the next insertion
    number, the job's hash, and its place in the claim order, the queue's waiting jobs
    and the listing: one script, one round trip. "async no-op" and "async least" send
    the floor's script and that one through redis.asyncio, awaited one by one.
Each figure is jobs/s, min/median/max over `--repeat` interleaved rounds, and the ratio
to the floor round by round. Every round's writes are counted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from enqueue_cost import (
    PAYLOAD,
    POSTGRES,
    REDIS,
    PostgresFloor,
    SqliteFloor,
    drop,
    timed,
)


def sqlite_rounds(jobs: int, repeat: int) -> dict[str, list[float]]:
    from conveyor import Conveyor

    tmp = tempfile.mkdtemp(prefix="conveyor-bounds-")
    app = Conveyor(f"sqlite:///{tmp}/b.db")  # Conveyor's table and indexes, as the floor's
    app.jobs.count()
    app.close()
    conn = sqlite3.connect(f"{tmp}/b.db", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")

    def insert() -> None:
        conn.execute(SqliteFloor.SQL, SqliteFloor.rows(1)[0])

    calls: queue.SimpleQueue[
        tuple[Callable[[], None], asyncio.AbstractEventLoop, asyncio.Future[None]] | None
    ] = queue.SimpleQueue()

    def serve() -> None:
        while (item := calls.get()) is not None:
            fn, loop, future = item
            fn()
            loop.call_soon_threadsafe(future.set_result, None)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    async def own_thread() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(jobs):
            future = loop.create_future()
            calls.put((insert, loop, future))
            await future

    async def to_thread() -> None:
        for _ in range(jobs):
            await asyncio.to_thread(insert)

    def floor() -> None:
        for _ in range(jobs):
            insert()

    rates: dict[str, list[float]] = {"floor": [], "own thread": [], "to_thread": []}
    try:
        for _ in range(repeat):
            rates["floor"].append(jobs / timed(floor))
            rates["own thread"].append(jobs / timed(lambda: asyncio.run(own_thread())))
            rates["to_thread"].append(jobs / timed(lambda: asyncio.run(to_thread())))
    finally:
        calls.put(None)
        thread.join()
        conn.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return rates


LEAST_ENQUEUE = """
local id = ARGV[1]
if redis.call('EXISTS', KEYS[2] .. id) == 1 then return 1 end
local seq = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2] .. id, 'id', id, 'queue', ARGV[2], 'task', ARGV[3],
  'payload', ARGV[4], 'state', 'available', 'priority', '0', 'max_attempts', '3',
  'run_at', ARGV[5], 'created_at', ARGV[5], 'seq', seq)
redis.call('ZADD', KEYS[3], 0, ARGV[5] .. ':' .. seq)
redis.call('ZADD', KEYS[4], seq, id)
redis.call('ZADD', KEYS[5], seq, id)
return 0
"""


def redis_rounds(jobs: int, repeat: int) -> dict[str, list[float]]:
    import redis

    client = redis.Redis.from_url(REDIS)
    tag = f"{{bounds-{uuid.uuid4().hex[:8]}}}:"
    keys = [f"{tag}seq", f"{tag}job:", f"{tag}available", f"{tag}waiting", f"{tag}jobs"]
    noop, least = client.script_load("return 1"), client.script_load(LEAST_ENQUEUE)

    def floor() -> None:
        for _ in range(jobs):
            client.evalsha(noop, 0)

    def least_args() -> list[Any]:
        """The least enqueue's keys and one new job."""
        return [5, *keys, uuid.uuid4().hex, "floor", "noop_async", PAYLOAD, repr(time.time())]

    def enqueue() -> None:
        for _ in range(jobs):
            client.evalsha(least, *least_args())

    async def awaited(script: str, args: Callable[[], list[Any]]) -> float:
        """The same EVALSHA from asyncio (redis.asyncio), awaited one by one: the rate."""
        import redis.asyncio

        aclient = redis.asyncio.Redis.from_url(REDIS)
        await aclient.ping()  # connected outside the timing, as the sync client is
        t0 = time.perf_counter()
        for _ in range(jobs):
            await aclient.evalsha(script, *args())
        elapsed = time.perf_counter() - t0
        await aclient.aclose()
        return jobs / elapsed

    rates: dict[str, list[float]] = {
        "floor": [],
        "least enqueue": [],
        "async no-op": [],
        "async least": [],
    }
    try:
        for _ in range(repeat):
            rates["floor"].append(jobs / timed(floor))
            rates["least enqueue"].append(jobs / timed(enqueue))
            rates["async no-op"].append(asyncio.run(awaited(noop, lambda: [0])))
            rates["async least"].append(asyncio.run(awaited(least, least_args)))
    finally:
        stored = client.zcard(keys[4])
        for key in client.scan_iter(f"{tag}*", count=1000):
            client.unlink(key)
        client.close()
    assert stored == 2 * jobs * repeat, (stored, 2 * jobs * repeat)  # sync and async
    return rates


def postgres_rounds(jobs: int, repeat: int) -> dict[str, list[float]]:
    import psycopg

    from conveyor import Conveyor
    from conveyor.backends.postgres.enqueue import fast_path

    schema = f"bounds_{uuid.uuid4().hex[:10]}"
    url = f"{POSTGRES}?schema={schema}"
    app = Conveyor(url)  # Conveyor's table and indexes
    task = app.task(name="noop_async", queue="bench")(noop)
    app.jobs.count()
    backend = app.portal.call(app.backend())
    floor = PostgresFloor(schema)

    def statement() -> tuple[str, dict[str, Any]]:
        """Conveyor's one-job INSERT and its parameters (what `enqueue` sends), no more."""
        return fast_path(backend._state, [task.message(0)], time.time())

    def ours() -> None:
        for _ in range(jobs):
            psycopg.Cursor(floor.conn).execute(*statement(), binary=True).fetchall()

    async def awaited(conveyors: bool) -> float:
        """The floor's INSERT, or Conveyor's statement, from asyncio one by one: the rate."""
        async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
            t0 = time.perf_counter()
            for _ in range(jobs):
                if conveyors:
                    await (
                        await psycopg.AsyncCursor(conn).execute(*statement(), binary=True)
                    ).fetchall()
                else:
                    now = time.time()
                    await conn.execute(floor.sql, (uuid.uuid4().hex, PAYLOAD, now, now))
            return jobs / (time.perf_counter() - t0)

    rates: dict[str, list[float]] = {
        "floor": [],
        "our statement": [],
        "async INSERT": [],
        "async ours": [],
    }
    try:
        for _ in range(repeat):
            rates["floor"].append(jobs / timed(lambda: floor.one(jobs)))
            rates["our statement"].append(jobs / timed(ours))
            rates["async INSERT"].append(asyncio.run(awaited(False)))
            rates["async ours"].append(asyncio.run(awaited(True)))
        with floor.conn.cursor() as cur:
            stored = cur.execute(f'SELECT count(*) FROM "{schema}".jobs').fetchone()
    finally:
        app.close()
        floor.close()
        drop("postgres", url)
    assert stored == (4 * jobs * repeat,), (stored, 4 * jobs * repeat)
    return rates


async def noop(i: int) -> None:
    return None


def report(backend: str, rates: dict[str, list[float]]) -> None:
    floor = rates["floor"]
    for name, values in rates.items():
        line = (
            f"{backend:8} {name:14} | {min(values):9,.0f} {statistics.median(values):9,.0f}"
            f" {max(values):9,.0f} |"
        )
        if name != "floor":
            ratio = [v / f for v, f in zip(values, floor, strict=True)]
            line += f" {min(ratio):5.2f} {statistics.median(ratio):5.2f} {max(ratio):5.2f}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    args = parser.parse_args()
    print(
        f"{args.jobs} writes per round, {args.repeat} rounds, {os.cpu_count()} cores, load "
        f"{' '.join(open('/proc/loadavg').read().split()[:3])}; jobs/s min/median/max, "
        "and the ratio to the floor per round"
    )
    rounds = {"sqlite": sqlite_rounds, "postgres": postgres_rounds, "redis": redis_rounds}
    for backend in args.backends.split(","):
        report(backend, rounds[backend](args.jobs, args.repeat))


if __name__ == "__main__":
    main()

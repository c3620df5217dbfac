"""How near the floors of `enqueue_cost.py` any enqueue could come, with no Conveyor code.

    python benchmarks/enqueue_bounds.py --repeat 5

Two of the issue's one-by-one targets (90 % of the floor) are measured here against
the least work the enqueue itself must do, written by hand on the bare drivers:
  * SQLite, async API: the floor is a bare INSERT committed on the caller's thread
    (into Conveyor's table, as `enqueue_cost.py`'s floor). An
    async API that never blocks its event loop on the disk (a commit waits for an
    fsync with synchronous=FULL) runs that INSERT on another thread and awaits it:
    here a thread of its own fed by a SimpleQueue, answering through
    `call_soon_threadsafe` (what Conveyor's store thread does), and `asyncio.to_thread`.
  * Redis: the floor is one EVALSHA of a script that returns at once. The least an
    enqueue writes: a check that the id is free (dedup by id), the next insertion
    number, the job's hash, and its place in the claim order, the queue's waiting jobs
    and the listing: one script, one round trip.
Each figure is jobs/s, min/median/max over `--repeat` interleaved rounds, and the ratio
to the floor round by round.
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
from enqueue_cost import PAYLOAD, REDIS, SqliteFloor  # noqa: E402 - the same floors


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

    calls: queue.SimpleQueue[tuple[Callable[[], None], asyncio.AbstractEventLoop,
                                   asyncio.Future[None]] | None] = queue.SimpleQueue()

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

    def enqueue() -> None:
        for _ in range(jobs):
            client.evalsha(least, 5, *keys, uuid.uuid4().hex, "floor", "noop_async", PAYLOAD,
                           repr(time.time()))

    rates: dict[str, list[float]] = {"floor": [], "least enqueue": []}
    try:
        for _ in range(repeat):
            rates["floor"].append(jobs / timed(floor))
            rates["least enqueue"].append(jobs / timed(enqueue))
    finally:
        stored = client.zcard(keys[4])
        for key in client.scan_iter(f"{tag}*", count=1000):
            client.unlink(key)
        client.close()
    assert stored == jobs * repeat, (stored, jobs * repeat)
    return rates


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def report(backend: str, rates: dict[str, list[float]]) -> None:
    floor = rates["floor"]
    for name, values in rates.items():
        line = (f"{backend:7} {name:14} | {min(values):9,.0f} {statistics.median(values):9,.0f}"
                f" {max(values):9,.0f} |")
        if name != "floor":
            ratio = [v / f for v, f in zip(values, floor)]
            line += f" {min(ratio):5.2f} {statistics.median(ratio):5.2f} {max(ratio):5.2f}"
        print(line, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,redis")
    args = parser.parse_args()
    print(f"{args.jobs} writes per round, {args.repeat} rounds, {os.cpu_count()} cores, load "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}; jobs/s min/median/max, "
          "and the ratio to the floor per round")
    for backend in args.backends.split(","):
        report(backend, sqlite_rounds(args.jobs, args.repeat) if backend == "sqlite"
               else redis_rounds(args.jobs, args.repeat))


if __name__ == "__main__":
    main()

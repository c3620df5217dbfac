"""Enqueue against the floor the storage allows, measured in the same run.

    python benchmarks/enqueue_cost.py                          # SQLite, PostgreSQL, Redis
    python benchmarks/enqueue_cost.py --backends postgres --jobs 3000 --repeat 5
    python benchmarks/enqueue_cost.py --backends sqlite --sqlite-synchronous normal

One by one: N jobs through the sync API (what a Django view calls) and through the
async one, each against the floor of one write on that storage:
  * SQLite: a bare `INSERT` of the same columns into the same table, committed, on
    a connection with the same `synchronous` setting and WAL;
  * PostgreSQL: a bare `INSERT` of the same columns into the same table on a held
    connection in autocommit;
  * Redis: one `EVALSHA` round trip of a script that returns at once.
Bulk: `enqueue_many` of 1,000 jobs against the batched-insert floor: the same rows in
one `INSERT ... SELECT FROM unnest(...)` (PostgreSQL), one `executemany` in one
transaction (SQLite), one pipeline of the same HSET + ZADD writes (Redis).
Each figure is min/median/max over `--repeat` interleaved rounds (so a drift of the
machine's speed hits both sides alike), with the ratio Conveyor / floor per round.
Beside each one-by-one rate: the client's CPU time per job (time.process_time, every
thread of this process: the caller's, the portal's, SQLite's), which a busy machine
changes far less than the wall clock. Every round checks the jobs it enqueued are all
stored, once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

POSTGRES = os.environ.get(
    "CONVEYOR_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("CONVEYOR_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PAYLOAD = json.dumps({"args": [1], "kwargs": {}})


def rate(n: int, seconds: float) -> float:
    return n / seconds


CPU: dict[str, list[float]] = {}  # µs of client CPU per job, by figure


def timed(fn: Callable[[], None], cpu_of: str = "", n: int = 1) -> float:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    if cpu_of:
        CPU.setdefault(cpu_of, []).append((time.process_time() - c0) / n * 1e6)
    return wall


class Floor:
    """The storage's own cost of the same writes, on its own connection."""

    def one(self, n: int) -> None: ...
    def bulk(self, n: int) -> None: ...
    def close(self) -> None: ...


class SqliteFloor(Floor):
    def __init__(self, path: str, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous.upper()}")  # as Conveyor's URL says

    @staticmethod
    def rows(n: int) -> list[tuple[object, ...]]:
        """`n` rows of the floor's INSERT (benchmarks/enqueue_bounds.py writes them too)."""
        now = time.time()
        return [
            (uuid.uuid4().hex, "floor", "noop_async", PAYLOAD, "available", 0, 3, now, now, "{}")
            for _ in range(n)
        ]

    SQL = (
        "INSERT INTO conveyor_jobs (id, queue, task, payload, state, priority, max_attempts,"
        " run_at, created_at, meta) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    def one(self, n: int) -> None:
        for row in self.rows(n):
            self.conn.execute(self.SQL, row)  # autocommit: one transaction each

    def bulk(self, n: int) -> None:
        rows = self.rows(n)
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(self.SQL, rows)
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()


class PostgresFloor(Floor):
    def __init__(self, schema: str) -> None:
        import psycopg

        self.conn = psycopg.connect(POSTGRES, autocommit=True)
        self.schema = schema

    @property
    def sql(self) -> str:
        """The floor's INSERT (benchmarks/enqueue_bounds.py sends it from asyncio too)."""
        return (
            f'INSERT INTO "{self.schema}".jobs (id, queue, task, payload, state, priority,'
            " max_attempts, run_at, created_at, meta)"
            " VALUES (%s, 'floor', 'noop_async', %s, 'available', 0, 3, %s, %s, '{}')"
        )

    def one(self, n: int) -> None:
        sql = self.sql
        for _ in range(n):
            now = time.time()
            self.conn.execute(sql, (uuid.uuid4().hex, PAYLOAD, now, now))

    def bulk(self, n: int) -> None:
        now = time.time()
        ids = [uuid.uuid4().hex for _ in range(n)]
        self.conn.execute(
            f'INSERT INTO "{self.schema}".jobs (id, queue, task, payload, state, priority,'
            " max_attempts, run_at, created_at, meta)"
            " SELECT i, 'floor', 'noop_async', p, 'available', 0, 3, %s, %s, '{}'"
            " FROM unnest(%s::text[], %s::text[]) AS n(i, p)",
            (now, now, ids, [PAYLOAD] * n),
        )

    def close(self) -> None:
        self.conn.close()


class RedisFloor(Floor):
    def __init__(self, prefix: str) -> None:
        import redis

        self.client = redis.Redis.from_url(REDIS)
        self.prefix = prefix
        self.sha = self.client.script_load("return 1")

    def one(self, n: int) -> None:
        for _ in range(n):
            self.client.evalsha(self.sha, 0)

    def bulk(self, n: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        now = time.time()
        for _ in range(n):
            job_id = uuid.uuid4().hex
            pipe.hset(
                f"{self.prefix}floor:{job_id}",
                mapping={
                    "id": job_id,
                    "queue": "floor",
                    "task": "noop_async",
                    "payload": PAYLOAD,
                    "state": "available",
                    "priority": 0,
                    "max_attempts": 3,
                    "run_at": now,
                },
            )
            pipe.zadd(f"{self.prefix}floor-index", {job_id: now})
        pipe.execute()

    def close(self) -> None:
        from conveyor.backends.redis.keys import Keys

        # The floor's keys start with the prefix, Conveyor's with the hash tag "{prefix}:".
        keys = [
            *self.client.scan_iter(f"{self.prefix}*", count=1000),
            *self.client.scan_iter(Keys(self.prefix).pattern(), count=1000),
        ]
        for start in range(0, len(keys), 1000):
            self.client.unlink(*keys[start : start + 1000])
        self.client.close()


def setup(backend: str, tmp: str, synchronous: str = "full") -> tuple[str, Floor]:
    if backend == "sqlite":
        path = f"{tmp}/enqueue.db"
        return f"sqlite:///{path}?synchronous={synchronous}", SqliteFloor(path, synchronous)
    tag = uuid.uuid4().hex[:10]
    if backend == "postgres":
        schema = f"bench_{tag}"
        return f"{POSTGRES}?schema={schema}", PostgresFloor(schema)
    prefix = f"bench-{tag}:"
    return f"{REDIS}?prefix={prefix}", RedisFloor(prefix)


def drop(backend: str, url: str) -> None:
    if backend == "postgres":
        import psycopg

        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def spread(values: list[float]) -> str:
    return f"{min(values):9,.0f} {statistics.median(values):9,.0f} {max(values):9,.0f}"


def ratios(values: list[float]) -> str:
    return f"{min(values):5.2f} {statistics.median(values):5.2f} {max(values):5.2f}"


def cpu(figure: str) -> str:
    values = CPU[figure]
    return f"{min(values):4.0f} {statistics.median(values):4.0f} {max(values):4.0f} µs CPU/job"


def measure(backend: str, jobs: int, repeat: int, synchronous: str = "full") -> list[str]:
    from conveyor import Conveyor
    from conveyor.backends.params import JobFilter

    tmp = tempfile.mkdtemp(prefix="conveyor-enqueue-")
    url, floor = setup(backend, tmp, synchronous)
    app = Conveyor(url)

    @app.task(name="noop_async", queue="bench")
    async def task(i: int) -> None:
        return None

    CPU.clear()
    try:
        app.jobs.count()  # connect and migrate outside the timings
        figures: dict[str, list[float]] = {
            k: [] for k in ("floor1", "sync", "async", "floorN", "bulk")
        }
        for _ in range(repeat):
            figures["floor1"].append(rate(jobs, timed(lambda: floor.one(jobs), "floor1", jobs)))
            figures["sync"].append(
                rate(jobs, timed(lambda: [task.enqueue(i) for i in range(jobs)], "sync", jobs))
            )

            async def one_by_one_async() -> None:
                for i in range(jobs):
                    await task.enqueue_async(i)

            figures["async"].append(
                rate(jobs, timed(lambda: app.portal.call(one_by_one_async()), "async", jobs))
            )
            figures["floorN"].append(rate(1000, timed(lambda: floor.bulk(1000))))
            messages = [task.message(i) for i in range(1000)]
            # timed() calls the lambda before the loop moves on.
            figures["bulk"].append(rate(1000, timed(lambda: app.enqueue_many(messages))))  # noqa: B023
        stored = app.jobs.count(JobFilter(queues=("bench",)))
        assert stored == repeat * (2 * jobs + 1000), (stored, repeat, jobs)
        lines = [
            f"{backend:9} floor: one write    | {spread(figures['floor1'])} |"
            f"{'':18} | {cpu('floor1')}",
            f"{backend:9} enqueue, sync API   | {spread(figures['sync'])} | "
            f"{ratios([a / b for a, b in zip(figures['sync'], figures['floor1'], strict=True)])}"
            f" | {cpu('sync')}",
            f"{backend:9} enqueue, async API  | {spread(figures['async'])} | "
            f"{ratios([a / b for a, b in zip(figures['async'], figures['floor1'], strict=True)])}"
            f" | {cpu('async')}",
            f"{backend:9} floor: batched 1000 | {spread(figures['floorN'])} |",
            f"{backend:9} enqueue_many 1000   | {spread(figures['bulk'])} | "
            f"{ratios([a / b for a, b in zip(figures['bulk'], figures['floorN'], strict=True)])}",
        ]
        return lines
    finally:
        app.close()
        floor.close()
        drop(backend, url)
        shutil.rmtree(tmp, ignore_errors=True)  # the SQLite file and its blobs folder


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--jobs", type=int, default=2000, help="jobs enqueued one by one per round")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--sqlite-synchronous",
        default="full",
        choices=("full", "normal"),
        help="SQLite's synchronous setting, for Conveyor's URL and the floor alike",
    )
    args = parser.parse_args()
    print(
        f"{args.jobs} jobs one by one and 1,000 in bulk per round, {args.repeat} rounds, "
        f"{os.cpu_count()} cores, SQLite synchronous={args.sqlite_synchronous}; jobs/s "
        "min/median/max, and Conveyor / floor per round"
    )
    print(
        f"{'':29} | {'min':>9} {'median':>9} {'max':>9} | ratio min/median/max"
        " | client CPU per job min/median/max"
    )
    for backend in args.backends.split(","):
        for line in measure(backend, args.jobs, args.repeat, args.sqlite_synchronous):
            print(line, flush=True)


if __name__ == "__main__":
    main()

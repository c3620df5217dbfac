"""PostgreSQL backend benchmark: enqueue, drain, idle pickup latency, claim cost
against table size. Everything runs in a fresh schema that is dropped at the end.

    python benchmarks/postgres_bench.py [--url postgresql://postgres@127.0.0.1/test]
    python benchmarks/postgres_bench.py --quick      # smaller numbers, no 1M-row table
    python benchmarks/postgres_bench.py --only drain,pickup

Targets (issue 3): drain >= 10,000 jobs/s with 2 worker processes; enqueue one
by one within 80% of a bare single-row INSERT; a batch of 1,000 under 30 ms;
idle pickup p50 under 5 ms; claim rate flat from 10,000 to 1,000,000 rows.
Workers are separate processes (`--serve`), as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import JobFilter, JobWait, QueuePause
from conveyor.model.job import JobState
from conveyor.worker import Worker, WorkerConfig

QUEUE = "bench"
# Bare baseline: the same row, the same table, one INSERT, no dedup, no wake-up.
BARE_INSERT = """INSERT INTO "{schema}".jobs (id, queue, task, payload, state, priority,
 max_attempts, run_at, created_at, meta)
 VALUES (%s, %s, 'noop', %s, 'available', 0, 20, %s, %s, '{{}}')"""
# Fill for the claim-cost runs: rows in every state but available, plus `available` claimable.
FILL = """INSERT INTO "{schema}".jobs (id, queue, task, payload, state, max_attempts, run_at,
 created_at, finished_at, attempt)
SELECT 'fill-' || g, %(queue)s, 'noop', '{{"args":[],"kwargs":{{}}}}',
       CASE WHEN g <= %(available)s THEN 'available'
            WHEN g %% 10 = 1 THEN 'dead' WHEN g %% 10 = 2 THEN 'scheduled'
            WHEN g %% 10 = 3 THEN 'retryable' ELSE 'completed' END,
       20, CASE WHEN g <= %(available)s THEN %(now)s ELSE %(now)s + 86400 END, %(now)s,
       CASE WHEN g > %(available)s AND g %% 10 NOT IN (2, 3) THEN %(now)s END, 1
FROM generate_series(1, %(total)s) AS g"""


def build_app(url: str) -> Conveyor:
    app = Conveyor(url)

    @app.task(name="noop", queue=QUEUE)
    async def noop(i: int) -> None:
        return None

    return app


# --- worker processes ---------------------------------------------------------------
def serve(url: str, concurrency: int, poll: float) -> None:
    async def main() -> None:
        app = build_app(url)
        worker = Worker(
            app,
            WorkerConfig(
                queues=(QUEUE,),
                concurrency=concurrency,
                fetch_batch=concurrency,
                poll_interval=poll,
                grace_period=5,
            ),
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        backend = await app.backend()
        await backend.wait_for_jobs(
            JobWait(queues=(QUEUE,), timeout=0)
        )  # listener connected before "ready"
        print("ready", flush=True)
        await worker.run()
        await app.aclose()

    asyncio.run(main())


def start_workers(
    url: str, n: int, concurrency: int, poll: float = 1.0
) -> list[subprocess.Popen[str]]:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve",
                "--url",
                url,
                "--concurrency",
                str(concurrency),
                "--poll",
                str(poll),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return procs


def stop_workers(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(30)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


# --- measurements ---------------------------------------------------------------------
async def enqueue_one_by_one(app: Conveyor, schema: str, base: str, n: int) -> dict[str, float]:
    """Rounds of ours and of the bare INSERT alternate, so a noisy moment of the shared
    machine hits both; rates are medians of rounds, ratios medians of paired rounds."""
    noop = app.tasks["noop"]
    sql = BARE_INSERT.format(schema=schema)
    rounds = 11
    per_round = max(1, n // rounds)
    rates: dict[str, list[float]] = {"ours": [], "ours_sync": [], "bare": []}

    def sync_round() -> None:
        for i in range(per_round):
            noop.enqueue(i)

    async with await psycopg.AsyncConnection.connect(base, autocommit=True) as conn:
        for rnd in range(rounds + 1):  # round 0 warms up: pools, prepared statements
            started = time.perf_counter()
            for i in range(per_round):
                await noop.enqueue_async(i)
            ours = per_round / (time.perf_counter() - started)
            started = time.perf_counter()
            for _ in range(per_round):
                now = time.time()
                await conn.execute(
                    sql, (uuid.uuid4().hex, QUEUE, '{"args":[0],"kwargs":{}}', now, now)
                )
            bare = per_round / (time.perf_counter() - started)
            started = time.perf_counter()
            await asyncio.to_thread(sync_round)
            ours_sync = per_round / (time.perf_counter() - started)
            if rnd:
                rates["ours"].append(ours)
                rates["bare"].append(bare)
                rates["ours_sync"].append(ours_sync)
    out = {name: statistics.median(values) for name, values in rates.items()}
    out["ratio"] = statistics.median(
        o / b for o, b in zip(rates["ours"], rates["bare"], strict=True)
    )
    out["ratio_sync"] = statistics.median(
        o / b for o, b in zip(rates["ours_sync"], rates["bare"], strict=True)
    )
    return out


async def enqueue_batches(app: Conveyor, size: int, reps: int) -> list[float]:
    noop = app.tasks["noop"]
    times = []
    for rep in range(reps + 2):
        batch = [noop.message(i) for i in range(size)]
        started = time.perf_counter()
        await app.enqueue_many_async(batch)
        if rep >= 2:  # the first two warm up
            times.append((time.perf_counter() - started) * 1000)
    return times


async def clear(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    await conn.execute(f'TRUNCATE "{schema}".jobs')
    await conn.execute(f'VACUUM ANALYZE "{schema}".jobs')


async def drain(
    app: Conveyor,
    url: str,
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    n_workers: int,
    n_jobs: int,
) -> float:
    await clear(conn, schema)
    backend = await app.backend()
    await backend.pause_queue(QueuePause(queue=QUEUE, paused=True))
    # -c 200 as in benchmarks/throughput.py: bigger claim and ack batches per round trip.
    procs = start_workers(url, n_workers, concurrency=200)
    try:
        noop = app.tasks["noop"]
        for start in range(0, n_jobs, 1000):
            await app.enqueue_many_async([noop.message(i) for i in range(start, start + 1000)])
        started = time.perf_counter()
        await backend.pause_queue(QueuePause(queue=QUEUE, paused=False))
        done = JobFilter(states=(JobState.COMPLETED,))
        while await backend.count_jobs(done) < n_jobs:
            await asyncio.sleep(0.1)  # each count scans the table: poll gently, it competes
        elapsed = time.perf_counter() - started
    finally:
        stop_workers(procs)
    cur = await conn.execute(f'SELECT count(*) FROM "{schema}".jobs WHERE attempt <> 1')
    assert (await cur.fetchone()) == (0,), "a job ran more than once"
    return n_jobs / elapsed


async def pickup_latency(
    app: Conveyor, url: str, conn: psycopg.AsyncConnection[Any], schema: str, samples: int
) -> list[float]:
    await clear(conn, schema)
    backend = await app.backend()
    # A long poll interval: what is measured is the LISTEN/NOTIFY wake-up, not polling.
    procs = start_workers(url, 1, concurrency=10, poll=5.0)
    latencies = []
    try:
        noop = app.tasks["noop"]
        for i in range(samples + 10):
            await asyncio.sleep(0.02)  # pacing only: the worker is idle when the job lands
            t0 = time.time()
            handle = await noop.enqueue_async(i)
            while True:
                job = await backend.get_job(handle.id)
                if job is not None and job.started_at is not None:
                    break
                await asyncio.sleep(0.0005)
            if i >= 10:
                latencies.append((job.started_at - t0) * 1000)
    finally:
        stop_workers(procs)
    return latencies


async def claim_rate(
    app: Conveyor, conn: psycopg.AsyncConnection[Any], schema: str, total: int, available: int
) -> tuple[float, str]:
    await clear(conn, schema)
    await conn.execute(
        FILL.format(schema=schema),
        {"queue": QUEUE, "available": available, "total": total, "now": time.time()},
    )
    await conn.execute(f'VACUUM ANALYZE "{schema}".jobs')
    backend = await app.backend()
    plan = await claim_plan(conn, backend, schema)
    claimed = 0
    started = time.perf_counter()
    while claimed < available:
        claimed += len(await backend.fetch_jobs(strict_claim([QUEUE], 100, "bench", 60)))
    return claimed / (time.perf_counter() - started), plan


async def claim_plan(conn: psycopg.AsyncConnection[Any], backend: Any, schema: str) -> str:
    """Index and buffers one claim of 100 touches (run, then rolled back): flat in table size."""
    now = time.time()
    params = {
        "queue": QUEUE,
        "limit": 100,
        "now": now,
        "worker_id": "plan",
        "lease_expires_at": now + 60,
    }
    async with conn.transaction(force_rollback=True):
        cur = await conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + backend._state.queries["claim_jobs"],
            params,
        )
        row = await cur.fetchone()
    assert row is not None
    root = row[0][0]["Plan"]
    indexes: set[str] = set()

    def walk(node: dict[str, Any]) -> None:
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        for child in node.get("Plans", []):
            walk(child)

    walk(root)
    buffers = root.get("Shared Hit Blocks", 0) + root.get("Shared Read Blocks", 0)
    return f"indexes {', '.join(sorted(indexes))}; {buffers} buffers per claim of 100"


SECTIONS = ("enqueue", "batch", "drain", "pickup", "claim")


async def run(base: str, quick: bool, only: set[str]) -> None:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
    app = build_app(url)
    await app.backend()
    rows: list[tuple[str, str, str]] = []
    conn = await psycopg.AsyncConnection.connect(base, autocommit=True)
    try:
        n = 1100 if quick else 4400
        if "enqueue" in only:
            e = await enqueue_one_by_one(app, schema, base, n)
            rows.append(
                (
                    "enqueue one by one (async)",
                    f"{e['ours']:,.0f} jobs/s",
                    f"{e['ratio']:.0%} of bare INSERT ({e['bare']:,.0f}/s); target >= 80%",
                )
            )
            rows.append(
                (
                    "enqueue one by one (sync facade)",
                    f"{e['ours_sync']:,.0f} jobs/s",
                    f"{e['ratio_sync']:.0%} of bare INSERT",
                )
            )
        if "batch" in only:
            b = await enqueue_batches(app, 1000, 5 if quick else 20)
            rows.append(
                (
                    "enqueue batch of 1,000",
                    f"p50 {pct(b, 50):.1f} ms",
                    f"p95 {pct(b, 95):.1f} ms; target < 30 ms",
                )
            )
        jobs = 10_000 if quick else 50_000
        for workers in (1, 2) if "drain" in only else ():
            rate = await drain(app, url, conn, schema, workers, jobs)
            rows.append(
                (
                    f"drain {jobs:,} no-op jobs, {workers} worker process(es), -c 200",
                    f"{rate:,.0f} jobs/s",
                    "target >= 10,000/s with 2" if workers == 2 else "",
                )
            )
        if "pickup" in only:
            lat = await pickup_latency(app, url, conn, schema, 50 if quick else 200)
            rows.append(
                (
                    "idle pickup latency (enqueue call -> started_at)",
                    f"p50 {pct(lat, 50):.2f} ms",
                    f"p95 {pct(lat, 95):.2f} ms, p99 {pct(lat, 99):.2f} ms; target p50 < 5 ms",
                )
            )
        sizes = (10_000, 100_000) if quick else (10_000, 1_000_000)
        for total in sizes if "claim" in only else ():
            rate, plan = await claim_rate(app, conn, schema, total, 5_000)
            rows.append(
                (
                    f"claim rate, {total:,} jobs in table (5,000 claimable)",
                    f"{rate:,.0f} jobs/s",
                    f"batches of 100, one client; {plan}",
                )
            )
    finally:
        await app.aclose()
        await asyncio.to_thread(app.close)  # the sync facade's loop has a backend too
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()
    width = max(len(r[0]) for r in rows)
    print(f"\n{'measure':<{width}}  {'result':>18}  notes")
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>18}  {note}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--url",
        default=os.environ.get(
            "CONVEYOR_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections of {','.join(SECTIONS)}",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=100, help=argparse.SUPPRESS)
    parser.add_argument("--poll", type=float, default=1.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.url, args.concurrency, args.poll)
    else:
        asyncio.run(run(args.url, args.quick, set(args.only.split(","))))


if __name__ == "__main__":
    main()

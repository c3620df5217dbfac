"""Redis backend benchmark: enqueue, drain, idle pickup latency, bounded memory.

    python benchmarks/redis_bench.py                          # quick (memory run: 200,000 jobs)
    python benchmarks/redis_bench.py --memory-jobs 1000000    # the 1M-job retention run
    python benchmarks/redis_bench.py --url redis://host:6379/0

Every run uses its own random key prefix and deletes its keys at the end (SCAN on the
prefix; never FLUSHDB). Workers are separate processes, as in production. Every
drained job is checked to have completed on its first attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def start_workers(url: str, n: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": str(HERE)}
    return [
        subprocess.Popen(
            [sys.executable, __file__, "--serve", "--url", url, "--concurrency", str(concurrency)],
            env=env,
        )
        for _ in range(n)
    ]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(60)


def serve(url: str, concurrency: int) -> None:
    os.environ["CONVEYOR_URL"] = url
    from bench_app import app

    from conveyor.worker import Worker, WorkerConfig

    async def main() -> None:
        worker = Worker(
            app,
            WorkerConfig(
                queues=("bench",),
                concurrency=concurrency,
                fetch_batch=concurrency,
                grace_period=5,
                prune_interval=5.0,
            ),
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()

    asyncio.run(main())


async def bench(args: argparse.Namespace) -> list[tuple[str, str]]:
    import redis.asyncio as aioredis

    # Unbounded for the timed runs (they count completed jobs); the memory run has its own.
    run_id = uuid.uuid4().hex[:8]
    os.environ["CONVEYOR_URL"] = url = f"{args.url}?prefix=bench-{run_id}&max_completed=0"
    memory_url = f"{args.url}?prefix=bench-mem-{run_id}&max_completed={args.max_completed}"
    from bench_app import app, noop_async

    from conveyor.backends.params import JobFilter, JobPage
    from conveyor.backends.redis.backend import RedisBackend
    from conveyor.model.job import JobState

    backend = await app.backend()
    assert isinstance(backend, RedisBackend)
    raw = aioredis.Redis.from_url(args.url, decode_responses=True)
    rows: list[tuple[str, str]] = []
    completed = JobFilter(states=(JobState.COMPLETED,))

    async def clear() -> None:
        await backend.delete_all_keys()

    try:
        # 1. One by one: the async API against a bare LPUSH of the same payload, in
        # alternating rounds (the median of each), so load changes hit both alike.
        n = args.one_by_one // 5
        payload = noop_async.message(0).payload
        bare_key = backend.keys.base + "bench:bare"
        bare_rates, api_rates, backend_rates = [], [], []
        for _round in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                await raw.lpush(bare_key, payload)
            bare_rates.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for i in range(n):
                await noop_async.enqueue_async(i)
            api_rates.append(n / (time.perf_counter() - t0))
            messages = [noop_async.message(i) for i in range(n)]
            t0 = time.perf_counter()
            for message in messages:
                await backend.enqueue_jobs([message])
            backend_rates.append(n / (time.perf_counter() - t0))
        bare = statistics.median(bare_rates)
        ours, direct = statistics.median(api_rates), statistics.median(backend_rates)
        rows.append(("bare LPUSH one by one (redis-py asyncio)", f"{bare:,.0f} ops/s"))
        rows.append(
            (
                "enqueue one by one (task.enqueue_async)",
                f"{ours:,.0f} jobs/s = {ours / bare:.0%} of bare LPUSH",
            )
        )
        rows.append(
            (
                "enqueue one by one (backend.enqueue_jobs, message built)",
                f"{direct:,.0f} jobs/s = {direct / bare:.0%} of bare LPUSH",
            )
        )
        # The sync facade (Django, Flask, scripts) against redis-py's sync LPUSH, from a
        # plain thread as a web request would.
        sync_bare, sync_ours = await asyncio.to_thread(_sync_rounds, args.url, bare_key, payload, n)
        rows.append(("bare LPUSH one by one (redis-py sync)", f"{sync_bare:,.0f} ops/s"))
        rows.append(
            (
                "enqueue one by one (task.enqueue, sync)",
                f"{sync_ours:,.0f} jobs/s = {sync_ours / sync_bare:.0%} of bare LPUSH",
            )
        )
        await clear()
        if args.only_enqueue:
            return rows

        # 2. A batch of 1,000: one EVALSHA, so one round trip (counted on the client:
        # the server's command stats also count other clients).
        timings, trips = [], []
        for _ in range(10):
            messages = [noop_async.message(i) for i in range(1000)]
            with _count_round_trips() as sent:
                t0 = time.perf_counter()
                await app.enqueue_many_async(messages)
                timings.append((time.perf_counter() - t0) * 1000)
            trips.append(sent[0])
        rows.append(
            (
                "enqueue batch of 1,000",
                f"median {statistics.median(timings):.1f} ms, "
                f"best {min(timings):.1f} ms, round trips per batch: {max(trips)}",
            )
        )
        await clear()

        # 3. Drain with 1 and 2 worker processes.
        for workers in (1, 2):
            for start in range(0, args.jobs, 10_000):
                await app.enqueue_many_async(
                    noop_async.message(i) for i in range(start, min(args.jobs, start + 10_000))
                )
            procs = start_workers(url, workers, args.concurrency)
            first_seen = None
            while True:
                done = await backend.count_jobs(completed)
                if first_seen is None and done > 0:
                    first_seen = time.perf_counter()
                if done >= args.jobs:
                    break
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - (first_seen or time.perf_counter())
            stop_workers(procs)
            assert await backend.count_jobs(JobFilter()) == args.jobs
            firsts = {
                j.attempt
                for j in await backend.list_jobs(JobPage(where=completed, limit=args.jobs))
            }
            assert firsts == {1}, firsts
            rows.append(
                (
                    f"drain {args.jobs:,} async no-op jobs, {workers} worker process(es) "
                    f"-c {args.concurrency}",
                    f"{args.jobs / elapsed:,.0f} jobs/s (each ran once)",
                )
            )
            await clear()

        # 4. Idle pickup latency: one job at a time into an idle worker.
        procs = start_workers(url, 1, 10)
        await asyncio.sleep(1.0)  # timing only: let the worker go idle on BLPOP
        latencies = []
        for i in range(args.latency_samples):
            handle = await noop_async.enqueue_async(i)
            await handle.result_async(timeout=10)
            job = handle.job
            assert job.started_at is not None
            latencies.append((job.started_at - job.created_at) * 1000)
            await asyncio.sleep(0.005)
        stop_workers(procs)
        rows.append(
            (
                "idle pickup latency (enqueue -> start)",
                f"p50 {percentile(latencies, 50):.2f} ms, p95 {percentile(latencies, 95):.2f} ms, "
                f"p99 {percentile(latencies, 99):.2f} ms",
            )
        )
        await clear()

        # 5. Memory with retention: N completed jobs, at most max_completed kept.
        total = args.memory_jobs
        baseline = int((await raw.info("memory"))["used_memory"])
        memory_backend = RedisBackend(memory_url)
        await memory_backend.open()
        procs = start_workers(memory_url, 2, args.concurrency)
        samples: list[tuple[int, int]] = []
        enqueued = 0
        next_sample = total // 10
        active = JobFilter(states=(JobState.AVAILABLE, JobState.RUNNING))
        while enqueued < total or await memory_backend.count_jobs(active) > 0:
            if enqueued < total:
                backlog = await memory_backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,)))
                if backlog < 20_000:  # keep a bounded backlog, as a steady producer would
                    batch = min(10_000, total - enqueued)
                    await memory_backend.enqueue_jobs(
                        [noop_async.message(i) for i in range(enqueued, enqueued + batch)]
                    )
                    enqueued += batch
            if enqueued >= next_sample:
                used = int((await raw.info("memory"))["used_memory"])
                samples.append((enqueued, used - baseline))
                next_sample += total // 10
            await asyncio.sleep(0.02)
        stop_workers(procs)
        used = int((await raw.info("memory"))["used_memory"]) - baseline
        kept = await memory_backend.count_jobs(completed)
        await memory_backend.delete_all_keys()
        await memory_backend.close()
        curve = ", ".join(f"{n // 1000}k:{b / 2**20:.1f}" for n, b in samples)
        rows.append(
            (
                f"memory after {total:,} completed jobs (max_completed={args.max_completed:,})",
                f"{used / 2**20:.1f} MiB above baseline, {kept:,} completed kept",
            )
        )
        rows.append(("memory over the run (jobs enqueued: MiB)", curve))
    finally:
        await clear()
        await raw.delete(backend.keys.base + "bench:bare")
        await raw.aclose()
        await app.aclose()
    return rows


def _sync_rounds(url: str, key: str, payload: str, n: int) -> tuple[float, float]:
    """Medians of 5 alternating rounds: sync LPUSH, then sync task.enqueue."""
    import redis
    from bench_app import noop_async

    raw = redis.Redis.from_url(url)
    bare_rates, api_rates = [], []
    try:
        noop_async.enqueue(-1)  # opens the backend and the thread's connection
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                raw.lpush(key, payload)
            bare_rates.append(n / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for i in range(n):
                noop_async.enqueue(i)
            api_rates.append(n / (time.perf_counter() - t0))
    finally:
        raw.delete(key)
        raw.close()
    return statistics.median(bare_rates), statistics.median(api_rates)


@contextlib.contextmanager
def _count_round_trips() -> Iterator[list[int]]:
    """Count the writes redis-py makes to its sockets (one per command or pipeline)."""
    from redis.asyncio.connection import AbstractConnection

    sent = [0]
    original = AbstractConnection.send_packed_command

    async def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        await original(self, command, check_health)

    AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        AbstractConnection.send_packed_command = original  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per drain run")
    parser.add_argument("--one-by-one", type=int, default=15_000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--memory-jobs", type=int, default=200_000)
    parser.add_argument("--max-completed", type=int, default=10_000)
    parser.add_argument(
        "--only-enqueue", action="store_true", help="stop after the one-by-one enqueue rows"
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.url, args.concurrency)
        return
    rows = asyncio.run(bench(args))
    width = max(len(name) for name, _ in rows)
    print(f"\nRedis backend, {os.cpu_count()} CPUs, {args.url}")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()

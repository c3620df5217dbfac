"""Throughput and latency of one backend: enqueue, drain, pickup latency.

    python benchmarks/throughput.py                      # embedded SQLite in a temp dir
    python benchmarks/throughput.py --url postgresql://localhost/test --workers 2

Every drained job is checked to have run exactly once (completed on attempt 1).
Workers are separate processes, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def run_worker_process(url: str, concurrency: int) -> subprocess.Popen[bytes]:
    # Appended to, not replaced: PYTHONPATH=<another checkout>/src measures that code.
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CONVEYOR_URL": url, "PYTHONPATH": path}
    return subprocess.Popen(
        [sys.executable, __file__, "--serve", "--url", url, "--concurrency", str(concurrency)],
        env=env,
    )


def serve(url: str, concurrency: int) -> None:
    import signal

    os.environ["CONVEYOR_URL"] = url
    try:  # as `conveyor worker` starts (code from before it had this: as it was)
        from conveyor.worker.pool.process_start import starting
    except ImportError:
        from contextlib import nullcontext as starting
    with starting():
        from bench_app import app

        from conveyor.worker import Worker, WorkerConfig

    async def main() -> None:
        worker = Worker(
            app,
            WorkerConfig(
                queues=("bench",), concurrency=concurrency, fetch_batch=concurrency, grace_period=5
            ),
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()

    asyncio.run(main())


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain run")
    parser.add_argument("--one-by-one", type=int, default=3_000, help="jobs enqueued one by one")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument(
        "--pickup-rate",
        type=float,
        default=100.0,
        help="jobs a second enqueued for the pickup latency",
    )
    parser.add_argument(
        "--pickup-only",
        action="store_true",
        help="measure the pickup latency alone (no enqueue or drain runs)",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.url, args.concurrency)
        return

    tmp = tempfile.mkdtemp(prefix="conveyor-bench-")
    atexit.register(shutil.rmtree, tmp, True)  # the SQLite file and its wake-up folder
    url = args.url or f"sqlite:///{tmp}/bench.db"
    os.environ["CONVEYOR_URL"] = url
    from bench_app import app, noop_async, noop_sync

    from conveyor.backends.params import JobFilter
    from conveyor.model.job import JobState

    rows: list[tuple[str, str]] = []
    app.jobs.count()  # connect and migrate outside the timings

    def clear() -> None:
        app.jobs.delete(JobFilter(states=(JobState.COMPLETED,)), limit=10_000_000)

    if args.pickup_only:
        rows.append(pickup(app, url, noop_async, args.latency_samples, args.pickup_rate))
        report(url, rows)
        app.close()
        return

    # 1. Enqueue one by one through the sync API.
    t0 = time.perf_counter()
    for i in range(args.one_by_one):
        noop_async.enqueue(i)
    rate = args.one_by_one / (time.perf_counter() - t0)
    rows.append(("enqueue one by one (sync API)", f"{rate:,.0f} jobs/s"))

    # 2. A batch of 1,000 in one call.
    timings = []
    for _ in range(10):
        messages = [noop_async.message(i) for i in range(1000)]
        t0 = time.perf_counter()
        app.enqueue_many(messages)
        timings.append((time.perf_counter() - t0) * 1000)
    rows.append(
        (
            "enqueue batch of 1,000",
            f"median {statistics.median(timings):.1f} ms, best {min(timings):.1f} ms",
        )
    )
    app.jobs.delete(JobFilter(), limit=10_000_000)  # nothing finished yet: deletes nothing
    # Start the drains from an empty queue.
    pending = app.jobs.count(JobFilter(states=(JobState.AVAILABLE,)))

    def drain(task: object, label: str) -> None:
        nonlocal pending
        for start in range(0, args.jobs, 5000):
            app.enqueue_many([task.message(i) for i in range(start, min(args.jobs, start + 5000))])  # type: ignore[attr-defined]
        total = args.jobs + pending
        procs = [run_worker_process(url, args.concurrency) for _ in range(args.workers)]
        while app.jobs.count(JobFilter(states=(JobState.COMPLETED,))) < total:
            time.sleep(0.02)
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        once = app.jobs.count(JobFilter(states=(JobState.COMPLETED,)))
        others = app.jobs.count(JobFilter()) - once
        ran = app.jobs.list(JobFilter(states=(JobState.COMPLETED,)), limit=total)
        attempts = {j.attempt for j in ran}
        assert once == total and others == 0 and attempts == {1}, (once, others, attempts)
        # From the first job's start to the last one's end, as the jobs record them: the
        # workers' start-up is left out, and a drain shorter than the 20 ms poll above
        # (a few hundred jobs) is still timed.
        elapsed = max(j.finished_at or 0.0 for j in ran) - min(
            j.started_at or math.inf for j in ran
        )
        rows.append(
            (
                f"drain {total:,} {label} jobs, {args.workers} worker process(es) "
                f"-c {args.concurrency}",
                f"{total / elapsed:,.0f} jobs/s (each ran once)",
            )
        )
        clear()
        pending = 0

    drain(noop_async, "async no-op")
    drain(noop_sync, "sync no-op")

    rows.append(pickup(app, url, noop_async, args.latency_samples, args.pickup_rate))
    report(url, rows)
    app.close()


def pickup(app: object, url: str, task: object, samples: int, rate: float) -> tuple[str, str]:
    """Pickup latency of an idle worker: jobs enqueued one at a time at a steady `rate`
    (on a schedule, not waiting for each result), from enqueue to start. The enqueue
    calls' own time is shown too: a job's clock starts before its insert is written."""
    procs = [run_worker_process(url, 10)]
    # Measured from when the worker has announced itself (its record is written just
    # before its first claim), not after a fixed pause: on a loaded machine a worker
    # still starting made the first jobs wait for its start.
    deadline = time.monotonic() + 60
    while not any(w.pid == procs[0].pid for w in app.jobs.workers()):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline and procs[0].poll() is None, "the worker did not start"
        time.sleep(0.01)
    time.sleep(0.5)  # then idle: its first, empty claim is done (timing only)
    handles, calls = [], []
    t0 = time.perf_counter()
    for i in range(samples):
        pause = t0 + i / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        called = time.perf_counter()
        handles.append(task.enqueue(i))  # type: ignore[attr-defined]
        calls.append((time.perf_counter() - called) * 1000)
    for handle in handles:
        handle.result(timeout=30)
    for p in procs:
        p.terminate()
        p.wait(30)
    latencies = []
    for handle in handles:
        job = handle.refresh()
        assert job.started_at is not None and job.attempt == 1, job
        latencies.append((job.started_at - job.created_at) * 1000)
    from conveyor.backends.params import JobFilter

    app.jobs.delete(JobFilter(ids=tuple(h.id for h in handles)), limit=samples)  # type: ignore[attr-defined]
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return (
        f"idle pickup latency (enqueue -> start, {rate:g} jobs/s)",
        f"p50 {p50:.2f} ms, p95 {percentile(latencies, 95):.2f} ms, p99 {p99:.2f} ms "
        f"({p99 / p50:.1f}x p50); enqueue call p50 {percentile(calls, 50):.2f} ms, "
        f"p99 {percentile(calls, 99):.2f} ms",
    )


def report(url: str, rows: list[tuple[str, str]]) -> None:
    from conveyor.backends import redact_url

    width = max(len(r[0]) for r in rows)
    print(f"\nConveyor benchmark on {redact_url(url)} ({os.cpu_count()} cores)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


if __name__ == "__main__":
    main()

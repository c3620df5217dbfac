"""A worker's resident memory over 1,000,000 jobs: does it stay flat?

    python benchmarks/worker_rss.py                             # SQLite, PostgreSQL, Redis
    python benchmarks/worker_rss.py --backends redis --jobs 200000 --repeat 2
    python benchmarks/worker_rss.py --backends sqlite --tracemalloc   # where it grows

Per backend, on a fresh store (a temp SQLite file, a fresh PostgreSQL schema, a fresh
Redis prefix, dropped afterwards): enqueue `--jobs` no-op async jobs with `enqueue_many`
in chunks of 5,000, then run one `conveyor worker --burst -c 200` process over them
(as benchmarks/cost_per_job.py does) and read its VmRSS from /proc/<pid>/status every
second, beside the number of jobs completed so far. Prints the RSS after 10k, 100k and
500k jobs (the first sample at or past each), at the last sample before the worker exits
(the count it had reached) and the peak, and the slope after warm-up: a least-squares
line through the samples from 100k jobs on, in KB per 100,000 jobs. Each run checks that
no job is left unfinished (waiting, running or failed) at the end.

`--tracemalloc` runs the worker in this process instead, under tracemalloc, and prints the
15 source lines whose allocations grew most between the snapshot at 100k jobs and the one
at the end (tracemalloc's own bookkeeping makes that run slower and its RSS larger: read it
for where memory goes, not for how much).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from cost_per_job import drop, isolated_url, worker_command  # noqa: E402

MARKS = (10_000, 100_000, 500_000, 1_000_000)
WARM_UP = 100_000


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


async def fill(url: str, jobs: int) -> None:
    os.environ["CONVEYOR_URL"] = url
    import bench_app

    bench_app.app.rebind(url)
    for start in range(0, jobs, 5000):
        await bench_app.app.enqueue_many_async(
            [bench_app.noop_async.message(i) for i in range(start, min(start + 5000, jobs))]
        )
    await bench_app.app.aclose()


def unfinished(url: str) -> int:
    """Jobs not completed (waiting, running, or failed). The jobs done are `--jobs` minus
    these: Redis keeps only the newest `max_completed` (100,000) completed jobs."""
    import bench_app

    from conveyor.backends.params import JobFilter
    from conveyor.model.job import JobState

    bench_app.app.rebind(url)
    return bench_app.app.jobs.count(
        JobFilter(states=tuple(s for s in JobState if s is not JobState.COMPLETED))
    )


def sample_worker(url: str, jobs: int) -> list[tuple[int, int]]:
    """(jobs completed, worker RSS in KB) every second of a burst worker's run."""
    proc = subprocess.Popen(
        worker_command(None),
        cwd=HERE,
        env={
            **os.environ,
            "CONVEYOR_URL": url,
            "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(HERE)])),
        },
    )
    samples: list[tuple[int, int]] = []
    next_at = time.monotonic()
    while proc.poll() is None:
        rss = rss_kb(proc.pid)
        if rss is not None:
            samples.append((jobs - unfinished(url), rss))
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.monotonic()))  # sampling period, not synchronisation
    if proc.returncode != 0:
        raise RuntimeError(f"the worker exited {proc.returncode}")
    left = unfinished(url)
    assert left == 0, (left, jobs)
    return samples


def slope_per_100k(samples: list[tuple[int, int]]) -> float | None:
    points = [(n, kb) for n, kb in samples if n >= WARM_UP]
    if len(points) < 2:
        return None
    mean_n = sum(n for n, _ in points) / len(points)
    mean_kb = sum(kb for _, kb in points) / len(points)
    var = sum((n - mean_n) ** 2 for n, _ in points)
    if var == 0:
        return None
    cov = sum((n - mean_n) * (kb - mean_kb) for n, kb in points)
    return cov / var * 100_000


def at_marks(samples: list[tuple[int, int]], jobs: int) -> list[str]:
    """The first sample at or past each mark; the last mark (the run's end, which the
    worker may reach between two samples) is the last sample, labelled with its count."""
    out = []
    for mark in (m for m in MARKS if m < jobs):
        hit = next(((n, kb) for n, kb in samples if n >= mark), None)
        out.append(
            f"{mark // 1000:>5}k {hit[1] / 1024:6.1f} MB" if hit else f"{mark // 1000:>5}k      -"
        )
    n, kb = samples[-1]
    return [*out, f"{n / 1000:>5.0f}k {kb / 1024:6.1f} MB"]


def load() -> str:
    return "load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def one_run(backend: str, jobs: int, folder: Path) -> str:
    url = isolated_url(backend, folder)
    try:
        started = time.perf_counter()
        asyncio.run(fill(url, jobs))
        filled = time.perf_counter() - started
        before = load()
        samples = sample_worker(url, jobs)
        slope = slope_per_100k(samples)
        peak = max(kb for _, kb in samples)
        return (
            f"{backend:8} | "
            + " | ".join(at_marks(samples, jobs))
            + f" | peak {peak / 1024:6.1f} MB | slope "
            + ("-" if slope is None else f"{slope:+7.0f} KB/100k")
            + f" | fill {filled:.0f} s, drain {len(samples)} s ({before}; after: {load()})"
        )
    finally:
        asyncio.run(drop(backend, url))


def traced_run(backend: str, jobs: int, folder: Path) -> None:
    """The worker in this process under tracemalloc: what grew from 100k jobs to the end."""
    url = isolated_url(backend, folder)
    try:
        asyncio.run(fill(url, jobs))
        import bench_app

        from conveyor.worker import Worker, WorkerConfig

        snapshots: list[tracemalloc.Snapshot] = []

        async def watch() -> None:
            while not snapshots:
                await asyncio.sleep(1.0)  # sampling period
                if jobs - await asyncio.to_thread(unfinished, url) >= WARM_UP:
                    snapshots.append(tracemalloc.take_snapshot())

        async def main() -> None:
            bench_app.app.rebind(url)
            worker = Worker(
                bench_app.app,
                WorkerConfig(queues=("bench",), concurrency=200, fetch_batch=200, burst=True),
            )
            watcher = asyncio.create_task(watch())
            await worker.run()
            watcher.cancel()
            snapshots.append(tracemalloc.take_snapshot())
            await bench_app.app.aclose()

        tracemalloc.start(10)
        asyncio.run(main())
        tracemalloc.stop()
        if len(snapshots) < 2:
            print(f"{backend}: fewer than {WARM_UP} jobs, no diff")
            return
        print(
            f"\n{backend}: the 15 lines whose allocations grew most from {WARM_UP:,} jobs "
            f"to {jobs:,}"
        )
        for stat in snapshots[1].compare_to(snapshots[0], "lineno")[:15]:
            print(f"  {stat}")
    finally:
        asyncio.run(drop(backend, url))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--tracemalloc", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="conveyor-rss-"))
    print(
        f"{args.jobs:,} no-op async jobs, one `conveyor worker --burst -c 200` process, "
        f"{os.cpu_count()} cores; worker VmRSS after n jobs"
    )
    try:
        for _ in range(args.repeat):
            for backend in args.backends.split(","):
                if args.tracemalloc:
                    traced_run(backend, args.jobs, folder)
                else:
                    print(one_run(backend, args.jobs, folder), flush=True)
    finally:
        shutil.rmtree(folder)  # the SQLite files


if __name__ == "__main__":
    main()

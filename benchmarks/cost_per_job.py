"""The cost of one no-op job: CPU time in the worker process and in the server, per job.

    python benchmarks/cost_per_job.py                          # SQLite, PostgreSQL, Redis
    python benchmarks/cost_per_job.py --backends redis --jobs 20000 --repeat 5
    python benchmarks/cost_per_job.py --backends sqlite --profile   # top 15 functions
    python benchmarks/cost_per_job.py --workers 2        # two worker processes at once

Per backend and handler kind (async, sync): enqueue N no-op jobs, then run one
`conveyor worker --burst -c 200` process over them and read, from /proc, the user+sys
CPU the worker process used and the CPU the server's processes used meanwhile (every
`postgres` or `redis-server` process; SQLite has none, its work is in the worker).
A burst worker over an empty queue (start, exit) is run as well and its figures taken
off, so what is left divided by N is the cost per job. Each figure is the min/median/max over
`--repeat` runs. The server figure counts whatever else the server served meanwhile:
run it on a quiet machine.

`--workers N` starts N such processes at once over the same jobs: the worker figure is
their sum, and "cores" is all the CPU used (workers and server) over the drain's wall
time, which shows when the machine's cores, shared by the workers and the server, are
what bounds the drain.

`--against SRC` runs another copy of Conveyor's code as well (SRC is its `src` folder, say
one taken with `git archive`), each of its runs right after the matching run of this
code, and prints its rows and the ratio of this code's CPU per job to it run by run:
a comparison that the machine's load shifts far less than two separate runs.

`--profile` runs the worker under cProfile instead and prints Conveyor's 15
functions with the largest cumulative time in the event-loop thread, then the 15 (of
any code) with the most time of their own (the profiler's own overhead inflates every
figure; read it for where the time goes, not for how much).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

POSTGRES = os.environ.get(
    "CONVEYOR_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("CONVEYOR_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of_pid(pid: int) -> float | None:
    """User+sys seconds process `pid` has used so far (None once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


class ServerCpu:
    """CPU used by the server's processes while it runs, sampled every 20 ms so that
    the connections' own processes (PostgreSQL starts one per connection, and it
    ends with the worker) are counted up to their last sample."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.first: dict[int, float] = {
            pid: cpu for pid in server_pids(backend) if (cpu := cpu_of_pid(pid)) is not None
        }
        self.last = dict(self.first)

    def sample(self) -> None:
        for pid in server_pids(self.backend):
            cpu = cpu_of_pid(pid)
            if cpu is not None:
                self.first.setdefault(pid, 0.0)
                self.last[pid] = cpu

    def used(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


def server_pids(backend: str) -> list[int]:
    name = {"postgres": "postgres", "redis": "redis-server"}.get(backend)
    if name is None:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == name:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def isolated_url(backend: str, folder: Path) -> str:
    tag = uuid.uuid4().hex[:10]
    if backend == "sqlite":
        return f"sqlite:///{folder / f'cost-{tag}.db'}"
    if backend == "postgres":
        return f"{POSTGRES}?schema=cost_{tag}"
    return f"{REDIS}?prefix=cost-{tag}"


async def enqueue(url: str, task: str, jobs: int) -> None:
    os.environ["CONVEYOR_URL"] = url
    import bench_app

    bench_app.app.rebind(url)
    fn = getattr(bench_app, task)
    for start in range(0, jobs, 1000):
        await bench_app.app.enqueue_many_async(
            [fn.message(i) for i in range(start, min(start + 1000, jobs))]
        )
    await bench_app.app.aclose()


async def drop(backend: str, url: str) -> None:
    if backend == "postgres":
        import psycopg

        schema = url.rsplit("schema=", 1)[1]
        async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif backend == "redis":
        import redis.asyncio as redis

        from conveyor.backends.redis.keys import Keys

        prefix = url.rsplit("prefix=", 1)[1]
        client = redis.Redis.from_url(REDIS)
        # Conveyor's keys start with the hash tag "{prefix}:", not with the prefix.
        keys = [key async for key in client.scan_iter(Keys(prefix).pattern(), count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
        await client.aclose()


def worker_command(profile_to: Path | None) -> list[str]:
    runner = [sys.executable]
    if profile_to is not None:
        runner += ["-m", "cProfile", "-o", str(profile_to)]
    return [
        *runner,
        "-m",
        "conveyor",
        "worker",
        "bench_app:app",
        "-q",
        "bench",
        "-c",
        "200",
        "--burst",
        "--log-level",
        "warning",
    ]


def one_run(
    backend: str,
    task: str,
    jobs: int,
    folder: Path,
    profile_to: Path | None = None,
    workers: int = 1,
    src: Path | None = None,
) -> tuple[float, float, float]:
    """Worker CPU seconds (summed over `workers` processes), server CPU seconds and wall
    seconds of burst workers' run over `jobs` jobs (start and exit included). `src`:
    the workers run the Conveyor found there instead of the installed one."""
    url = isolated_url(backend, folder)
    try:
        asyncio.run(enqueue(url, task, jobs))
        server = ServerCpu(backend)
        started = time.perf_counter()
        env = {
            **os.environ,
            "CONVEYOR_URL": url,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(src) if src else None, os.environ.get("PYTHONPATH"), str(HERE)])
            ),
        }
        running = {
            subprocess.Popen(worker_command(profile_to), cwd=HERE, env=env).pid
            for _ in range(workers)
        }
        worker_cpu = 0.0
        while running:
            for pid in list(running):
                done, status, usage = os.wait4(pid, os.WNOHANG)  # the worker's own rusage
                if done:
                    running.discard(pid)
                    if os.waitstatus_to_exitcode(status) != 0:
                        raise RuntimeError(f"a worker exited {os.waitstatus_to_exitcode(status)}")
                    worker_cpu += usage.ru_utime + usage.ru_stime
            server.sample()
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        return worker_cpu, server.used(), elapsed
    finally:
        asyncio.run(drop(backend, url))


def spread(values: list[float]) -> str:
    return f"{min(values):8.1f} {statistics.median(values):8.1f} {max(values):8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="worker processes at once")
    parser.add_argument(
        "--against",
        type=Path,
        default=None,
        help="another copy's src folder, run interleaved as the reference",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="conveyor-cost-"))
    print(
        f"{args.jobs} no-op jobs per run, {args.workers} worker process(es) at -c 200, "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start"
    )
    print(
        f"{'backend':9} {'handler':7} | {'worker µs/job':^26} | {'server µs/job':^26} | "
        f"{'drain jobs/s':^26} | {'cores':^17}"
    )
    print(
        f"{'':17} | {'min':>8} {'median':>8} {'max':>8} | {'min':>8} {'median':>8} {'max':>8} "
        f"| {'min':>8} {'median':>8} {'max':>8} | {'min':>5} {'med':>5} {'max':>5}"
    )
    try:
        for backend in args.backends.split(","):
            for kind in ("async", "sync"):
                task = f"noop_{kind}"
                if args.profile:
                    out = folder / f"{backend}-{kind}.pstats"
                    one_run(backend, task, args.jobs, folder, profile_to=out)
                    print(
                        f"\n{backend} {kind}: Conveyor's 15 functions with the most cumulative "
                        "time (cProfile, the worker's event-loop thread)"
                    )
                    stats = pstats.Stats(str(out)).sort_stats("cumulative")
                    # Conveyor's own code, without the start-up (imports, CLI parsing).
                    stats.print_stats(r"/conveyor/(?!cli/|__main__|loading)", 15)
                    print(
                        f"{backend} {kind}: the 15 functions with the most time of their own "
                        "(any code: the event loop, the driver, json)"
                    )
                    stats.sort_stats("tottime").print_stats(15)
                    continue
                codes: list[Path | None] = [None] if args.against is None else [None, args.against]
                runs: dict[Path | None, list[tuple[float, float, float]]] = {c: [] for c in codes}
                base: dict[Path | None, list[tuple[float, float, float]]] = {c: [] for c in codes}
                for _ in range(args.repeat):
                    for code in codes:  # interleaved: each code's run next to the other's
                        # A worker over an empty queue: its start and exit, taken off every run.
                        base[code].append(
                            one_run(backend, task, 0, folder, workers=args.workers, src=code)
                        )
                        runs[code].append(
                            one_run(
                                backend, task, args.jobs, folder, workers=args.workers, src=code
                            )
                        )
                per_job = {}
                for code in codes:
                    base_worker, base_server, base_wall = (
                        statistics.median(c) for c in zip(*base[code], strict=True)
                    )
                    worker = [(w - base_worker) / args.jobs * 1e6 for w, _, _ in runs[code]]
                    server = [(s - base_server) / args.jobs * 1e6 for _, s, _ in runs[code]]
                    rate = [args.jobs / max(wall - base_wall, 1e-9) for _, _, wall in runs[code]]
                    cores = [
                        (w - base_worker + s - base_server) / max(wall - base_wall, 1e-9)
                        for w, s, wall in runs[code]
                    ]
                    per_job[code] = worker
                    label = kind if code is None else "  vs"
                    print(
                        f"{backend:9} {label:7} | {spread(worker)} | {spread(server)} | "
                        f"{spread(rate)} | {min(cores):5.2f} {statistics.median(cores):5.2f} "
                        f"{max(cores):5.2f}"
                    )
                if args.against is not None:
                    ratios = [
                        ours / theirs
                        for ours, theirs in zip(per_job[None], per_job[args.against], strict=True)
                    ]
                    print(
                        f"{'':9} {'ratio':7} | {min(ratios):8.2f} {statistics.median(ratios):8.2f} "
                        f"{max(ratios):8.2f} | worker CPU per job, this code / --against, "
                        f"run by run (load {os.getloadavg()[0]:.2f})"
                    )
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # the SQLite files of every run
    print(f"(start and exit taken off: a worker over an empty queue, median of {args.repeat})")


if __name__ == "__main__":
    main()

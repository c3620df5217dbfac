"""How fast a killed worker's jobs come back, and that a frozen one keeps its jobs.

    python benchmarks/liveness_bench.py                        # every backend, 20 kills each
    python benchmarks/liveness_bench.py --backends postgres --kills 5 --stops 1

Per backend, with one live worker running throughout (it does the rescuing):
* kills: a worker process running 8 jobs (lease 10 s) is SIGKILLed; the time from the
  kill to all 8 jobs `available` again, polled in the backend every 5 ms (the rescuer
  serves another queue, so it does not claim them back). p50/p95/max over the kills.
* stops: a worker running 8 jobs is SIGSTOPped for 5 s (lease 10 s), then resumed; a
  job that ran twice or has an error is a false rescue.
* idle: CPU of an idle worker over 10 s, alone and with an idle peer (whose signal it
  looks at four times a second), with liveness on and off.

Every run uses its own SQLite file, PostgreSQL schema (dropped at the end) or Redis
key prefix (deleted at the end).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

POSTGRES = os.environ.get(
    "CONVEYOR_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS = os.environ.get("CONVEYOR_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
JOBS = 8


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def serve(url: str, queue: str, liveness: bool) -> None:
    """A worker process (as `conveyor worker`, with liveness switchable)."""
    os.environ["CONVEYOR_URL"] = url
    from bench_app import app

    from conveyor.worker import Worker, WorkerConfig

    async def main() -> None:
        worker = Worker(
            app,
            WorkerConfig(
                queues=(queue,), concurrency=JOBS, lease=10.0, liveness=liveness, grace_period=5
            ),
        )
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, worker.stop)
        await worker.run()

    asyncio.run(main())


def start(url: str, queue: str, liveness: bool = True) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--url",
            url,
            "--queue",
            queue,
            "--liveness",
            "on" if liveness else "off",
        ],
        env={**os.environ, "PYTHONPATH": str(HERE)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_for(check: Any, timeout: float, what: str, interval: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def bench_backend(name: str, url: str, args: argparse.Namespace) -> dict[str, str]:
    from bench_app import hang  # for its messages; this run's own app below

    from conveyor import Conveyor
    from conveyor.backends.params import JobFilter, JobPage
    from conveyor.model.job import JobState
    from conveyor.worker.liveness import WORKERS_NAMESPACE, announced_token

    app = Conveyor(url)
    backend = await app.backend()
    await backend.migrate()

    async def count(queue: str, state: JobState) -> int:
        return await backend.count_jobs(JobFilter(states=(state,), queues=(queue,)))

    async def announced() -> int:
        records = await backend.list_records(WORKERS_NAMESPACE)
        return sum(1 for r in records.values() if announced_token(r))

    result: dict[str, str] = {}
    rescuer = start(url, "rescuer")
    try:
        await wait_for(lambda: _at_least(announced, 1), 30, "the rescuer to start")
        took: list[float] = []
        for i in range(args.kills):
            queue = f"kill-{i}"
            await app.enqueue_many_async(
                [hang.options(queue=queue).message(600.0) for _ in range(JOBS)]
            )
            victim = start(url, queue)
            await wait_for(
                lambda: _equals(count(queue, JobState.RUNNING), JOBS),  # noqa: B023 (awaited in this iteration)
                60,
                "the victim to run its jobs",
                interval=0.05,
            )
            killed_at = time.monotonic()
            victim.send_signal(signal.SIGKILL)
            await wait_for(
                lambda: _equals(count(queue, JobState.AVAILABLE), JOBS),  # noqa: B023 (awaited in this iteration)
                30,
                "the jobs to be available again",
            )
            took.append(time.monotonic() - killed_at)
            victim.wait(10)
            for job in await backend.list_jobs(
                JobPage(where=JobFilter(queues=(queue,)), limit=100)
            ):
                await backend.cancel_job(job.id)
        if took:
            result["kill -> 8 jobs available"] = (
                f"p50 {percentile(took, 50) * 1000:.0f} ms,"
                f" p95 {percentile(took, 95) * 1000:.0f} ms,"
                f" max {max(took) * 1000:.0f} ms over {len(took)} kills"
            )
        false_rescues = 0
        for i in range(args.stops):
            queue = f"stop-{i}"
            handles = await app.enqueue_many_async(
                [hang.options(queue=queue).message(8.0) for _ in range(JOBS)]
            )
            victim = start(url, queue)
            await wait_for(
                lambda: _equals(count(queue, JobState.RUNNING), JOBS),  # noqa: B023 (awaited in this iteration)
                60,
                "the frozen worker to run its jobs",
                interval=0.05,
            )
            victim.send_signal(signal.SIGSTOP)
            await asyncio.sleep(5.0)
            victim.send_signal(signal.SIGCONT)
            await wait_for(
                lambda: _equals(count(queue, JobState.COMPLETED), JOBS),  # noqa: B023 (awaited in this iteration)
                60,
                "the frozen worker's jobs to complete",
                interval=0.05,
            )
            for handle in handles:
                job = await backend.get_job(handle.id)
                assert job is not None
                false_rescues += job.attempt != 1 or bool(job.errors)
            stop(victim)
        if args.stops:
            result["SIGSTOP 5 s, lease 10 s: jobs rescued"] = (
                f"{false_rescues} of {args.stops * JOBS} (in {args.stops} freezes)"
            )
    finally:
        stop(rescuer)
    if args.idle:
        for liveness in (True, False):
            result[f"idle worker CPU, liveness {'on' if liveness else 'off'}"] = await idle_cpu(
                url, liveness, announced
            )
    await app.aclose()
    return result


async def idle_cpu(url: str, liveness: bool, announced: Any) -> str:
    figures = []
    for peers in (0, 1):
        procs = [start(url, "idle", liveness) for _ in range(1 + peers)]
        try:
            await asyncio.sleep(3.0)  # started and settled
            before = cpu_seconds(procs[0].pid)
            await asyncio.sleep(10.0)
            used = cpu_seconds(procs[0].pid) - before
            figures.append(f"{used / 10.0:.2%} of a core {'alone' if not peers else 'with a peer'}")
        finally:
            for proc in procs:
                stop(proc)
    return ", ".join(figures)


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)


async def _equals(value: Any, n: int) -> bool:
    return bool(await value == n)


async def isolated_url(name: str, folder: str) -> str:
    if name == "sqlite":
        return f"sqlite:///{folder}/bench.db"
    if name == "postgres":
        return f"{POSTGRES}?schema=bench_live_{uuid.uuid4().hex[:8]}"
    return f"{REDIS}?prefix=bench-live-{uuid.uuid4().hex[:8]}"


async def clean_up(name: str, url: str) -> None:
    if name == "postgres":
        import psycopg

        from conveyor.backends.postgres.config import parse_postgres_url

        schema = parse_postgres_url(url).schema
        async with await psycopg.AsyncConnection.connect(POSTGRES, autocommit=True) as conn:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif name == "redis":
        from conveyor.backends.redis.backend import RedisBackend

        backend = RedisBackend(url)
        await backend.open()
        await backend.delete_all_keys()
        await backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres,redis")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--stops", type=int, default=2)
    parser.add_argument("--no-idle", dest="idle", action="store_false")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--queue", help=argparse.SUPPRESS)
    parser.add_argument("--liveness", default="on", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.url, args.queue, args.liveness == "on")
        return
    for name in args.backends.split(","):
        with tempfile.TemporaryDirectory() as folder:
            url = asyncio.run(isolated_url(name, folder))
            try:
                rows = asyncio.run(bench_backend(name, url, args))
            finally:
                asyncio.run(clean_up(name, url))
        for what, figure in rows.items():
            print(f"{name:8}  {what}: {figure}", flush=True)


if __name__ == "__main__":
    main()

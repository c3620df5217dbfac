"""A worker process for the many-process tests and the benchmark.

    python pg_worker_main.py URL --concurrency 10 --lease 2 --rescue 0.5 [--runs-table s.runs]

Task `record(n, sleep=0)`: inserts (job id, pid) into --runs-table on a
connection of its own (autocommit, outside the job's completion), so a second
run of a job shows up as a second row. Task `noop()`: does nothing. Prints
"ready" once the worker has started; SIGTERM drains and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Any

import psycopg

from conveyor import Conveyor, current_job
from conveyor.backends.params import JobWait
from conveyor.worker import ExitStatus, Worker, WorkerConfig


def build(url: str, runs_table: str | None) -> Conveyor:
    app = Conveyor(url)
    conn: dict[str, Any] = {}

    @app.task(name="record")
    async def record(n: int, sleep: float = 0.0) -> int:
        if "c" not in conn:
            conn["c"] = await psycopg.AsyncConnection.connect(url.split("?")[0], autocommit=True)
        await conn["c"].execute(
            f"INSERT INTO {runs_table} (job_id, pid) VALUES (%s, %s)",
            (current_job().id, os.getpid()),
        )
        if sleep:
            await asyncio.sleep(sleep)
        return n

    @app.task(name="noop")
    async def noop() -> None:
        return None

    return app


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--rescue", type=float, default=5.0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--runs-table")
    args = parser.parse_args()
    app = build(args.url, args.runs_table)
    worker = Worker(
        app,
        WorkerConfig(
            concurrency=args.concurrency,
            lease=args.lease,
            rescue_interval=args.rescue,
            poll_interval=args.poll,
            grace_period=10,
        ),
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    loop.add_signal_handler(signal.SIGINT, worker.stop)
    backend = await app.backend()
    await backend.wait_for_jobs(
        JobWait(queues=("default",), timeout=0)
    )  # start the listener before "ready"
    print("ready", flush=True)
    status = await worker.run()
    await app.aclose()
    return 0 if status is ExitStatus.DRAINED else int(status)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

"""Test-only worker entry point, for what the public CLI deliberately does not offer:
CONVEYOR_TEST_HEARTBEATS=0 runs a worker that never renews its leases (a stalled
worker, without the timing games of a GIL-holding handler), and --rescue sets the
rescuer's interval.

    python run_worker.py faults_app:app [-p N] [-c N] [--lease S] [--grace S]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from conveyor.ops.loading import load_app
from conveyor.worker import ExitStatus, Worker, WorkerConfig
from conveyor.worker.pool.config import PoolConfig
from conveyor.worker.pool.supervisor import run_pool


async def serve(worker: Worker) -> ExitStatus:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop)
    try:
        return await worker.run()
    finally:
        # Ignored for mypy: the app behind WorkerApp has aclose()
        await worker.app.aclose()  # type: ignore[attr-defined]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("app")
    parser.add_argument("-p", "--processes", type=int, default=0)
    parser.add_argument("-c", "--concurrency", type=int, default=4)
    parser.add_argument("-q", "--queues", default="default")
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--grace", type=float, default=30.0)
    parser.add_argument("--rescue", type=float, default=5.0)
    parser.add_argument("--max-tasks-per-child", type=int)
    parser.add_argument("--max-memory-per-child", type=int)
    args = parser.parse_args()
    logging.basicConfig(
        level="INFO",
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s",
    )
    sys.path.insert(0, os.getcwd())
    config = WorkerConfig(
        queues=tuple(args.queues.split(",")),
        concurrency=args.concurrency,
        lease=args.lease,
        grace_period=args.grace,
        rescue_interval=args.rescue,
        poll_interval=0.2,
        heartbeats=os.environ.get("CONVEYOR_TEST_HEARTBEATS", "1") != "0",
    )
    app = load_app(args.app)
    if args.processes:
        pool = PoolConfig(
            processes=args.processes,
            max_tasks_per_child=args.max_tasks_per_child,
            max_memory_per_child=args.max_memory_per_child,
        )
        return int(run_pool(app, args.app, config, pool))
    status = asyncio.run(serve(Worker(app, config)))
    sys.stderr.flush()
    os._exit(int(status))


if __name__ == "__main__":
    raise SystemExit(main())

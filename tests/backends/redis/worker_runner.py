"""One worker process for the multi-process tests and the benchmark.

    python worker_runner.py URL [--concurrency N] [--lease S] [--rescue S] [--sleep S]

Tasks:
* `record(n)`: HINCRBY `{prefix}:test:runs` n 1 (how many times job n ran), then
  sleeps `--sleep` seconds (to keep jobs in flight for kill tests).
* `noop()`: nothing (throughput).
* `stamp(n)`: RPUSH `{prefix}:test:stamps` "n <time.time()>" (pickup latency).
SIGTERM drains and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from urllib.parse import parse_qs, urlsplit

import redis.asyncio as aioredis

from conveyor import Conveyor
from conveyor.worker import Worker, WorkerConfig


def scratch_key(url: str, name: str) -> str:
    prefix = parse_qs(urlsplit(url).query).get("prefix", ["conveyor"])[-1]
    return "{" + prefix + "}:test:" + name


def build_app(url: str, sleep: float = 0.0) -> Conveyor:
    app = Conveyor(url)
    driver_url = urlsplit(url)._replace(query="").geturl()
    clients: dict[int, aioredis.Redis] = {}
    runs_key, stamps_key = scratch_key(url, "runs"), scratch_key(url, "stamps")

    def client() -> aioredis.Redis:
        loop_id = id(asyncio.get_running_loop())
        if loop_id not in clients:
            clients[loop_id] = aioredis.Redis.from_url(driver_url)
        return clients[loop_id]

    @app.task(name="record")
    async def record(n: int) -> None:
        await client().hincrby(runs_key, str(n), 1)
        if sleep:
            await asyncio.sleep(sleep)

    @app.task(name="noop")
    async def noop() -> None:
        return None

    @app.task(name="stamp")
    async def stamp(n: int) -> None:
        await client().rpush(stamps_key, f"{n} {time.time()!r}")

    return app


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--rescue", type=float, default=5.0)
    parser.add_argument("--poll", type=float, default=1.0)
    parser.add_argument("--fetch-batch", type=int, default=200)
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args(argv)
    app = build_app(args.url, args.sleep)
    worker = Worker(
        app,
        WorkerConfig(
            concurrency=args.concurrency,
            lease=args.lease,
            rescue_interval=args.rescue,
            poll_interval=args.poll,
            fetch_batch=args.fetch_batch,
            grace_period=10.0,
        ),
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    print("worker ready", flush=True)
    status = await worker.run()
    await app.aclose()
    return int(status)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))

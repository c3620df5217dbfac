"""Workers on other hosts, simulated: the throughput benchmarks over a link with added delay.

    python benchmarks/delayed_link.py                        # direct, 0, 1, 5 ms; PostgreSQL, Redis
    python benchmarks/delayed_link.py --backends redis --delays direct,5 --repeat 3
    python benchmarks/delayed_link.py --proxy 127.0.0.1:5432 --rtt-ms 1   # only the proxy

This machine's kernel has no `netem` qdisc, so the delay comes from a small TCP proxy on
loopback (below, started and stopped here, one process per server) between every client
and the server: PostgreSQL 127.0.0.1:5432 (db test, user postgres) and Redis
127.0.0.1:6379. Each chunk the proxy reads is written on after half the added round trip,
in each direction. Chunks wait in a per-direction queue with their release time, so the
link keeps its order and its throughput (a burst of chunks leaves a burst later), as a long
cable does; one sleep per chunk would instead serialise them. The proxy's loop uses the
select() selector: epoll's timeout is in whole milliseconds, which would turn a 0.5 ms
wait into 1 ms.

Per backend and delay ("direct": no proxy; "0": through the proxy with no added delay, the
proxy's own cost; "1", "5": 1 ms and 5 ms of added round trip):
  * the link's round trip: 200 `SELECT 1` / `PING` on one connection, median and p99;
  * `benchmarks/throughput.py --url <through the proxy> --workers 1 --concurrency 200`
    (enqueue one by one, `enqueue_many` of 1,000, drain of 20,000 no-op jobs by one worker
    process, idle pickup latency), on a fresh PostgreSQL schema / Redis prefix;
  * `benchmarks/enqueue_cost.py` through the proxy (with `--enqueue-cost`): enqueues against
    the bare write's floor over the same link.
Every process (the enqueuer, the worker, the floor's connection) goes through the proxy.
`--repeat` runs each (backend, delay) that many times, interleaved, and prints the ranges.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import selectors
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVERS = {"postgres": ("127.0.0.1", 5432), "redis": ("127.0.0.1", 6379)}
CHUNK = 256 * 1024


# ---- the proxy -------------------------------------------------------------------------


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, one_way: float) -> None:
    """Forward reader -> writer, each chunk released `one_way` seconds after it was read."""
    loop = asyncio.get_running_loop()
    pending: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        while data := await reader.read(CHUNK):
            pending.put_nowait((loop.time() + one_way, data))
        pending.put_nowait((loop.time() + one_way, b""))  # the end, delayed as data is

    async def write() -> None:
        while True:
            release, data = await pending.get()
            if (wait := release - loop.time()) > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    reading = asyncio.create_task(read())
    try:
        await write()
    finally:
        reading.cancel()


async def relay(
    client_r: asyncio.StreamReader,
    client_w: asyncio.StreamWriter,
    target: tuple[str, int],
    one_way: float,
) -> None:
    try:
        server_r, server_w = await asyncio.open_connection(*target)
    except OSError:
        client_w.close()
        return
    try:
        # Both directions run until each has seen its end; a reset ends both.
        await asyncio.gather(pump(client_r, server_w, one_way), pump(server_r, client_w, one_way))
    except (ConnectionError, OSError, asyncio.CancelledError):
        pass  # a reset ends the connection; the proxy stopping cancels it
    finally:
        for w in (client_w, server_w):
            w.close()


async def serve_proxy(target: tuple[str, int], rtt: float) -> None:
    server = await asyncio.start_server(lambda r, w: relay(r, w, target, rtt / 2), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)  # the port, for whoever started us
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()


def run_proxy(target: tuple[str, int], rtt: float) -> None:
    with asyncio.Runner(
        loop_factory=lambda: asyncio.SelectorEventLoop(selectors.SelectSelector())
    ) as runner:
        runner.run(serve_proxy(target, rtt))


@contextmanager
def proxied(backend: str, rtt_ms: float) -> Iterator[int]:
    """A proxy process to `backend`'s server adding `rtt_ms`; yields its port."""
    host, port = SERVERS[backend]
    proc = subprocess.Popen(
        [sys.executable, __file__, "--proxy", f"{host}:{port}", "--rtt-ms", str(rtt_ms)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


# ---- the measurements ------------------------------------------------------------------


def url_for(backend: str, port: int, tag: str) -> str:
    if backend == "postgres":
        return f"postgresql://postgres@127.0.0.1:{port}/test?schema=bench_link_{tag}"
    return f"redis://127.0.0.1:{port}/0?prefix=bench-link-{tag}:"


def round_trips(backend: str, port: int, n: int = 200) -> list[float]:
    """Milliseconds of each of `n` trivial round trips on one connection."""
    if backend == "postgres":
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/test", autocommit=True) as c:
            c.execute("SELECT 1")  # connected, and the statement prepared server side
            return [timed_ms(lambda: c.execute("SELECT 1").fetchone()) for _ in range(n)]
    import redis

    client = redis.Redis(host="127.0.0.1", port=port)
    client.ping()
    try:
        return [timed_ms(client.ping) for _ in range(n)]
    finally:
        client.close()


def timed_ms(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) * 1000


def cleanup(backend: str, tag: str) -> None:
    """Drop what a throughput run left, over a direct connection."""
    if backend == "postgres":
        import psycopg

        with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "bench_link_{tag}" CASCADE')
        return
    import redis

    from conveyor.backends.redis.keys import Keys

    client = redis.Redis(host="127.0.0.1", port=6379)
    keys = list(client.scan_iter(Keys(f"bench-link-{tag}:").pattern(), count=1000))
    for start in range(0, len(keys), 1000):
        client.unlink(*keys[start : start + 1000])
    client.close()


PATTERNS = {
    "one by one": r"enqueue one by one \(sync API\)\s+([\d,]+) jobs/s",
    "batch ms": r"enqueue batch of 1,000\s+median ([\d.]+) ms",
    "drain async": r"drain [\d,]+ async no-op jobs.*?([\d,]+) jobs/s",
    "drain sync": r"drain [\d,]+ sync no-op jobs.*?([\d,]+) jobs/s",
    "pickup p50": r"p50 ([\d.]+) ms",
    "pickup p99": r"p99 ([\d.]+) ms",
}


def throughput(backend: str, port: int, jobs: int, one_by_one: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    try:
        out = subprocess.run(
            [
                sys.executable,
                str(HERE / "throughput.py"),
                "--url",
                url_for(backend, port, tag),
                "--workers",
                "1",
                "--concurrency",
                "200",
                "--jobs",
                str(jobs),
                "--one-by-one",
                str(one_by_one),
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        ).stdout
    finally:
        cleanup(backend, tag)
    figures = {
        k: float(re.search(p, out).group(1).replace(",", ""))  # type: ignore[union-attr]
        for k, p in PATTERNS.items()
    }
    figures["bulk"] = 1000 / figures.pop("batch ms") * 1000
    return figures


def enqueue_cost(backend: str, port: int, jobs: int) -> list[str]:
    env = {
        **os.environ,
        "CONVEYOR_BENCH_POSTGRES_URL": f"postgresql://postgres@127.0.0.1:{port}/test",
        "CONVEYOR_BENCH_REDIS_URL": f"redis://127.0.0.1:{port}/0",
    }
    out = subprocess.run(
        [
            sys.executable,
            str(HERE / "enqueue_cost.py"),
            "--backends",
            backend,
            "--jobs",
            str(jobs),
            "--repeat",
            "1",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    ).stdout
    return [line for line in out.splitlines() if line.startswith(backend)]


@contextmanager
def link(backend: str, delay: str) -> Iterator[int]:
    if delay == "direct":
        yield SERVERS[backend][1]
    else:
        with proxied(backend, float(delay)) as port:
            yield port


def load() -> str:
    return "load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])


def spread(values: list[float], fmt: str = ",.0f") -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{min(values):{fmt}}-{max(values):{fmt}}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="postgres,redis")
    parser.add_argument(
        "--delays",
        default="direct,0,1,5",
        help="added round trips in ms; 'direct' bypasses the proxy",
    )
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--one-by-one", type=int, default=1000, help="jobs enqueued one by one")
    parser.add_argument(
        "--enqueue-cost",
        type=int,
        default=0,
        metavar="N",
        help="also run enqueue_cost.py with N one-by-one jobs (0: skip)",
    )
    parser.add_argument("--proxy", help=argparse.SUPPRESS)
    parser.add_argument("--rtt-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.proxy:
        host, port = args.proxy.rsplit(":", 1)
        run_proxy((host, int(port)), args.rtt_ms / 1000)
        return

    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_no in range(args.repeat):
        for backend in args.backends.split(","):
            for delay in args.delays.split(","):
                with link(backend, delay) as port:
                    rtts = round_trips(backend, port)
                    before = load()
                    figures = throughput(backend, port, args.jobs, args.one_by_one)
                    figures["rtt p50"] = statistics.median(rtts)
                    figures["rtt p99"] = sorted(rtts)[int(0.99 * (len(rtts) - 1))]
                    results.setdefault((backend, delay), []).append(figures)
                    print(
                        f"round {round_no + 1} {backend:8} {delay:>6}: "
                        + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
                        + f" ({before}, after: {load()})",
                        flush=True,
                    )
                    if args.enqueue_cost:
                        for line in enqueue_cost(backend, port, args.enqueue_cost):
                            print(f"    {delay:>6} {line}  ({load()})", flush=True)

    print(f"\n{args.repeat} run(s) each, range min-max; {os.cpu_count()} cores")
    print(
        f"{'backend':8} {'delay':>6} | {'RTT p50/p99 ms':>15} | {'drain async':>13} | "
        f"{'drain sync':>13} | {'one by one':>11} | {'bulk 1,000':>13} | pickup p50 / p99 ms"
    )
    for (backend, delay), runs in results.items():
        col = {k: [r[k] for r in runs] for k in runs[0]}
        print(
            f"{backend:8} {delay:>6} | {spread(col['rtt p50'], '.2f'):>7}/"
            f"{spread(col['rtt p99'], '.2f'):<7} | {spread(col['drain async']):>13} | "
            f"{spread(col['drain sync']):>13} | {spread(col['one by one']):>11} | "
            f"{spread(col['bulk']):>13} | {spread(col['pickup p50'], '.2f')} / "
            f"{spread(col['pickup p99'], '.2f')}"
        )


if __name__ == "__main__":
    main()

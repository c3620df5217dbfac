"""What flow control costs (docs/flow-control.md): claim throughput with weighted queues
and priority aging, with tenant fairness, with concurrency keys and with rate limits,
against the plain claim, at several numbers of waiting jobs; enqueue throughput into a
bounded queue against an unbounded one; and the CPU of an idle worker whose jobs are all
throttled.

    python benchmarks/flow_claims.py                                  # SQLite in a temp dir
    python benchmarks/flow_claims.py --url postgresql://postgres@127.0.0.1/test
    python benchmarks/flow_claims.py --url redis://127.0.0.1:6379/0 --waiting 10000 100000

Claims: `--claims` claims of `--batch` jobs each, by one claimer, from queues holding
`--waiting` jobs. "plain": one queue, no aging (strict order). "weighted+aging": three
queues served critical=6,default=3,bulk=1 (the worker's slot shares, every slot free),
every job with aging 60 s and a priority from 0 to 9. "fair": the plain queue, every job
with one of `--keys` fairness keys (round robin; every tenth key of weight 3, the others
1). "weighted+fair": the three weighted queues, with those keys, no aging. "keys": the
plain queue, every job with a concurrency key of limit 1: half of them one hot key (at
its limit after the first claim, its other jobs parked), the other half a key each
(user:<n>), so the claims take those while the hot key's backlog waits. The jobs are
claimed, not run, then completed (timed apart). "weighted+fair+rate": weighted+fair with
every job also naming a rate limit bucket that never binds (1,000,000/s), which each
claim locks, spends and writes back. "throttled beside": the plain claim of jobs with no
limit from a queue that also holds --waiting jobs of a throttled bucket (empty, 1/h)
ahead of them in claim order. `--modes` picks which run (default all); `--no-enqueue`
skips the enqueue figures. Idle CPU (`--idle-seconds`, 0: skip): one worker (in this
process, -c 10) whose queue holds 1,000 jobs of a 1/m bucket (its first claim takes the
one token): the process's CPU time over wall time, and its claims.
Enqueue: `--enqueues` jobs one by one into a queue already holding --bound - 1000 jobs,
with and without max_waiting=--bound (reject).

Each figure is the median of --repeat runs, each on a fresh store (a fresh PostgreSQL
schema, a fresh Redis prefix).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

from conveyor import Limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from conveyor import Conveyor
from conveyor.backends.claiming import QueuePlan
from conveyor.backends.params import Settlement
from conveyor.model.job import Job, JobState, NewJob, QueueBound
from conveyor.rules.rate_limits import RateLimit
from conveyor.worker import Worker, WorkerConfig

PAYLOAD = '{"args":[],"kwargs":{}}'
QUEUES, WEIGHTS = ("critical", "default", "bulk"), (6.0, 3.0, 1.0)


def isolated(url: str | None, folder: Path) -> str:
    name = uuid.uuid4().hex[:10]
    if url is None:
        return f"sqlite:///{folder / f'{name}.db'}"
    if url.startswith("postgresql"):
        return f"{url}{'&' if '?' in url else '?'}schema=bench_{name}"
    if url.startswith("redis"):
        return f"{url}{'&' if '?' in url else '?'}prefix=bench-{name}"
    if url.startswith("memory"):
        return f"memory://bench-{name}"
    return url


async def cleanup(app: Conveyor, url: str) -> None:
    backend = await app.backend()
    if url.startswith("redis"):
        # Twice: an enqueue cut off by a cancel may still be arriving on its old
        # connection, and land behind the first sweep's cursor.
        for _ in range(2):
            await backend.delete_all_keys()  # type: ignore[attr-defined]
    elif url.startswith("memory"):
        from conveyor.backends.memory.registry import drop_store

        drop_store(url)
    elif url.startswith("postgresql"):
        import psycopg

        from conveyor.backends.postgres.config import parse_postgres_url

        config = parse_postgres_url(url)
        async with await psycopg.AsyncConnection.connect(url.split("?")[0], autocommit=True) as c:
            await c.execute(f'DROP SCHEMA IF EXISTS "{config.schema}" CASCADE')


MODES = (
    "plain",
    "fair",
    "weighted+aging",
    "weighted+fair",
    "keys",
    "weighted+fair+rate",
    "throttled beside",
)
NEVER_BINDS = RateLimit("bench", rate=1_000_000.0, burst=1_000_000)
THROTTLED = RateLimit("throttled", rate=1 / 3600, burst=1)
LIMITS = {"weighted+fair+rate": (NEVER_BINDS,), "throttled beside": (THROTTLED,)}


def bench_job(n: int, mode: str, keys: int) -> NewJob:
    if mode == "weighted+fair+rate":
        return replace(bench_job(n, "weighted+fair", keys), rate_key="bench")
    if mode == "throttled beside":
        return replace(bench_job(n, "plain", keys), rate_key="throttled")
    if mode == "plain":
        return NewJob(id=f"j{n}", task="bench.noop", payload=PAYLOAD, queue="plain")
    if mode == "weighted+aging":
        return NewJob(
            id=f"j{n}",
            task="bench.noop",
            payload=PAYLOAD,
            queue=QUEUES[n % 3],
            priority=n % 10,
            aging=60.0,
        )
    if mode == "keys":
        return NewJob(
            id=f"j{n}",
            task="bench.noop",
            payload=PAYLOAD,
            queue="plain",
            concurrency_key="hot" if n % 2 == 0 else f"user:{n}",
            concurrency_limit=1,
        )
    key = n % keys
    return NewJob(
        id=f"j{n}",
        task="bench.noop",
        payload=PAYLOAD,
        queue="plain" if mode == "fair" else QUEUES[n % 3],
        fairness_key=f"tenant:{key}",
        fairness_weight=3.0 if key % 10 == 0 else None,
    )


async def fill(app: Conveyor, waiting: int, mode: str, keys: int, free: int) -> None:
    backend = await app.backend()
    for start in range(0, waiting, 2000):
        await backend.enqueue_jobs(
            [bench_job(n, mode, keys) for n in range(start, min(waiting, start + 2000))]
        )
    if mode == "throttled beside":  # behind the throttled backlog in claim order
        for start in range(0, free, 2000):
            await backend.enqueue_jobs(
                [
                    NewJob(id=f"f{n}", task="bench.noop", payload=PAYLOAD, queue="plain")
                    for n in range(start, min(free, start + 2000))
                ]
            )


async def analyze(url: str) -> None:
    """PostgreSQL: ANALYZE the filled table, as autovacuum soon does to any table in use.
    A claim of a freshly filled, never analysed table is planned from guesses, and
    whether autovacuum's analyse lands during the run swung a mode's figure up to
    fourfold between runs."""
    if not url.startswith("postgresql"):
        return
    import psycopg

    from conveyor.backends.postgres.config import parse_postgres_url

    schema = parse_postgres_url(url).schema
    async with await psycopg.AsyncConnection.connect(url.split("?")[0], autocommit=True) as c:
        await c.execute(f'ANALYZE "{schema}".jobs')


async def claim_rate(
    url: str, waiting: int, mode: str, claims: int, batch: int, keys: int
) -> tuple[float, float]:
    """Jobs claimed a second, then jobs completed a second (the claimed ones, in
    batches of `batch`: with concurrency keys, each completion frees a slot)."""
    app = Conveyor(url)
    try:
        await fill(app, waiting, mode, keys, claims * batch)
        await analyze(url)
        backend = await app.backend()
        weighted = mode.startswith("weighted")
        plan = QueuePlan(QUEUES, WEIGHTS, slots=batch) if weighted else QueuePlan(["plain"])
        limits = LIMITS.get(mode, ())
        if mode == "throttled beside":  # spend the throttled bucket's one token first
            await backend.fetch_jobs(plan.request(1, "bench", 60, rate_limits=limits))
        started = time.perf_counter()
        got: list[Job] = []
        for _ in range(claims):
            request = plan.request(
                batch, "bench", 60, running={} if weighted else None, rate_limits=limits
            )
            got += await backend.fetch_jobs(request)
        elapsed = time.perf_counter() - started
        assert len(got) == claims * batch, f"claimed {len(got)} of {claims * batch}"
        started = time.perf_counter()
        for at in range(0, len(got), batch):
            stale = await backend.settle_jobs(
                [
                    Settlement(j.id, j.lease_token, JobState.COMPLETED, result="null")
                    for j in got[at : at + batch]
                ]
            )
            assert not stale
        return len(got) / elapsed, len(got) / (time.perf_counter() - started)
    finally:
        await cleanup(app, url)
        await app.aclose()


async def enqueue_rate(url: str, bound: int, enqueues: int, bounded: bool) -> float:
    app = Conveyor(url)
    try:
        backend = await app.backend()
        for start in range(0, bound - 1000, 2000):
            await backend.enqueue_jobs(
                [
                    NewJob(id=f"pre{n}", task="bench.noop", queue="q", payload=PAYLOAD)
                    for n in range(start, min(bound - 1000, start + 2000))
                ]
            )
        limit = QueueBound(bound) if bounded else None
        started = time.perf_counter()
        for n in range(enqueues):
            await backend.enqueue_jobs(
                [NewJob(id=f"e{n}", task="bench.noop", queue="q", payload=PAYLOAD, bound=limit)]
            )
        return enqueues / (time.perf_counter() - started)
    finally:
        await cleanup(app, url)
        await app.aclose()


async def idle_cpu(url: str, seconds: float) -> tuple[float, int]:
    """CPU share of one idle worker whose every job is throttled, and its claims."""
    app = Conveyor(url)
    try:

        @app.task(name="bench.throttled", queue="throttled", limits=Limits(rate_limit="1/m"))
        def throttled() -> None: ...

        await app.enqueue_many_async([throttled.message() for _ in range(1000)])
        backend = await app.backend()
        claims = 0
        fetch = backend.fetch_jobs

        async def counted(request):  # type: ignore[no-untyped-def]
            nonlocal claims
            claims += 1
            return await fetch(request)

        backend.fetch_jobs = counted  # type: ignore[method-assign]
        worker = Worker(app, WorkerConfig(queues=("throttled",), concurrency=10, scheduler=False))
        run = asyncio.create_task(worker.run())
        await asyncio.sleep(2.0)  # started, the one token spent
        claims, cpu, wall = 0, time.process_time(), time.perf_counter()
        await asyncio.sleep(seconds)
        share = (time.process_time() - cpu) / (time.perf_counter() - wall)
        worker.stop()
        await run
        return share, claims
    finally:
        await cleanup(app, url)
        await app.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default=None)
    parser.add_argument("--waiting", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--bound", type=int, default=10_000)
    parser.add_argument("--enqueues", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--no-enqueue", action="store_true")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    args = parser.parse_args()
    # SIGTERM (a timeout, a kill) cancels the run as Ctrl-C does, so the run under way
    # still drops its schema or deletes its Redis keys in its `finally`.
    running = asyncio.current_task()
    assert running is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, running.cancel)
    with tempfile.TemporaryDirectory() as folder:

        def fresh() -> str:
            return isolated(args.url, Path(folder))

        print(
            f"backend: {fresh().split(':')[0]}; claims of {args.batch}, {args.claims} per run, "
            f"median of {args.repeat}"
        )
        for waiting in args.waiting:
            rates = {}
            for mode in args.modes:
                both = [
                    await claim_rate(fresh(), waiting, mode, args.claims, args.batch, args.keys)
                    for _ in range(args.repeat)
                ]
                runs, done = [b[0] for b in both], [b[1] for b in both]
                rates[mode] = statistics.median(runs)
                print(
                    f"  {waiting:>9,} waiting  {mode:>18}: {rates[mode]:>9,.0f} jobs/s claimed"
                    f"  (runs {', '.join(f'{r:,.0f}' for r in runs)}); "
                    f"{statistics.median(done):,.0f} completed/s"
                    f"  (runs {', '.join(f'{r:,.0f}' for r in done)})",
                    flush=True,
                )
            for mode in rates:
                if mode != "plain" and "plain" in rates:
                    print(
                        f"  {waiting:>9,} waiting  {mode} / plain = "
                        f"{rates[mode] / rates['plain']:.0%}"
                    )
        if args.idle_seconds > 0:
            idle = [await idle_cpu(fresh(), args.idle_seconds) for _ in range(args.repeat)]
            print(
                f"  idle worker, every job throttled: {statistics.median(s for s, _ in idle):.2%} "
                f"of a core  (runs {', '.join(f'{s:.2%}' for s, _ in idle)}; claims in "
                f"{args.idle_seconds:g} s: {', '.join(str(c) for _, c in idle)})",
                flush=True,
            )
        for bounded in () if args.no_enqueue else (False, True):
            runs = [
                await enqueue_rate(fresh(), args.bound, args.enqueues, bounded)
                for _ in range(args.repeat)
            ]
            print(
                f"  enqueue one by one at depth {args.bound - 1000:,}, "
                f"{'max_waiting=' + format(args.bound, ',') if bounded else 'unbounded':>17}: "
                f"{statistics.median(runs):>7,.0f} jobs/s"
                f"  (runs {', '.join(f'{r:,.0f}' for r in runs)})"
            )


if __name__ == "__main__":
    asyncio.run(main())

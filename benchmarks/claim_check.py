"""Claim latency of small jobs queued next to 10 MB ones, with and without the
claim-check (conveyor.payloads.claim_check).

    python benchmarks/claim_check.py                       # embedded SQLite, 5 runs
    python benchmarks/claim_check.py --url postgresql://localhost/test?schema=bench
    python benchmarks/claim_check.py --runs 3 --big 4 --small 200 --size-mb 10

Each run enqueues `--big` jobs with a `--size-mb` argument spread among `--small`
jobs with a tiny one, in one queue, then drains it with claims of `--batch` jobs
(each claimed job is settled at once, no handler), timing every claim. "inline"
keeps every payload in the job row (the threshold set above max_payload: what
Conveyor did before); "claim-check" uses the default 256 KB threshold. Printed:
per run, the median and the slowest claim, and the enqueue time; then the range
over runs. The worker's read of a blob happens after the claim, per job, and is
not in these figures (it is printed separately: "blob read").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.model.job import JobState

HUGE = 2**40


async def one_run(
    url: str, inline: bool, big: int, small: int, size: int, batch: int
) -> dict[str, float]:
    app = (
        Conveyor(url, claim_check_threshold=HUGE, max_payload=HUGE)
        if inline
        else Conveyor(url, max_payload=HUGE)
    )

    @app.task(name="bench.blob", queue="cc-bench")
    def blob(data: str) -> None: ...

    try:
        backend = await app.backend()
        every = max(1, small // max(1, big))
        messages = []
        for i in range(small):
            messages.append(blob.message(f"small-{i}"))
            if i % every == 0 and len([m for m in messages if len(m.payload) > 1000]) < big:
                messages.append(blob.message("x" * size))
        started = time.perf_counter()
        for message in messages:  # one by one, as producers do
            await app.enqueue_many_async([message])
        enqueue_s = time.perf_counter() - started
        claims: list[float] = []
        read_s = 0.0
        while True:
            started = time.perf_counter()
            jobs = await backend.fetch_jobs(strict_claim(["cc-bench"], batch, "bench", 300.0))
            claims.append(time.perf_counter() - started)
            if not jobs:
                break
            started = time.perf_counter()
            for job in jobs:
                await app.claim_check.arguments_text(job)  # what the worker reads after
            read_s += time.perf_counter() - started
            await backend.settle_jobs(
                [Settlement(j.id, j.lease_token, JobState.COMPLETED) for j in jobs]
            )
        return {
            "median_ms": statistics.median(claims) * 1000,
            "max_ms": max(claims) * 1000,
            "enqueue_s": enqueue_s,
            "read_s": read_s,
        }
    finally:
        await app.aclose()


def span(values: list[float], unit: str, digits: int = 1) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f} {unit}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a backend URL (default: a temp SQLite file per run)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--big", type=int, default=4)
    parser.add_argument("--small", type=int, default=200)
    parser.add_argument("--size-mb", type=float, default=10.0)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    size = int(args.size_mb * 1024 * 1024)
    print(
        f"{args.big} jobs of {args.size_mb:g} MB among {args.small} small ones, claims of "
        f"{args.batch}, {args.runs} runs each"
    )
    for inline in (True, False):
        label = "inline     " if inline else "claim-check"
        results = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory() as tmp:
                url = args.url or f"sqlite:///{Path(tmp) / 'jobs.db'}"
                results.append(await one_run(url, inline, args.big, args.small, size, args.batch))
        for r in results:
            print(
                f"  {label} claim median {r['median_ms']:7.2f} ms  slowest "
                f"{r['max_ms']:8.2f} ms  enqueue {r['enqueue_s']:5.2f} s  "
                f"blob read {r['read_s']:5.2f} s"
            )
        print(
            f"{label} over runs: claim median {span([r['median_ms'] for r in results], 'ms', 2)}, "
            f"slowest claim {span([r['max_ms'] for r in results], 'ms')}, "
            f"enqueue {span([r['enqueue_s'] for r in results], 's', 2)}"
        )


if __name__ == "__main__":
    asyncio.run(main())

"""What workflows cost the settle of jobs outside them (docs/workflows.md): settle
throughput of plain jobs (no dependants), and the settle of a chord's members.

    python benchmarks/workflow_settle.py                                  # SQLite in a temp dir
    python benchmarks/workflow_settle.py --url postgresql://postgres@127.0.0.1/test
    python benchmarks/workflow_settle.py --url redis://127.0.0.1:6379/0

"plain": --jobs jobs claimed and completed in batches of --batch; only the settles
are timed. "chord": the same jobs as the members of chords of --batch members each
(one callback per chord), each batch of members completed in one settle. Each figure
is the median of --repeat runs, each on a fresh store. $CONVEYOR_SRC picks the source
tree (to time another checkout with the same script).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("CONVEYOR_SRC", str(Path(__file__).resolve().parents[1] / "src")))
sys.path.insert(1, str(Path(__file__).resolve().parent))

from flow_claims import cleanup, isolated

from conveyor import Conveyor
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import Settlement
from conveyor.model.job import JobState, NewJob

PAYLOAD = '{"args":[],"kwargs":{}}'


async def settle_rate(url: str, jobs: int, batch: int, chords: bool) -> float:
    app = Conveyor(url)
    try:
        backend = await app.backend()
        for start in range(0, jobs, batch):
            members = [
                NewJob(id=f"j{n}", task="bench.noop", payload=PAYLOAD, queue="q")
                for n in range(start, start + batch)
            ]
            callback = (
                [
                    NewJob(
                        id=f"cb{start}",
                        task="bench.noop",
                        payload=PAYLOAD,
                        queue="cb",
                        depends_on=tuple(m.id for m in members),
                    )
                ]
                if chords
                else []
            )
            await backend.enqueue_jobs([*members, *callback])
        spent = 0.0
        for _ in range(jobs // batch):
            claimed = await backend.fetch_jobs(strict_claim(["q"], batch, "w", 60))
            done = [
                Settlement(j.id, j.lease_token, JobState.COMPLETED, result="1") for j in claimed
            ]
            began = time.perf_counter()
            await backend.settle_jobs(done)
            spent += time.perf_counter() - began
        return jobs / spent
    finally:
        await cleanup(app, url)
        await app.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--plain-only", action="store_true", help="for a tree without workflows")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        kinds = [False] if args.plain_only else [False, True]
        for chords in kinds:
            rates = [
                await settle_rate(isolated(args.url, Path(folder)), args.jobs, args.batch, chords)
                for _ in range(args.repeat)
            ]
            print(
                f"{'chord' if chords else 'plain'}: {statistics.median(rates):,.0f} settles/s "
                f"(runs {', '.join(f'{r:,.0f}' for r in rates)})"
            )


if __name__ == "__main__":
    asyncio.run(main())

"""A workflow: extract a list of sources, transform each in parallel, load the total.

    python examples/etl_fanout.py /tmp/etl.db

`chord(group(...), callback)` runs the callback once, when every member of the group
ended, with their results in the group's order; `chain` passes each step's result
to the next as its first argument. See docs/workflows.md.
"""

from __future__ import annotations

import asyncio
import sys

from conveyor import Conveyor, chain, chord, group
from conveyor.worker import Worker, WorkerConfig

app = Conveyor(f"sqlite:///{sys.argv[1] if len(sys.argv) > 1 else 'etl.db'}")
SOURCES = {"eu": [3, 4, 5], "us": [10, 20], "apac": [7]}


@app.task(name="etl.extract")
def extract(region: str) -> list[int]:
    return SOURCES[region]


@app.task(name="etl.transform")
def transform(rows: list[int], factor: int) -> dict[str, int]:
    return {"rows": len(rows), "total": sum(rows) * factor}


@app.task(name="etl.load")
def load(parts: list[dict[str, int]], table: str) -> str:
    rows, total = sum(p["rows"] for p in parts), sum(p["total"] for p in parts)
    return f"loaded {rows} rows into {table}: total {total}"


async def main() -> None:
    # Per region: extract, then transform its rows; all regions in parallel; then load.
    flow = chord(
        group(chain(extract.s(region), transform.s(factor=2)) for region in SOURCES),
        load.s(table="sales"),
    )
    handle = await flow.enqueue_async()
    worker = Worker(app, WorkerConfig(concurrency=4, poll_interval=0.1))
    running = asyncio.create_task(worker.run())
    print(await handle.result_async(timeout=30))
    for job in handle.jobs:
        stored = await app.admin.get(job.id)
        assert stored is not None
        parents = stored.meta["workflow"]["parents"]
        print(f"  {stored.task:<13} {stored.state.value} after {len(parents)} parent(s)")
    worker.stop()
    await running
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())

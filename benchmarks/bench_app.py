"""No-op tasks for the benchmarks."""

from __future__ import annotations

import os

from conveyor import Conveyor

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///bench.db"))


@app.task(name="noop_async", queue="bench")
async def noop_async(i: int) -> None:
    return None


@app.task(name="noop_sync", queue="bench")
def noop_sync(i: int) -> None:
    return None


@app.task(name="hang", queue="bench")
def hang(seconds: float) -> None:
    """Holds a worker slot for `seconds` (the liveness benchmark kills its worker)."""
    import time

    time.sleep(seconds)

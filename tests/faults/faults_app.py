"""The app the fault tests run in real worker processes. Every handler appends
its events to the runs log (see tests/runs_log.py)."""

from __future__ import annotations

import os
import time

from runs_log import record

from conveyor import Conveyor, RetryOptions, current_job
from conveyor.model.errors import SoftTimeLimitExceeded

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///faults.db"))


@app.task(name="work", max_attempts=5, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.1))
def work(seconds: float) -> str:
    record("start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # short sleeps: a soft limit lands promptly
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
    record("finish")
    return f"attempt {current_job().attempt}"


@app.task(name="held", max_attempts=5)
def held(gate: str) -> str:
    """Runs until the file `gate` exists (at most two minutes): a test decides when it ends,
    whatever the machine's load."""
    record("start")
    deadline = time.monotonic() + 120.0
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.02)
    record("finish")
    return f"attempt {current_job().attempt}"


@app.task(name="poison", max_attempts=4, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05))
def poison() -> None:
    record("start")
    raise ConnectionError(f"poison pill, attempt {current_job().attempt}")


_leaked: list[bytes] = []


@app.task(name="leak", max_attempts=5)
def leak(megabytes: int) -> str:
    """Keeps what it allocates, as a leaky C extension would."""
    record("start")
    _leaked.append(os.urandom(megabytes << 20))
    record("finish")
    return f"attempt {current_job().attempt}"


@app.task(
    name="runaway",
    timeout=0.3,
    hard_time_limit=1.0,
    max_attempts=2,
    retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05),
)
def runaway() -> None:
    """Ignores its soft limit; only replacing its process stops it."""
    record("start")
    while True:
        try:
            time.sleep(0.02)
        except SoftTimeLimitExceeded:
            record("soft")


@app.task(name="gil_hog", max_attempts=5)
def gil_hog(seconds: float) -> str:
    """Holds the GIL in C for `seconds` (a libc sleep called through ctypes.PyDLL, which
    keeps the GIL): the worker's event loop, and so its heartbeats, cannot run."""
    import ctypes

    record("start")
    ctypes.PyDLL(None).usleep(int(seconds * 1_000_000))
    record("finish")
    return f"attempt {current_job().attempt}"

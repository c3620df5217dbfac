"""The app the fault tests run in real worker processes.

Every handler appends one line per event to $RUNS_LOG: `event job_id attempt pid
time` (O_APPEND writes of one short line are atomic), so a test can count starts
and finishes per job and per process, also for a process killed with SIGKILL.
"""

from __future__ import annotations

import os
import time

from conveyor import Conveyor, current_job
from conveyor.errors import SoftTimeLimitExceeded

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///faults.db"))


def record(event: str) -> None:
    ctx = current_job()
    line = f"{event} {ctx.id} {ctx.attempt} {os.getpid()} {time.time():.6f}\n".encode()
    fd = os.open(os.environ["RUNS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task(name="work", max_attempts=5, backoff_base=0.01, backoff_cap=0.1)
def work(seconds: float) -> str:
    record("start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # short sleeps: a soft limit lands promptly
        time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
    record("finish")
    return f"attempt {current_job().attempt}"


@app.task(name="poison", max_attempts=4, backoff_base=0.01, backoff_cap=0.05)
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


@app.task(name="runaway", soft_time_limit=0.3, hard_time_limit=1.0, max_attempts=2,
          backoff_base=0.01, backoff_cap=0.05)
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

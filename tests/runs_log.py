"""The runs log that test apps' handlers write in real worker processes.

One line per event: `event job_id attempt pid time`. O_APPEND writes of one short
line are atomic, so the test can count starts and finishes per job and per process,
also for a process killed with SIGKILL. The worker processes find this module
because tests/conftest.py puts tests/ on their PYTHONPATH.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from conveyor import current_job


def record(event: str) -> None:
    """Append `event` for the job running now to the file named by $RUNS_LOG."""
    ctx = current_job()
    line = f"{event} {ctx.id} {ctx.attempt} {os.getpid()} {time.time():.6f}\n".encode()
    fd = os.open(os.environ["RUNS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Event:
    kind: str
    job_id: str
    attempt: int
    pid: int
    at: float


def read(path: Path) -> list[Event]:
    """Every event logged so far. Only whole lines count: a writer may be halfway
    through its line as we read (seen in CI as a line of two fields)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().split("\n")[:-1]:
        kind, job_id, attempt, pid, at = line.split()
        out.append(Event(kind, job_id, int(attempt), int(pid), float(at)))
    return out

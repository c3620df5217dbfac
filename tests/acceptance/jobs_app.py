"""The app the acceptance tests run in real worker processes.

Each handler appends one line per event to $RUNS_LOG (O_APPEND writes of one
line are atomic), so the test can count starts and finishes per job even for a
process killed with SIGKILL.
"""

from __future__ import annotations

import os
import time

from conveyor import Conveyor, current_job

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///acceptance.db"))


def record(event: str) -> None:
    ctx = current_job()
    line = f"{event} {ctx.id} {ctx.attempt} {os.getpid()}\n".encode()
    fd = os.open(os.environ["RUNS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@app.task(name="work", max_attempts=5)
def work(seconds: float) -> str:
    record("start")
    time.sleep(seconds)
    record("finish")
    return f"attempt {current_job().attempt}"


if os.environ.get("PERIODIC_EVERY"):
    # Only for tests/acceptance/test_scheduler_processes.py: the other acceptance
    # tests count jobs and must not see scheduled ones.
    @app.periodic(every=int(os.environ["PERIODIC_EVERY"]), name="tick", misfire="all",
                  max_catch_up=100, overlap="allow")
    @app.task(name="tick")
    def tick() -> None:
        record("tick")

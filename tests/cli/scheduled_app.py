"""An app with periodic schedules for the CLI tests: `conveyor scheduler
scheduled_app:app`, `conveyor cron list scheduled_app:app`."""

from __future__ import annotations

from conveyor import Conveyor

app = Conveyor()  # the URL comes from $CONVEYOR_URL


@app.periodic(every=1, misfire="all", max_catch_up=100, overlap="allow")
@app.task(name="beat")
def beat() -> None: ...


@app.periodic(cron="0 9 * * MON-FRI", tz="Europe/Madrid", name="morning-report", args=("daily",))
@app.task(name="report")
def report(kind: str) -> str:
    return kind


@app.task(name="add")
def add(a: int, b: int) -> int:
    return a + b

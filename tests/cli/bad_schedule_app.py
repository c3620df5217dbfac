"""A schedule whose cron expression is wrong: importing it fails with a clear message."""

from __future__ import annotations

from conveyor import Conveyor

app = Conveyor()


@app.periodic(cron="0 25 * * *")
@app.task(name="nightly")
def nightly() -> None: ...

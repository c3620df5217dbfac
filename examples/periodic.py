"""Periodic jobs: a schedule in a zone, a missed window caught up after downtime,
and `conveyor cron list`. Time is a ManualClock so the output is the same every
run; in production leave `clock=` out.

    python examples/periodic.py /tmp/periodic.db
"""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta

from conveyor import Conveyor
from conveyor.model.clock import ManualClock
from conveyor.ops.schedule_commands import cron_list
from conveyor.scheduling import Scheduler, scheduled_run
from conveyor.worker import Worker, WorkerConfig

clock = ManualClock(datetime(2026, 3, 28, 22, 58, tzinfo=UTC).timestamp())
app = Conveyor(f"sqlite:///{sys.argv[1] if len(sys.argv) > 1 else 'periodic.db'}", clock=clock)


@app.periodic(cron="30 2 * * *", tz="Europe/Madrid")  # 02:30 does not exist on 2026-03-29
@app.task(name="nightly_backup")
def nightly_backup() -> None: ...


@app.periodic(every=timedelta(minutes=5), misfire="catch_up")
@app.task(name="sync_accounts")
def sync_accounts() -> str:
    run = scheduled_run()
    assert run is not None
    return f"synced {run.covers_from:%H:%M}..{run.covers_to:%H:%M} UTC ({run.ticks} ticks)"


async def finished(job_id: str) -> str:
    while (job := await app.admin.get(job_id)) is None or not job.is_finished:
        await asyncio.sleep(0.02)
    return str(job.result_value)


async def main() -> None:
    scheduler = Scheduler(app)  # what every worker runs, unless WorkerConfig(scheduler=False)
    worker = Worker(app, WorkerConfig(poll_interval=0.05, scheduler=False))
    running = asyncio.create_task(worker.run())
    await scheduler.tick()  # first sight: nothing is owed from before now
    clock.advance(timedelta(minutes=2))
    [first] = await scheduler.tick()
    print(first.id, "->", await finished(first.id))
    clock.advance(timedelta(hours=6))  # six hours down
    for job in await scheduler.tick():
        print(job.id, "->", await finished(job.id))
    worker.stop()
    await running
    print(await cron_list(app, upcoming=1))
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())

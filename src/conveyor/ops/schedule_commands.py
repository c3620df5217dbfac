"""What `conveyor scheduler APP` and `conveyor cron list APP` do, without argument
parsing: the CLI wires these to its subcommands and stays thin."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING

from conveyor.scheduling.scheduler import (
    Scheduler,
    ScheduleReport,
    describe_reports,
    schedule_reports,
)

if TYPE_CHECKING:
    from conveyor.app import Conveyor

log = logging.getLogger("conveyor.scheduler")


async def run_scheduler(app: Conveyor, stop: asyncio.Event | None = None) -> int:
    """Run only the scheduler until SIGINT/SIGTERM (or `stop`); exit status 0.

    Any number may run next to the workers: each tick is still enqueued once.
    """
    scheduler = Scheduler(app)  # validates the schedules before anything starts
    if not scheduler.schedules:
        log.warning("%r declares no schedules: nothing to do", app)
        return 0
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    handled: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
            pass
    try:
        await scheduler.run(stop)
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        await app.aclose()
    return 0


async def cron_list(app: Conveyor, *, upcoming: int = 3, as_json: bool = False) -> str:
    """The text `conveyor cron list APP` prints."""
    reports = await schedule_reports(app, upcoming)
    if as_json:
        return json.dumps(describe_reports(reports), indent=2)
    return format_reports(reports)


def format_reports(reports: Sequence[ScheduleReport]) -> str:
    if not reports:
        return "no schedules declared"
    blocks: list[str] = []
    for r, data in zip(reports, describe_reports(reports), strict=True):
        s = r.schedule
        lines = [
            s.name if s.name == s.task else f"{s.name}  (task {s.task})",
            f"  {s.timing.describe()}; misfire={s.misfire} overlap={s.overlap}"
            + (f" jitter={s.jitter}s" if s.jitter else ""),
        ]
        for utc, local in zip(r.upcoming, r.upcoming_local, strict=True):
            zone = "" if s.zone == "UTC" else f"   {local:%Y-%m-%d %H:%M %Z} ({s.zone})"
            lines.append(f"  next  {utc:%Y-%m-%d %H:%M:%S} UTC{zone}")
        last = data["last_run"]
        if last is None:
            lines.append("  last  never fired")
        else:
            covers = (
                ""
                if last["covers_from"] == last["covers_to"]
                else f", covering {last['covers_from']} .. {last['covers_to']}"
            )
            lines.append(
                f"  last  {last['tick']}  job {last['job_id']}  {last['state'] or 'pruned'}{covers}"
            )
        if data["pending"]:
            lines.append(f"  held  {data['pending']} (queue_one: waits for the running one)")
        if data["skipped"]:
            lines.append(f"  skipped ticks: {data['skipped']}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)

"""`conveyor scheduler`, `conveyor cron list` and `conveyor worker --no-scheduler`
as real processes."""

from __future__ import annotations

import re
import signal
import subprocess
from datetime import UTC, datetime

from cli_harness import HERE, Cli, WorkerProcess, wait_until

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.model.job import JobState


def start(cli: Cli, *args: str) -> WorkerProcess:
    log_path = cli.tmp_path / f"process-{len(cli.workers)}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [*cli.command(), *args], cwd=HERE, env=cli.env, stdout=log, stderr=subprocess.STDOUT
        )
    process = WorkerProcess(proc, log_path)
    cli.workers.append(process)
    return process


def beat_ids(app: Conveyor) -> list[str]:
    return sorted(job.id for job in app.jobs.list(make_filter(tasks=["beat"]), limit=1000))


def test_cron_list_shows_next_fire_times_in_utc_and_the_zone(cli: Cli) -> None:
    out = cli("cron", "list", "scheduled_app:app", "--next", "2").ok().out
    lines = out.splitlines()
    assert lines[:2] == ["beat", "  every 0:00:01; misfire=all overlap=allow"]
    report = lines[lines.index("morning-report  (task report)") :]
    assert report[1] == "  cron '0 9 * * MON-FRI' in Europe/Madrid; misfire=skip overlap=skip"
    for line in report[2:4]:  # 09:00 Madrid is 08:00 UTC in winter, 07:00 in summer
        assert re.fullmatch(
            r"  next  \S+ (08:00:00 UTC   \S+ 09:00 CET|07:00:00 UTC   \S+ 09:00 CEST)"
            r" \(Europe/Madrid\)",
            line,
        ), line
    assert report[4] == "  last  never fired"
    assert '"name": "morning-report"' in cli("cron", "list", "scheduled_app:app", "--json").ok().out


def test_scheduler_process_enqueues_each_second_once_and_stops_on_sigterm(
    cli: Cli, inspector: Conveyor
) -> None:
    scheduler = start(cli, "scheduler", "scheduled_app:app")
    scheduler.wait_for_log("scheduler started: beat, morning-report")
    wait_until(lambda: len(beat_ids(inspector)) >= 3, "three beats enqueued")
    scheduler.signal(signal.SIGTERM)
    assert scheduler.wait() == 0, scheduler.log()
    seconds = [
        int(datetime.strptime(i, "cron:beat:%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
        for i in beat_ids(inspector)
    ]
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds)))
    assert "Traceback" not in scheduler.log()
    out = cli("cron", "list", "scheduled_app:app", "-n", "1").ok().out
    assert (
        f"  last  {beat_ids(inspector)[-1][len('cron:beat:') :]}  job {beat_ids(inspector)[-1]}  "
        "available" in out
    )


def test_workers_schedule_by_default_and_not_with_no_scheduler(
    cli: Cli, inspector: Conveyor
) -> None:
    quiet = start(cli, "worker", "scheduled_app:app", "--no-scheduler", "--poll", "0.1")
    job = cli("enqueue", "--app", "scheduled_app:app", "add", "1", "2").ok().out.strip()
    wait_until(lambda: inspector.jobs.get(job).state is JobState.COMPLETED, "the add job done")  # type: ignore[union-attr]
    quiet.signal(signal.SIGTERM)
    assert quiet.wait() == 0, quiet.log()
    assert "scheduler started" not in quiet.log()
    assert beat_ids(inspector) == []

    busy = start(cli, "worker", "scheduled_app:app", "--poll", "0.1")
    busy.wait_for_log("scheduler started: beat, morning-report")
    wait_until(
        lambda: inspector.jobs.count(make_filter(states=["completed"], tasks=["beat"])) >= 2,
        "two beats run by the worker",
    )
    busy.signal(signal.SIGTERM)
    assert busy.wait() == 0, busy.log()


def test_bad_schedules_and_no_schedules_are_usage_errors(cli: Cli) -> None:
    bad = cli("cron", "list", "bad_schedule_app:app")
    assert bad.code == 2
    assert bad.err.startswith(
        "conveyor: error: schedule 'nightly': invalid cron expression '0 25 * * *'"
    )
    assert len(bad.err.strip().splitlines()) == 1
    none = cli("scheduler", "example_app:app")
    assert (none.code, none.err.strip()) == (
        2,
        "conveyor: error: example_app:app declares no schedules (use @app.periodic)",
    )

"""Schedulers in real processes: three workers (each running the scheduler, the
default) and one `conveyor scheduler` process fire each tick once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime

import pytest
from acceptance_support import HERE, Runs, WorkerProcess

from conveyor import Conveyor
from conveyor.backends.params import JobFilter

pytestmark = pytest.mark.slow


def test_four_schedulers_in_real_processes_fire_each_second_once(
    url: str, runs: Runs, workers: list[WorkerProcess], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERIODIC_EVERY", "1")
    for _ in range(3):
        workers.append(WorkerProcess(url, runs.path))
    env = {
        **os.environ,
        "CONVEYOR_URL": url,
        "RUNS_LOG": str(runs.path),
        "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    alone = subprocess.Popen(
        [sys.executable, "-m", "conveyor", "scheduler", "jobs_app:app"],
        env=env,
        cwd=HERE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
    )
    try:
        runs.wait_for("tick", 6, timeout=60)
    finally:
        os.killpg(alone.pid, signal.SIGTERM)
        for worker in workers:
            worker.signal(signal.SIGTERM)
        assert alone.wait(30) == 0, alone.stdout.read() if alone.stdout else ""
        for worker in workers:
            worker.wait(60)

    executions = Counter(job_id for event, job_id, _, _ in runs.events() if event == "tick")
    assert set(executions.values()) == {1}, executions
    enqueued = asyncio.run(tick_jobs(url))
    assert set(executions) <= set(enqueued)
    # Ids are cron:tick:<UTC second>: consecutive seconds, none missing, none twice.
    seconds = sorted(
        int(
            datetime.strptime(job_id, "cron:tick:%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=UTC)
            .timestamp()
        )
        for job_id in enqueued
    )
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds)))


async def tick_jobs(url: str) -> list[str]:
    app = Conveyor(url)
    try:
        return [job.id for job in await app.admin.list(JobFilter(tasks=("tick",)), limit=10_000)]
    finally:
        await app.aclose()

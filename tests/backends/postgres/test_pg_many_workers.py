"""Many worker processes on one database: each job runs once, none is left, and a
worker killed with SIGKILL loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from pg_helpers import eventually

from conveyor import Conveyor
from conveyor.backends.params import JobFilter
from conveyor.model.job import JobState

RUNNER = Path(__file__).with_name("pg_worker_main.py")

CRASH_ERRORS = ("WorkerLost", "LeaseExpired")  # a killed worker's attempt, by either rescue


class Workers:
    def __init__(self, url: str, n: int, *extra: str) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(RUNNER), url, *extra],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(n)
        ]

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # blocks until "ready" (or the process died)
            assert line.strip() == "ready", (
                f"worker did not start: {proc.stderr.read() if proc.poll() is not None else ''}"  # type: ignore[union-attr]
            )
            assert time.monotonic() < deadline

    def stop(self) -> list[int | None]:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: list[int | None] = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(30))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(None)
        return codes


def runs_table(admin_conn: psycopg.Connection, schema: str) -> str:
    table = f'"{schema}".runs'
    admin_conn.execute(f"CREATE TABLE {table} (job_id text NOT NULL, pid int NOT NULL)")
    return table


async def enqueue(app: Conveyor, n: int, sleep: float) -> list[str]:
    record = app.tasks["record"]
    ids: list[str] = []
    for start in range(0, n, 1000):
        batch = [record.message(i, sleep=sleep) for i in range(start, min(n, start + 1000))]
        ids += [h.id for h in await app.enqueue_many_async(batch)]
    return ids


def app_with_record_task(pg_url: str) -> Conveyor:
    app = Conveyor(pg_url)

    @app.task(name="record")
    # Ignored for mypy: a task declared by name: its body runs elsewhere
    async def record(n: int, sleep: float = 0.0) -> int: ...  # type: ignore[empty-body]

    return app


async def counts(app: Conveyor) -> dict[JobState, int]:
    backend = await app.backend()
    return {state: await backend.count_jobs(JobFilter(states=(state,))) for state in JobState}


@pytest.mark.slow
async def test_four_processes_run_5000_jobs_exactly_once(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    app = app_with_record_task(pg_url)
    await app.backend()  # migrated before the workers start
    table = runs_table(admin_conn, schema)
    workers = Workers(pg_url, 4, "--concurrency", "20", "--runs-table", table)
    try:
        workers.wait_ready()
        ids = await enqueue(app, 5000, sleep=0.0)

        async def all_completed() -> bool:
            return (await counts(app))[JobState.COMPLETED] == 5000

        await eventually(all_completed, timeout=120, interval=0.2, what="5000 jobs completed")
    finally:
        codes = workers.stop()
        final = await counts(app)
        await app.aclose()
    assert codes == [0, 0, 0, 0]
    assert final == {**{s: 0 for s in JobState}, JobState.COMPLETED: 5000}
    rows = admin_conn.execute(f"SELECT job_id, count(*) FROM {table} GROUP BY job_id").fetchall()
    assert len(rows) == 5000 and {job_id for job_id, _ in rows} == set(ids)
    assert all(n == 1 for _, n in rows), "a job ran twice"
    pids = admin_conn.execute(f"SELECT count(DISTINCT pid) FROM {table}").fetchone()
    assert pids == (4,), "every worker process should have taken a share"


@pytest.mark.slow
async def test_sigkill_of_a_worker_loses_nothing(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    app = app_with_record_task(pg_url)
    await app.backend()
    table = runs_table(admin_conn, schema)
    workers = Workers(
        pg_url,
        4,
        "--concurrency",
        "10",
        "--lease",
        "2",
        "--rescue",
        "0.5",
        "--poll",
        "0.2",
        "--runs-table",
        table,
    )
    try:
        workers.wait_ready()
        ids = await enqueue(app, 2000, sleep=0.01)
        victim = workers.procs[0]

        async def victim_busy() -> bool:
            row = admin_conn.execute(
                f"SELECT count(*) FROM {table} WHERE pid = %s", (victim.pid,)
            ).fetchone()
            return row is not None and row[0] >= 50

        await eventually(victim_busy, timeout=60, what="victim ran 50 jobs")
        victim.kill()  # SIGKILL: no drain, no goodbye, leases left behind
        assert victim.wait(10) == -signal.SIGKILL

        async def all_completed() -> bool:
            return (await counts(app))[JobState.COMPLETED] == 2000

        await eventually(all_completed, timeout=120, interval=0.2, what="2000 jobs completed")
    finally:
        codes = workers.stop()
        final = await counts(app)
        # By the victim's liveness signal (WorkerLost) or, had the others been slower
        # to look than its lease, by the lease (LeaseExpired): either uses the attempt.
        rescued_jobs = sum(
            [await (await app.backend()).count_jobs(JobFilter(error_type=t)) for t in CRASH_ERRORS]
        )
        await app.aclose()
    assert codes[1:] == [0, 0, 0]
    assert rescued_jobs >= 1, "the victim held no lease when killed: the test proved nothing"
    assert final == {**{s: 0 for s in JobState}, JobState.COMPLETED: 2000}
    rows = admin_conn.execute(
        f"SELECT job_id, count(*), bool_or(pid = %s) FROM {table} GROUP BY job_id", (victim.pid,)
    ).fetchall()
    assert {job_id for job_id, _, _ in rows} == set(ids), "a job never ran"
    twice = [(job_id, n, by_victim) for job_id, n, by_victim in rows if n > 1]
    # Only jobs the victim had started run again, and at most its in-flight ones.
    assert all(by_victim and n == 2 for _, n, by_victim in twice), twice
    assert len(twice) <= 10
    backend = await Conveyor(pg_url).backend()
    rescued = [j for j in [await backend.get_job(job_id) for job_id, _, _ in twice] if j]
    assert all(j.attempt == 2 and j.errors[-1].type in CRASH_ERRORS for j in rescued)
    await backend.close()

"""A tour of Conveyor that runs anywhere the package is installed: `conveyor demo`.

It builds an app on a SQLite file, enqueues real example jobs (emails written to
an outbox table, a computation, an image resize, a flaky CRM call that succeeds
on its second attempt, a poison pill that goes straight to the dead-letter
queue, a delayed reminder), runs an in-process worker until every job is
finished, prints what happened and checks it against what should have.

>>> from conveyor.cli import demo
>>> demo.run()   # exit status: 0 when every job ended as expected
0
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conveyor import RetryOptions
from conveyor.admin.api import make_filter
from conveyor.app import Conveyor
from conveyor.context import current_job
from conveyor.model.job import ACTIVE_STATES, Job, JobState
from conveyor.worker import ExitStatus, Worker, WorkerConfig

REMINDER_DELAY = 2.0
DEADLINE = 20.0  # seconds for all jobs to finish; they need about REMINDER_DELAY


def build_app(db_path: Path) -> Conveyor:
    """The demo app: its tasks share the job database file for their outbox table."""
    app = Conveyor(f"sqlite:///{db_path}")
    outbox = Outbox(db_path)

    @app.task(name="send_welcome_email", queue="emails")
    def send_welcome_email(user_id: int, email: str) -> str:
        outbox.send(email, "Welcome aboard", f"Hello user {user_id}, welcome!")
        return f"sent to {email}"

    @app.task(name="send_reminder", queue="emails")
    def send_reminder(email: str) -> str:
        outbox.send(email, "Your trial ends soon", "Three days left on your trial.")
        return f"sent to {email}"

    @app.task(name="count_primes")
    def count_primes(limit: int) -> int:
        sieve = bytearray([1]) * (limit + 1)
        sieve[0:2] = b"\x00\x00"
        for n in range(2, int(limit**0.5) + 1):
            if sieve[n]:
                sieve[n * n :: n] = bytes(len(range(n * n, limit + 1, n)))
        current_job().progress(1.0, f"sieved {limit} numbers")
        return sum(sieve)

    @app.task(name="resize_image")
    def resize_image(width: int, height: int, max_side: int) -> list[int]:
        """Downscale a width x height grey gradient by box averaging; return the new size."""
        scale = max(width, height) / max_side
        new_w, new_h = round(width / scale), round(height / scale)
        step_x, step_y = width / new_w, height / new_h
        source = [[(x + y) % 256 for x in range(width)] for y in range(height)]
        thumb = [
            [
                _box_mean(source, int(x * step_x), int(y * step_y), step_x, step_y)
                for x in range(new_w)
            ]
            for y in range(new_h)
        ]
        return [len(thumb[0]), len(thumb)]

    # A flaky network call: transient, so it retries with a short backoff (0.2 s base).
    @app.task(
        name="sync_crm_contact",
        max_attempts=5,
        retry=RetryOptions(backoff_base=0.2, backoff_cap=1.0),
    )
    async def sync_crm_contact(contact_id: int) -> dict[str, Any]:
        if current_job().attempt == 1:
            raise ConnectionError("crm.example.com refused the connection")
        await asyncio.sleep(0.01)
        return {"contact": contact_id, "synced": True}

    # A poison pill: ValueError is deterministic, so the job goes dead at once.
    @app.task(name="import_invoice")
    def import_invoice(total: str) -> float:
        return float(total)

    return app


def _box_mean(pixels: list[list[int]], left: int, top: int, width: float, height: float) -> int:
    rows = pixels[top : top + max(1, int(height))]
    values = [v for row in rows for v in row[left : left + max(1, int(width))]]
    return sum(values) // len(values)


class Outbox:
    """Where the demo's "emails" go: a table next to the jobs, keyed by job id, so a
    retried or repeated attempt never sends twice (delivery is at least once)."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS demo_outbox (job_id TEXT PRIMARY KEY, "
                "recipient TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL, "
                "sent_at REAL NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.db_path, timeout=30.0)

    def send(self, recipient: str, subject: str, body: str) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO demo_outbox VALUES (?, ?, ?, ?, ?)",
                (current_job().id, recipient, subject, body, time.time()),
            )

    def sent_by(self, job_ids: list[str]) -> int:
        marks = ",".join("?" * len(job_ids))
        with self._connect() as db:
            row = db.execute(
                f"SELECT count(*) FROM demo_outbox WHERE job_id IN ({marks})", job_ids
            ).fetchone()
        return int(row[0])


@dataclass(frozen=True)
class Expected:
    label: str
    task: str
    args: tuple[Any, ...]
    state: JobState
    attempts: int
    check: Callable[[Job], bool] = lambda job: True
    delay: float | None = None


def _ran_after_delay(job: Job) -> bool:
    return job.started_at is not None and job.started_at - job.created_at >= REMINDER_DELAY


PLAN = [
    Expected(
        "welcome Ada",
        "send_welcome_email",
        (1, "ada@example.com"),
        JobState.COMPLETED,
        1,
        lambda j: j.result_value == "sent to ada@example.com",
    ),
    Expected(
        "welcome Grace",
        "send_welcome_email",
        (2, "grace@example.com"),
        JobState.COMPLETED,
        1,
        lambda j: j.result_value == "sent to grace@example.com",
    ),
    Expected(
        "primes below 100k",
        "count_primes",
        (100_000,),
        JobState.COMPLETED,
        1,
        lambda j: j.result_value == 9592,
    ),
    Expected(
        "thumbnail",
        "resize_image",
        (1920, 1080, 320),
        JobState.COMPLETED,
        1,
        lambda j: j.result_value == [320, 180],
    ),
    Expected(
        "flaky CRM sync",
        "sync_crm_contact",
        (7,),
        JobState.COMPLETED,
        2,
        lambda j: (
            [e.type for e in j.errors] == ["ConnectionError"]
            and j.result_value == {"contact": 7, "synced": True}
        ),
    ),
    Expected(
        "poison invoice",
        "import_invoice",
        ("twelve",),
        JobState.DEAD,
        1,
        lambda j: [e.type for e in j.errors] == ["ValueError"],
    ),
    Expected(
        "reminder in 2s",
        "send_reminder",
        ("ada@example.com",),
        JobState.COMPLETED,
        1,
        _ran_after_delay,
        delay=REMINDER_DELAY,
    ),
]
EMAILS_EXPECTED = 3


async def _enqueue_and_work(app: Conveyor) -> tuple[list[Job | None], ExitStatus]:
    ids = []
    for item in PLAN:
        task = app.tasks[item.task]
        bound = task.options(delay=item.delay) if item.delay else task.options()
        ids.append((await bound.enqueue_async(*item.args)).id)
    print(f"enqueued {len(ids)} jobs; starting a worker\n", flush=True)

    queues = tuple(sorted({t.defaults.queue for t in app.tasks.values()}))
    worker = Worker(
        app, WorkerConfig(queues=queues, concurrency=4, poll_interval=0.1, grace_period=5.0)
    )
    running = asyncio.create_task(worker.run())
    unfinished = make_filter(ids=ids, states=list(ACTIVE_STATES))
    deadline = time.monotonic() + DEADLINE
    try:
        while await app.admin.count(unfinished) and time.monotonic() < deadline:
            if running.done():
                break  # the worker stopped on its own; its error is raised below
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        status = await running
    return [await app.admin.get(job_id) for job_id in ids], status


def _outcome(job: Job) -> str:
    if job.state is JobState.COMPLETED:
        return f"result {job.result}"
    if job.errors:
        return f"{job.errors[-1].type}: {job.errors[-1].message}"
    return job.state.value


def run(db: Path | None = None) -> int:
    """Run the demo and print its report; return 0 if it all went as expected."""
    from conveyor.cli.render import table  # the CLI's table printer; no other dependency

    db_path = (db or Path(tempfile.mkdtemp(prefix="conveyor-demo-")) / "demo.db").resolve()
    print(f"Conveyor demo\ndatabase: {db_path}")
    app = build_app(db_path)
    started = time.monotonic()
    jobs, status = asyncio.run(_run_and_close(app))
    elapsed = time.monotonic() - started

    problems: list[str] = []
    if status is not ExitStatus.DRAINED:
        problems.append(f"the worker stopped {status.name.lower()}, expected drained")
    rows: list[list[object]] = []
    for item, job in zip(PLAN, jobs, strict=True):
        if job is None:
            problems.append(f"{item.label}: the job disappeared")
            continue
        ok = job.state is item.state and job.attempt == item.attempts and item.check(job)
        if not ok:
            problems.append(
                f"{item.label}: expected {item.state.value} after {item.attempts} "
                f"attempt(s), got {job.state.value} after {job.attempt}"
            )
        rows.append(
            [
                job.id,
                item.label,
                job.task,
                job.state.value,
                job.attempt,
                "ok" if ok else "UNEXPECTED",
                _outcome(job),
            ]
        )
    emails = Outbox(db_path).sent_by([job.id for job in jobs if job is not None])
    if emails != EMAILS_EXPECTED:
        problems.append(f"outbox holds {emails} emails from these jobs, expected {EMAILS_EXPECTED}")

    print()
    print(table(["ID", "JOB", "TASK", "STATE", "ATTEMPTS", "CHECK", "RESULT / LAST ERROR"], rows))
    print(f"\noutbox: {emails} emails written; finished in {elapsed:.1f}s")
    print(f"look around: conveyor jobs list --url {app.url}")
    if problems:
        print("\nNOT as expected:\n  " + "\n  ".join(problems))
        return 1
    print("everything went as expected")
    return 0


async def _run_and_close(app: Conveyor) -> tuple[list[Job | None], ExitStatus]:
    try:
        return await _enqueue_and_work(app)
    finally:
        await app.aclose()

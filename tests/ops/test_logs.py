"""Every log line about a job names it; JSON lines; no arguments."""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator

import pytest
from conformance.helpers import RunningWorker, eventually, wait_finished

from conveyor import Conveyor, RetryOptions, current_job
from conveyor.model.job import Job, JobState
from conveyor.observe.logs import (
    CorrelationIds,
    JobLogFilter,
    JsonFormatter,
    TextFormatter,
    bind_job,
    correlation_scope,
)
from conveyor.worker import WorkerConfig

FAST = WorkerConfig(queues=("default",), concurrency=2, poll_interval=0.05)


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.addFilter(JobLogFilter())
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def captured() -> Iterator[Capture]:
    handler = Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    yield handler
    root.removeHandler(handler)
    root.setLevel(old_level)


async def test_handler_and_worker_lines_carry_the_job(app: Conveyor, captured: Capture) -> None:
    app.middleware.append(CorrelationIds())
    task_log = logging.getLogger("myapp.billing")

    @app.task(
        name="charge", max_attempts=2, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.01)
    )
    def charge(card: str) -> None:
        task_log.info("charging")
        if current_job().attempt == 1:
            raise ConnectionError("gateway timeout")

    with correlation_scope("req-42"):
        handle = await charge.enqueue_async("4111-1111-1111-1111")
    async with RunningWorker(app, FAST):
        await wait_finished(app, [handle.id])

    about_job = [line for line in captured.lines if line.get("job_id") == handle.id]
    charging = [line for line in about_job if line["message"] == "charging"]
    assert [line["attempt"] for line in charging] == [1, 2]
    for line in charging:
        assert line["logger"] == "myapp.billing" and line["task"] == "charge"
        assert line["queue"] == "default" and line["correlation_id"] == "req-42"
    # The worker's own warning about the failed attempt is tagged too.
    failed = [line for line in about_job if line["logger"] == "conveyor.worker"]
    assert len(failed) == 1 and "gateway timeout" in str(failed[0]["message"])
    assert failed[0]["attempt"] == 1 and failed[0]["level"] == "warning"
    # Arguments never reach the logs.
    assert not any("4111" in json.dumps(line) for line in captured.lines)


async def test_jobs_enqueued_by_a_job_inherit_its_correlation_id(app: Conveyor) -> None:
    app.middleware.append(CorrelationIds())
    children: list[str] = []

    @app.task(name="child")
    def child() -> None: ...

    @app.task(name="parent")
    async def parent() -> None:
        children.append((await child.enqueue_async()).id)

    handle = await parent.enqueue_async()
    async with RunningWorker(app, FAST):
        await wait_finished(app, [handle.id])
        await eventually(lambda: _has(children))
        await wait_finished(app, children)
    parent_job = await app.admin.get(handle.id)
    child_job = await app.admin.get(children[0])
    assert parent_job is not None and child_job is not None
    assert parent_job.meta["correlation_id"] == handle.id  # a root job is its own correlation
    assert child_job.meta["correlation_id"] == handle.id


async def _has(items: list[str]) -> bool:
    return bool(items)


def test_lines_outside_a_job_have_no_job_fields() -> None:
    record = logging.LogRecord(
        "conveyor.worker", logging.INFO, __file__, 1, "started %s", ("w1",), None
    )
    record.created = 1_800_000_000.25
    JobLogFilter().filter(record)
    assert json.loads(JsonFormatter().format(record)) == {
        "ts": "2027-01-15T08:00:00.250Z",
        "level": "info",
        "logger": "conveyor.worker",
        "message": "started w1",
    }


def test_a_job_id_cannot_forge_a_text_log_line() -> None:
    """A job id is data from whoever enqueued the job: written raw, a newline in it
    would start a line that reads like the worker's own."""
    forged = "x\n2027-01-15T08:00:00.250Z WARNING conveyor.worker: all jobs deleted"
    job = Job(
        id=forged,
        task="t\r",
        queue="q\x1b[2K",
        payload="{}",
        state=JobState.RUNNING,
        attempt=1,
        meta={"correlation_id": "c\u2028d"},
    )

    def format_line() -> str:
        bind_job(job)  # as the worker does for the task that runs the job
        record = logging.LogRecord(
            "conveyor.worker",
            logging.WARNING,
            __file__,
            1,
            "job %s: lease lost after %d tries",
            (forged, 3),
            None,
        )
        record.created = 1_800_000_000.25
        JobLogFilter().filter(record)
        return TextFormatter().format(record)

    line = contextvars.copy_context().run(format_line)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\u2028" not in line
    assert line == (
        "2027-01-15T08:00:00.250Z WARNING conveyor.worker: job x\\n2027-01-15T08:00:00.250Z "
        "WARNING conveyor.worker: all jobs deleted: lease lost after 3 tries "
        "[job=x\\n2027-01-15T08:00:00.250Z WARNING conveyor.worker: all jobs deleted "
        "task=t\\r queue=q\\x1b[2K attempt=1 correlation=c\\u2028d]"
    )

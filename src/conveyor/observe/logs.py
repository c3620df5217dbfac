"""Structured logs: every line about a job carries its id, task, queue, attempt
and correlation id.

The worker binds the job's fields in a context variable for the whole attempt
(each job runs in its own asyncio task, and sync handlers run in a copy of that
context), and `JobLogFilter` copies them onto every log record, also those of
the task's own loggers. Arguments are never logged.

>>> configure_logging("info", "json")   # what `conveyor worker --log-format json` does
>>> logging.getLogger("myapp").info("sent")
{"ts": "...", "level": "info", "logger": "myapp", "message": "sent", "job_id": "...", ...}

The correlation id ties together the jobs one request caused: a job enqueued
while another runs (or inside `correlation_scope(request_id)`) carries that
correlation id in its meta, when the app uses the `CorrelationIds` middleware;
a job without one is its own correlation (its id).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from conveyor.model.escaping import printable
from conveyor.observe.middleware import CallNext, EnqueueContext, MiddlewareContext

if TYPE_CHECKING:
    from conveyor.model.job import Job

CORRELATION_META_KEY = "correlation_id"
FORMATS = ("text", "json")
JOB_FIELDS = ("job_id", "task", "queue", "attempt", "correlation_id")


@dataclass(frozen=True, slots=True)
class JobLogFields:
    job_id: str
    task: str
    queue: str
    attempt: int
    correlation_id: str


# The job itself, its fields read only when a line is logged: building them for every
# attempt cost more than most attempts log.
_JOB: ContextVar[Job | None] = ContextVar("conveyor_log_job", default=None)
_CORRELATION: ContextVar[str | None] = ContextVar("conveyor_correlation", default=None)


def correlation_of(job: Job) -> str:
    value = job.meta.get(CORRELATION_META_KEY)
    return value if isinstance(value, str) and value else job.id


def bind_job(job: Job) -> None:
    """Tag every log line of the current asyncio task (one job attempt) with the job."""
    _JOB.set(job)


def current_job_fields() -> JobLogFields | None:
    job = _JOB.get()
    if job is None:
        return None
    return JobLogFields(job.id, job.task, job.queue, job.attempt, correlation_of(job))


def current_correlation_id() -> str | None:
    """The correlation id of the running job, or of the enclosing `correlation_scope`."""
    scoped = _CORRELATION.get()
    if scoped is not None:
        return scoped
    job = _JOB.get()
    return None if job is None else correlation_of(job)


@contextmanager
def correlation_scope(correlation_id: str) -> Iterator[None]:
    """Jobs enqueued inside carry `correlation_id` (with the CorrelationIds middleware).

    >>> with correlation_scope(request.headers["x-request-id"]):
    ...     send_welcome.enqueue(42)
    """
    token = _CORRELATION.set(correlation_id)
    try:
        yield
    finally:
        _CORRELATION.reset(token)


class CorrelationIds:
    """Middleware: stamp each new job with the current correlation id (or its own id)."""

    def passes_on(self, ctx: MiddlewareContext) -> bool:
        return not isinstance(ctx, EnqueueContext)  # an execution: nothing to stamp

    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        if isinstance(ctx, EnqueueContext):
            current = current_correlation_id()
            ctx.jobs_in = [
                job
                if CORRELATION_META_KEY in job.meta
                else replace(job, meta={**job.meta, CORRELATION_META_KEY: current or job.id})
                for job in ctx.jobs_in
            ]
        await call_next(ctx)


class JobLogFilter(logging.Filter):
    """Adds job_id, task, queue, attempt, correlation_id to records (None outside a job)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = current_job_fields()
        for name in JOB_FIELDS:
            if not hasattr(record, name):
                setattr(record, name, None if fields is None else getattr(fields, name))
        if fields is None and getattr(record, "correlation_id", None) is None:
            record.correlation_id = _CORRELATION.get()
        return True


def _utc(created: float) -> str:
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        + f".{int(created % 1 * 1000):03d}Z"
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line; job fields only when the line is about a job."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """The plain format, with the job in brackets: `[job=.. task=.. attempt=..]`.
    With `process_label`, each line names its process: `[child 4242]` (pool children).

    One record is one line (plus its traceback): the job's fields and the text
    arguments of the message (job ids, error messages: data from whoever enqueued
    the job) are written with `printable()`, so a job id with a newline in it
    cannot add a line that looks like the worker's."""

    def __init__(self, process_label: str | None = None) -> None:
        super().__init__()
        self.process_label = process_label

    def format(self, record: logging.LogRecord) -> str:
        process = "" if self.process_label is None else f"[{self.process_label} {record.process}] "
        line = (
            f"{_utc(record.created)} {record.levelname:<7} {process}{record.name}: "
            f"{_message(record)}"
        )
        job_id = getattr(record, "job_id", None)
        if job_id is not None:
            line += (
                f" [job={printable(job_id)} task={printable(getattr(record, 'task', None))} "
                f"queue={printable(getattr(record, 'queue', None))} "
                f"attempt={getattr(record, 'attempt', None)} "
                f"correlation={printable(getattr(record, 'correlation_id', None))}]"
            )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _message(record: logging.LogRecord) -> str:
    """The record's message with its text arguments escaped (see TextFormatter)."""
    args = record.args
    if isinstance(args, tuple) and any(isinstance(a, str) for a in args):
        escaped = tuple(printable(a) if isinstance(a, str) else a for a in args)
        return str(record.msg) % escaped  # as LogRecord.getMessage does
    return record.getMessage()


def configure_logging(
    level: str = "info", log_format: str = "text", *, process_label: str | None = None
) -> logging.Handler:
    """Send every logger (Conveyor's and the tasks' own) to stderr in `log_format`
    ("text" or "json"), timestamped in UTC. Lines logged while a job runs carry its id,
    task, queue, attempt and correlation id: as a `[job=...]` suffix in text, as fields
    in JSON. `process_label` names the process in text lines (see TextFormatter)."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: expected one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobLogFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter(process_label))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    return handler


def flush_all() -> None:
    """Flush log handlers and stdio; call before `os._exit`, which skips both."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing more to save
            pass

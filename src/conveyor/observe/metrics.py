"""Prometheus metrics: the golden signals of a job system (needs `conveyor[metrics]`).

Two sources, so nothing is counted twice:

* **Events**, counted where they happen by the `Metrics` middleware: jobs
  enqueued (producers), completed, failed by error type, retried, dead, in
  flight, run and wait duration (workers). `conveyor worker --metrics-port 9100`
  serves them.
* **State**, read from the backend at scrape time (`queue_state_text`): depth
  by queue and state, oldest waiting age, dead-letter depth, paused, live
  workers. One process should export it - the dashboard's `/metrics` does - since
  every process would report the same numbers.

Labels are queue, task and (for failures) error type; never a job id.

Several worker processes: separate `conveyor worker` processes each serve their
own port (`--metrics-port 9100`, `9101`, ...) and are their own scrape targets,
which keeps `up` per process and needs no shared state. A pool (`-p N`), whose
children are recycled and restarted, serves them all on one port from its
supervisor in prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR:
counters add up; in-flight sums the children not yet marked dead).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from conveyor.model.errors import QueueFull
from conveyor.observe.middleware import CallNext, EnqueueContext, ExecuteContext, MiddlewareContext
from conveyor.observe.minute_stats import outcome_names

if TYPE_CHECKING:
    from conveyor.model.job import Job

# Seconds; wide enough for queue waits of minutes and runs of an hour.
DURATION_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)


class JobMetrics:
    """The event metrics, registered on `registry` (prometheus_client's default
    registry unless given; tests pass their own)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = REGISTRY if registry is None else registry
        labels = ("queue", "task")
        self.enqueued = Counter(
            "conveyor_jobs_enqueued",
            "Jobs handed to enqueue (duplicates returned by dedup included, refused ones not).",
            labels,
            registry=reg,
        )
        self.refused = Counter(
            "conveyor_jobs_refused",
            "Jobs a full bounded queue refused at "
            "enqueue (QueueFull; a blocked producer's, once it gave up).",
            labels,
            registry=reg,
        )
        self.completed = Counter(
            "conveyor_jobs_completed", "Attempts that completed the job.", labels, registry=reg
        )
        self.failed = Counter(
            "conveyor_jobs_failed",
            "Attempts that failed, by error type (retried or dead).",
            (*labels, "error_type"),
            registry=reg,
        )
        self.retried = Counter(
            "conveyor_jobs_retried", "Failed attempts scheduled for a retry.", labels, registry=reg
        )
        self.dead = Counter(
            "conveyor_jobs_dead", "Jobs moved to the dead-letter queue.", labels, registry=reg
        )
        self.retries_deferred = Counter(
            "conveyor_retries_deferred",
            "Retries the task's retry budget moved to a later "
            "window (also counted in conveyor_jobs_retried).",
            labels,
            registry=reg,
        )
        self.in_flight = Gauge(
            "conveyor_jobs_in_flight",
            "Jobs running in this process.",
            labels,
            multiprocess_mode="livesum",
            registry=reg,
        )
        self.run_seconds = Histogram(
            "conveyor_job_run_seconds",
            "Time a handler ran, per attempt.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.wait_seconds = Histogram(
            "conveyor_job_wait_seconds",
            "Time from due (run_at) to claimed, per attempt.",
            labels,
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        # Defined here so every process exports the same name; a scheduler sets it.
        self.scheduler_lag = Gauge(
            "conveyor_scheduler_lag_seconds",
            "How late the scheduler enqueued its last due tick (now - planned time).",
            multiprocess_mode="max",
            registry=reg,
        )

    def observe_outcome(
        self, job: Job, outcome: tuple[str, ...], error_type: str | None, run_seconds: float
    ) -> None:
        labels = (job.queue, job.task)
        if "completed" in outcome:
            self.completed.labels(*labels).inc()
        if "failed" in outcome:
            self.failed.labels(*labels, error_type or "unknown").inc()
        if "retried" in outcome:
            self.retried.labels(*labels).inc()
        if "dead" in outcome:
            self.dead.labels(*labels).inc()
        self.run_seconds.labels(*labels).observe(run_seconds)
        if job.started_at is not None:
            self.wait_seconds.labels(*labels).observe(max(0.0, job.started_at - job.run_at))


class Metrics:
    """Middleware that counts enqueues and attempt outcomes.

    >>> app.middleware.append(Metrics())
    """

    def __init__(self, metrics: JobMetrics | None = None) -> None:
        self.metrics = metrics or default_metrics()

    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        if isinstance(ctx, EnqueueContext):
            refused: set[str] = set()
            try:
                await call_next(ctx)
            except QueueFull as full:
                refused = {r.id for r in full.refused}
                raise
            finally:
                for new in ctx.jobs_in:
                    counter = self.metrics.refused if new.id in refused else self.metrics.enqueued
                    counter.labels(new.queue, new.task).inc()
                    lag = scheduler_lag(new.meta)
                    if lag is not None:
                        self.metrics.scheduler_lag.set(lag)
            return
        await self._execute(call_next, ctx)

    async def _execute(self, call_next: CallNext, ctx: ExecuteContext) -> None:
        import time

        gauge = self.metrics.in_flight.labels(ctx.job.queue, ctx.job.task)
        gauge.inc()
        started = time.perf_counter()
        try:
            await call_next(ctx)
        finally:
            gauge.dec()
        settlement = ctx.settlement
        if settlement is not None:
            error_type = None if settlement.error is None else settlement.error.type
            self.metrics.observe_outcome(
                ctx.job, outcome_names(settlement), error_type, time.perf_counter() - started
            )
            if ctx.retry_deferred:
                self.metrics.retries_deferred.labels(ctx.job.queue, ctx.job.task).inc()


def scheduler_lag(meta: dict[str, object]) -> float | None:
    """Seconds between a scheduled job's planned tick and now, from the meta the
    scheduler stamps on its jobs (None for any other job)."""
    import time
    from datetime import datetime

    run = meta.get("schedule")  # conveyor.scheduling.schedules.SCHEDULE_META_KEY
    if not isinstance(run, dict) or not isinstance(run.get("tick"), str):
        return None
    try:
        tick = datetime.fromisoformat(str(run["tick"]).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, time.time() - tick.timestamp())


_DEFAULT: JobMetrics | None = None


def default_metrics() -> JobMetrics:
    """The process-wide metrics on prometheus_client's default registry (created once:
    a metric name can be registered only once per registry)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = JobMetrics()
    return _DEFAULT


def exposition_registry() -> CollectorRegistry:
    """What this process exports: its own registry, or every process's files in
    multiprocess mode (PROMETHEUS_MULTIPROC_DIR)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return registry
    return REGISTRY


def serve_metrics(port: int, addr: str = "127.0.0.1") -> MetricsServer:
    """Serve /metrics on `port` (0: any free port) from a daemon thread, for the
    worker's --metrics-port. `.port` is where it listens; `.close()` stops it."""
    default_metrics()
    server, thread = start_http_server(port, addr=addr, registry=exposition_registry())
    return MetricsServer(server, thread)


class MetricsServer:
    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self.server, self.thread = server, thread

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def mark_process_dead(pid: int | None = None) -> None:
    """In multiprocess mode, drop this process's live gauges when it exits."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())  # type: ignore[no-untyped-call]


__all__ = [
    "JobMetrics",
    "Metrics",
    "MetricsServer",
    "default_metrics",
    "mark_process_dead",
    "serve_metrics",
]

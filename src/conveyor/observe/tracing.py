"""OpenTelemetry tracing: a producer span per enqueued job, a consumer span per
attempt, in one trace (needs `conveyor[tracing]`, that is opentelemetry-api).

The producer span's context travels inside the job (`meta["trace"]`, W3C
`traceparent`/`tracestate` via the global propagator). Each attempt's consumer
span is its child and also links to it, as the messaging semantic conventions
suggest, so a retried job shows one process span per attempt under the enqueue.
Spans carry `messaging.system="conveyor"`, `messaging.destination.name` (queue),
`messaging.message.id` (job id), `messaging.operation.type`/`.name`, and
`conveyor.task`, `conveyor.job.attempt`, `conveyor.job.outcome`. Arguments are
never recorded.

>>> app = Conveyor(url, middleware=[Tracing()])
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import (
    Link,
    NoOpTracerProvider,
    ProxyTracerProvider,
    Span,
    SpanKind,
    Status,
    StatusCode,
)

from conveyor.model.job import JobState, NewJob
from conveyor.model.version import __version__
from conveyor.observe.middleware import CallNext, EnqueueContext, ExecuteContext, MiddlewareContext

TRACE_META_KEY = "trace"
SYSTEM = "conveyor"
# Seconds an "off" reading of the global provider stands: a provider set up while jobs
# run is seen by the jobs that start this long after it, at most.
OFF_RECHECK = 1.0


def _attributes(queue: str, job_id: str, task: str, operation: str, kind: str) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.message.id": job_id,
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.operation": kind,  # the older convention, still read by many backends
        "conveyor.task": task,
    }


class Tracing:
    """Middleware: producer spans on enqueue, consumer spans on execution."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("conveyor", __version__, tracer_provider=tracer_provider)
        self._own_provider = tracer_provider is not None
        self._off_until = 0.0  # monotonic time until which "off" is taken as read

    def _off(self) -> bool:
        """True while nothing would record a span: no provider given and none set
        globally (the API's placeholder) or the API's no-op one. Then the middleware
        only passes the call on: building spans nobody records was a large share of a
        no-op job's time in the worker (docs/performance.md). Read
        again after OFF_RECHECK seconds, since an SDK may be set up after the app is
        made: reading it costs an environment lookup (the API checks
        OTEL_PYTHON_TRACER_PROVIDER each time), which every job paid. The
        trace context still travels through such a process (`_pass_on`)."""
        if self._own_provider:
            return False
        now = time.monotonic()
        if now < self._off_until:
            return True
        off = isinstance(trace.get_tracer_provider(), (ProxyTracerProvider, NoOpTracerProvider))
        self._off_until = now + OFF_RECHECK if off else 0.0
        return off

    def passes_on(self, ctx: MiddlewareContext) -> bool:
        """An execution with nothing recording and no trace context to run in (see
        `_pass_on`): the chain leaves this layer out."""
        return (
            isinstance(ctx, ExecuteContext)
            and not isinstance(ctx.job.meta.get(TRACE_META_KEY), dict)
            and self._off()
        )

    async def __call__(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        if self._off():
            await self._pass_on(call_next, ctx)
        elif isinstance(ctx, EnqueueContext):
            await self._enqueue(call_next, ctx)
        else:
            await self._execute(call_next, ctx)

    async def _pass_on(self, call_next: CallNext, ctx: MiddlewareContext) -> None:
        """With nothing recording, a job that came with a trace context runs inside
        it, and the jobs it enqueues carry it on, as OpenTelemetry's API does in a
        process without an SDK: the trace stays one across an untraced worker. Jobs
        with no trace context pay one lookup."""
        if isinstance(ctx, EnqueueContext):
            current = trace.get_current_span().get_span_context()
            if current.is_valid:
                carrier: dict[str, str] = {}
                propagate.inject(carrier)
                ctx.jobs_in = [_with_meta(job, carrier) for job in ctx.jobs_in]
            await call_next(ctx)
            return
        carrier_in = ctx.job.meta.get(TRACE_META_KEY)
        if not isinstance(carrier_in, dict):
            await call_next(ctx)
            return
        token = otel_context.attach(propagate.extract(carrier_in))
        try:
            await call_next(ctx)
        finally:
            otel_context.detach(token)

    async def _enqueue(self, call_next: CallNext, ctx: EnqueueContext) -> None:
        spans: list[Span] = []
        stamped: list[NewJob] = []
        for job in ctx.jobs_in:
            span = self.tracer.start_span(
                f"send {job.queue}",
                kind=SpanKind.PRODUCER,
                attributes=_attributes(job.queue, job.id, job.task, "enqueue", "send"),
            )
            carrier: dict[str, str] = {}
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            spans.append(span)
            stamped.append(_with_meta(job, carrier))
        ctx.jobs_in = stamped
        try:
            await call_next(ctx)
        except BaseException as exc:
            for span in spans:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                span.end()
            raise
        # Backends answer in input order; a unique key may have returned another job.
        for span, sent, stored in zip(spans, ctx.jobs_in, ctx.jobs_out, strict=False):
            if stored.id != sent.id:
                span.set_attribute("conveyor.job.deduplicated_to", stored.id)
            span.end()
        for span in spans[len(ctx.jobs_out) :]:
            span.end()

    async def _execute(self, call_next: CallNext, ctx: ExecuteContext) -> None:
        job = ctx.job
        carrier = job.meta.get(TRACE_META_KEY)
        parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
        links: Sequence[Link] = ()
        if parent is not None:
            producer = trace.get_current_span(parent).get_span_context()
            if producer.is_valid:
                links = (Link(producer),)
        attributes: dict[str, str | int] = {
            **_attributes(job.queue, job.id, job.task, "process", "process"),
            "conveyor.job.attempt": job.attempt,
        }
        with self.tracer.start_as_current_span(
            f"process {job.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        ) as span:
            await call_next(ctx)
            settlement = ctx.settlement
            if settlement is None:
                return
            span.set_attribute("conveyor.job.outcome", settlement.state.value)
            error = settlement.error
            if error is not None and settlement.state is not JobState.CANCELLED:
                span.add_event(
                    "exception", {"exception.type": error.type, "exception.message": error.message}
                )
                span.set_status(Status(StatusCode.ERROR, f"{error.type}: {error.message}"))


def _with_meta(job: NewJob, carrier: dict[str, str]) -> NewJob:
    from dataclasses import replace

    return replace(job, meta={**job.meta, TRACE_META_KEY: carrier})

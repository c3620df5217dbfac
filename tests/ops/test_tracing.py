"""Producer span on enqueue, consumer span per attempt, one trace, linked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conformance.helpers import RunningWorker, wait_finished
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from conveyor import Conveyor, RetryOptions, current_job
from conveyor.observe.tracing import Tracing
from conveyor.worker import WorkerConfig

FAST = WorkerConfig(queues=("mail",), concurrency=2, poll_interval=0.05)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


async def test_enqueue_and_attempts_are_one_trace(
    app: Conveyor, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app.middleware.append(Tracing(provider))
    tracer = provider.get_tracer("test")

    @app.task(
        name="send",
        queue="mail",
        max_attempts=2,
        retry=RetryOptions(backoff_base=0.01, backoff_cap=0.01),
    )
    def send(address: str) -> None:
        with tracer.start_as_current_span("smtp"):
            if current_job().attempt == 1:
                raise ConnectionError("smtp down")

    with tracer.start_as_current_span("request") as request:
        handle = send.enqueue("a@example.org")  # the sync path: through the portal
    async with RunningWorker(app, FAST):
        await wait_finished(app, [handle.id])

    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}  # spans, read by attribute as the test needs
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    [producer] = by_name["send mail"]
    consumers = sorted(by_name["process mail"], key=lambda s: s.start_time or 0)  # type: ignore[attr-defined]
    smtp = by_name["smtp"]
    assert producer.kind is SpanKind.PRODUCER  # type: ignore[attr-defined]
    assert producer.parent.span_id == request.get_span_context().span_id  # type: ignore[attr-defined]
    trace_id = request.get_span_context().trace_id
    assert dict(producer.attributes) == {  # type: ignore[attr-defined]
        "messaging.system": "conveyor",
        "messaging.destination.name": "mail",
        "messaging.message.id": handle.id,
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.operation": "send",
        "conveyor.task": "send",
    }
    assert len(consumers) == 2 and len(smtp) == 2
    for attempt, consumer in enumerate(consumers, start=1):
        ctx = consumer.get_span_context()
        assert consumer.kind is SpanKind.CONSUMER
        assert ctx.trace_id == trace_id
        assert consumer.parent.span_id == producer.context.span_id  # type: ignore[attr-defined]
        assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]  # type: ignore[attr-defined]
        assert consumer.attributes["messaging.operation.type"] == "process"
        assert consumer.attributes["messaging.message.id"] == handle.id
        assert consumer.attributes["conveyor.job.attempt"] == attempt
    assert consumers[0].attributes["conveyor.job.outcome"] == "retryable"
    assert consumers[0].status.status_code is StatusCode.ERROR
    assert consumers[0].status.description == "ConnectionError: smtp down"
    assert consumers[1].attributes["conveyor.job.outcome"] == "completed"
    assert consumers[1].status.status_code is StatusCode.UNSET
    # The handler's own spans nest under the attempt's consumer span.
    assert sorted(s.parent.span_id for s in smtp) == sorted(  # type: ignore[attr-defined]
        c.context.span_id for c in consumers
    )
    # The trace context travels in the job, not in its arguments.
    job = await app.admin.get(handle.id)
    assert job is not None and set(job.meta["trace"]) == {"traceparent"}
    assert job.args == ["a@example.org"]


async def test_without_a_trace_the_job_starts_one(
    app: Conveyor, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app.middleware.append(Tracing(provider))

    @app.task(name="noop", queue="mail")
    def noop() -> None: ...

    handle = await noop.enqueue_async()
    async with RunningWorker(app, FAST):
        await wait_finished(app, [handle.id])
    producer = next(s for s in exporter.get_finished_spans() if s.name == "send mail")
    consumer = next(s for s in exporter.get_finished_spans() if s.name == "process mail")
    assert producer.parent is None
    assert consumer.context.trace_id == producer.context.trace_id  # type: ignore[union-attr]
    assert trace.get_current_span().get_span_context().is_valid is False


async def test_a_deduplicated_enqueue_names_the_job_it_got(
    app: Conveyor, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    app.middleware.append(Tracing(provider))

    @app.task(name="noop", queue="mail")
    def noop() -> None: ...

    first = await noop.options(unique_key="once").enqueue_async()
    second = await noop.options(unique_key="once").enqueue_async()
    assert second.id == first.id
    spans = [s for s in exporter.get_finished_spans() if s.name == "send mail"]
    assert len(spans) == 2
    assert "conveyor.job.deduplicated_to" not in spans[0].attributes  # type: ignore[operator]
    assert spans[1].attributes["conveyor.job.deduplicated_to"] == first.id  # type: ignore[index]


async def test_with_nothing_recording_the_trace_context_still_travels(
    app: Conveyor, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    # No provider given and none set globally: the middleware builds no spans, but a
    # job that came with a trace context runs in it and hands it to what it enqueues.
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    app.middleware.append(Tracing())
    seen: dict[str, int] = {}
    seen_child: list[str] = []

    @app.task(name="leaf", queue="mail")
    def leaf() -> None: ...

    @app.task(name="parent", queue="mail")
    async def parent() -> None:
        seen["trace_id"] = trace.get_current_span().get_span_context().trace_id
        child = await leaf.enqueue_async()
        seen_child.append(child.id)

    with provider.get_tracer("test").start_as_current_span("request") as request:
        handle = await parent.enqueue_async()
    untraced = await leaf.enqueue_async()  # outside any trace: nothing is added
    async with RunningWorker(app, FAST):
        await wait_finished(app, [handle.id, untraced.id])
        await wait_finished(app, seen_child)
    trace_id = request.get_span_context().trace_id
    assert seen["trace_id"] == trace_id
    stored = await app.admin.get(handle.id)
    child = await app.admin.get(seen_child[0])
    plain = await app.admin.get(untraced.id)
    assert stored is not None and child is not None and plain is not None
    assert set(stored.meta["trace"]) == {"traceparent"}
    assert child.meta["trace"]["traceparent"].split("-")[1] == f"{trace_id:032x}"
    assert "trace" not in plain.meta
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]

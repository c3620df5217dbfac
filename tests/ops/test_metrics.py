"""Prometheus metrics from events (middleware) and from backend state (scrape time)."""

from __future__ import annotations

from conformance.helpers import RunningWorker, eventually, wait_finished
from prometheus_client import CollectorRegistry

from conveyor import Conveyor, Limits, RetryOptions, current_job
from conveyor.backends.claiming import QueuePlan
from conveyor.observe.metrics import JobMetrics, Metrics
from conveyor.ops.queue_state import queue_state_text
from conveyor.worker import WorkerConfig

FAST = WorkerConfig(queues=("default", "mail"), concurrency=4, poll_interval=0.05)


async def test_outcomes_are_counted_by_queue_task_and_error_type(app: Conveyor) -> None:
    registry = CollectorRegistry()
    app.middleware.append(Metrics(JobMetrics(registry)))

    @app.task(name="ok", queue="mail")
    def ok() -> None: ...

    @app.task(name="flaky", max_attempts=2, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.01))
    def flaky() -> None:
        if current_job().attempt == 1:
            raise ConnectionError("later")

    @app.task(name="bad")
    def bad(x: int) -> None:
        raise ValueError("never")

    ids = [
        (await ok.enqueue_async()).id,
        (await ok.enqueue_async()).id,
        (await flaky.enqueue_async()).id,
        (await bad.enqueue_async(1)).id,
    ]
    async with RunningWorker(app, FAST):
        await wait_finished(app, ids)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("conveyor_jobs_enqueued_total", queue="mail", task="ok") == 2
    assert value("conveyor_jobs_enqueued_total", queue="default", task="bad") == 1
    assert value("conveyor_jobs_completed_total", queue="mail", task="ok") == 2
    assert value("conveyor_jobs_completed_total", queue="default", task="flaky") == 1
    assert (
        value(
            "conveyor_jobs_failed_total",
            queue="default",
            task="flaky",
            error_type="ConnectionError",
        )
        == 1
    )
    assert value("conveyor_jobs_retried_total", queue="default", task="flaky") == 1
    assert (
        value("conveyor_jobs_failed_total", queue="default", task="bad", error_type="ValueError")
        == 1
    )
    assert value("conveyor_jobs_dead_total", queue="default", task="bad") == 1
    assert value("conveyor_jobs_dead_total", queue="default", task="flaky") is None
    assert value("conveyor_job_run_seconds_count", queue="default", task="flaky") == 2
    assert value("conveyor_job_wait_seconds_count", queue="mail", task="ok") == 2
    assert value("conveyor_jobs_in_flight", queue="mail", task="ok") == 0
    # No job id anywhere in the label sets.
    for metric in registry.collect():
        for sample in metric.samples:
            assert not set(sample.labels.values()) & set(ids)


async def test_queue_state_gauges(app: Conveyor) -> None:
    @app.task(name="ok", queue="mail")
    def ok() -> None: ...

    await ok.enqueue_async()
    await ok.enqueue_async()
    await app.admin.pause("mail")
    text = (await queue_state_text(app)).decode()
    lines = set(text.splitlines())
    assert 'conveyor_queue_jobs{queue="mail",state="available"} 2.0' in lines
    assert 'conveyor_queue_jobs{queue="mail",state="dead"} 0.0' in lines
    assert 'conveyor_queue_dead_letter_jobs{queue="mail"} 0.0' in lines
    assert 'conveyor_queue_paused{queue="mail"} 1.0' in lines
    assert "conveyor_workers_up 0.0" in lines
    oldest = next(
        line for line in lines if line.startswith("conveyor_queue_oldest_waiting_seconds")
    )
    assert 0.0 <= float(oldest.split()[-1]) < 60


async def test_throttled_jobs_are_a_gauge(app: Conveyor) -> None:
    @app.task(name="charge", queue="payments", limits=Limits(rate_limit="1/m"))
    def charge() -> None: ...

    @app.task(name="plain", queue="payments")
    def plain() -> None: ...

    for _ in range(3):
        await charge.enqueue_async()
    await plain.enqueue_async()
    backend = await app.backend()
    plan = QueuePlan(["payments"])
    claimed = await backend.fetch_jobs(
        plan.request(10, "w1", 30.0, rate_limits=app.rate_limits.declared)
    )
    assert sorted(job.task for job in claimed) == ["charge", "plain"]  # one token
    lines = set((await queue_state_text(app)).decode().splitlines())
    assert 'conveyor_queue_throttled_jobs{queue="payments"} 2.0' in lines
    assert 'conveyor_queue_jobs{queue="payments",state="available"} 2.0' in lines


async def test_jobs_held_by_their_key_are_a_gauge(app: Conveyor) -> None:
    @app.task(name="sync_user", queue="accounts", limits=Limits(concurrency_key="user:{user_id}"))
    def sync_user(user_id: int) -> None: ...

    for user_id in (1, 1, 1, 2):
        await sync_user.enqueue_async(user_id)
    lines = set((await queue_state_text(app)).decode().splitlines())
    # One slot per user: user 1's first job holds it, its other two wait for it.
    assert 'conveyor_queue_held_by_key_jobs{queue="accounts"} 2.0' in lines
    assert 'conveyor_queue_jobs{queue="accounts",state="available"} 4.0' in lines


async def test_scheduled_enqueues_go_through_middleware_and_set_scheduler_lag(
    app: Conveyor,
) -> None:
    from datetime import timedelta

    from conveyor.scheduling.scheduler import Scheduler

    registry = CollectorRegistry()
    app.middleware.append(Metrics(JobMetrics(registry)))

    @app.periodic(every=timedelta(seconds=1))
    @app.task(name="report", queue="reports")
    def report() -> None: ...

    scheduler = Scheduler(app)
    found: list[object] = []

    async def a_tick_enqueued() -> bool:
        found.extend(await scheduler.tick())
        return bool(found)

    await eventually(a_tick_enqueued, timeout=10, interval=0.05)
    assert registry.get_sample_value(
        "conveyor_jobs_enqueued_total", {"queue": "reports", "task": "report"}
    ) == len(found)
    lag = registry.get_sample_value("conveyor_scheduler_lag_seconds")
    assert lag is not None and 0.0 <= lag < 2.0  # enqueued within moments of its tick


async def test_refused_jobs_are_counted_apart_from_enqueued_ones(app: Conveyor) -> None:
    import pytest

    from conveyor.model.errors import QueueFull

    registry = CollectorRegistry()
    app.middleware.append(Metrics(JobMetrics(registry)))
    app.queue("mail", max_waiting=3)

    @app.task(name="send", queue="mail")
    def send(n: int) -> None: ...

    with pytest.raises(QueueFull):
        await app.enqueue_many_async([send.message(n) for n in range(5)])
    with pytest.raises(QueueFull):
        await send.enqueue_async(6)
    assert (
        registry.get_sample_value("conveyor_jobs_enqueued_total", {"queue": "mail", "task": "send"})
        == 3
    )
    assert (
        registry.get_sample_value("conveyor_jobs_refused_total", {"queue": "mail", "task": "send"})
        == 3
    )


async def test_retries_the_budget_moved_are_counted(app: Conveyor) -> None:
    from conveyor import RetryBudget

    registry = CollectorRegistry()
    app.middleware.append(Metrics(JobMetrics(registry)))

    # A day's window: the retries' own window is this one (but for one run in 86,400).
    @app.task(
        name="down",
        max_attempts=2,
        retry=RetryOptions(
            backoff_base=0.01,
            backoff_cap=0.01,
            budget=RetryBudget(share=0, minimum=2, window=86_400),
        ),
    )
    def down() -> None:
        raise ConnectionError("down")

    ids = [h.id for h in app.enqueue_many([down.message() for _ in range(5)])]
    async with RunningWorker(app, FAST):

        async def settled() -> bool:
            jobs = [await app.admin.get(i) for i in ids]
            states = sorted(j.state.value for j in jobs if j is not None)
            return states == ["dead", "dead", "retryable", "retryable", "retryable"]

        await eventually(settled)

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, {"queue": "default", "task": "down"})

    # Two retries fit the budget, ran and failed again (their last attempt: dead);
    # the other three wait for a later window.
    assert value("conveyor_jobs_retried_total") == 5
    assert value("conveyor_retries_deferred_total") == 3
    assert value("conveyor_jobs_dead_total") == 2


async def test_breakers_export_their_state_and_transitions(app: Conveyor) -> None:
    app.breaker("stripe", failures=5, window=60, cooldown=30)
    app.breaker("mailer", failures=5, window=60, cooldown=30)
    await app.admin.set_breaker("stripe", open=True)
    await app.admin.set_breaker("stripe", open=False)
    await app.admin.set_breaker("stripe", open=True)
    lines = set((await queue_state_text(app)).decode().splitlines())
    assert 'conveyor_breaker_state{breaker="stripe",state="open"} 1.0' in lines
    assert 'conveyor_breaker_state{breaker="stripe",state="closed"} 0.0' in lines
    assert 'conveyor_breaker_state{breaker="mailer",state="closed"} 1.0' in lines
    assert 'conveyor_breaker_transitions_total{breaker="stripe",to="open"} 2.0' in lines
    assert 'conveyor_breaker_transitions_total{breaker="stripe",to="closed"} 1.0' in lines
    assert 'conveyor_breaker_transitions_total{breaker="mailer",to="open"} 0.0' in lines

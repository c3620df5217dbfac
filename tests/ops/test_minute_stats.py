"""Per-minute throughput and latency written by workers, merged by readers."""

from __future__ import annotations

import math

from conformance.helpers import RunningWorker, eventually, wait_finished

from conveyor import Conveyor
from conveyor.backends.params import Settlement
from conveyor.model.job import AttemptError, Job, JobState
from conveyor.observe.minute_stats import Latency, MinuteRecorder, merge_records, minute_of
from conveyor.worker import WorkerConfig

FAST = WorkerConfig(queues=("default",), concurrency=4, poll_interval=0.05, stats_interval=0.05)


def job(queue: str = "default", run_at: float = 100.0, started_at: float = 102.0) -> Job:
    return Job(
        id="j",
        task="t",
        queue=queue,
        payload="{}",
        state=JobState.RUNNING,
        run_at=run_at,
        started_at=started_at,
        attempt=1,
    )


def settle(state: JobState) -> Settlement:
    err = (
        AttemptError(1, 0.0, "KeyError", "k")
        if state in (JobState.DEAD, JobState.RETRYABLE)
        else None
    )
    return Settlement("j", 1, state, error=err)


def test_latency_quantiles_are_bucket_upper_bounds() -> None:
    lat = Latency()
    for seconds in (0.003, 0.2, 0.2, 4.0):
        lat.observe(seconds)
    assert lat.count == 4 and math.isclose(lat.total, 4.403)
    assert lat.quantile(0.25) == 0.005
    assert lat.quantile(0.5) == 0.25
    assert lat.quantile(1.0) == 5.0
    assert Latency().quantile(0.5) is None


def test_records_of_several_workers_merge_by_minute_and_queue() -> None:
    a, b = MinuteRecorder("a"), MinuteRecorder("b")
    a.observe(job(), settle(JobState.COMPLETED), 0.5, now=60.0)
    a.observe(job(), settle(JobState.RETRYABLE), 0.1, now=70.0)
    b.observe(job(queue="mail"), settle(JobState.DEAD), 0.1, now=119.0)
    b.observe(job(), settle(JobState.COMPLETED), 0.1, now=125.0)
    b.observe(job(), settle(JobState.AVAILABLE), 0.1, now=125.0)  # snooze: not counted
    records = [value for _, value in a.take_dirty(130.0) + b.take_dirty(130.0)]
    assert a.take_dirty(130.0) == []  # nothing new since
    merged = merge_records([*records, "not json"], since=0)
    assert sorted(merged) == [60, 120]
    first = merged[60]
    assert first.queue("default").counts == {
        "completed": 1,
        "failed": 1,
        "retried": 1,
        "dead": 0,
        "cancelled": 0,
    }
    assert first.queue("mail").counts["dead"] == 1 and first.queue("mail").counts["failed"] == 1
    assert first.total().counts["failed"] == 2
    assert first.queue("default").wait.count == 2 and first.queue("default").wait.total == 4.0
    assert merged[120].total().counts["completed"] == 1
    assert merge_records(records, since=120).keys() == {120}


async def test_a_worker_writes_what_admin_throughput_reads(app: Conveyor) -> None:
    @app.task(name="ok")
    def ok() -> None: ...

    @app.task(name="bad")
    def bad() -> None:
        raise KeyError("missing")

    ids = [(await ok.enqueue_async()).id for _ in range(3)] + [(await bad.enqueue_async()).id]
    async with RunningWorker(app, FAST):
        await wait_finished(app, ids)

        async def written() -> bool:
            minutes = await app.admin.throughput(minutes=2)
            return sum(m.total().counts["completed"] for m in minutes) == 3

        await eventually(written)
    before = minute_of(app.clock())
    minutes = await app.admin.throughput(minutes=5)
    assert len(minutes) == 5 and minutes[-1].start in (before, minute_of(app.clock()))
    assert [m.start for m in minutes] == list(
        range(minutes[-1].start - 240, minutes[-1].start + 1, 60)
    )
    total = [m.total() for m in minutes]
    assert sum(t.counts["completed"] for t in total) == 3
    assert sum(t.counts["dead"] for t in total) == 1
    assert sum(t.run.count for t in total) == 4

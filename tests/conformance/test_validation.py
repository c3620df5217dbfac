"""Bad job values are refused the same way on every backend, before anything is stored;
values at the edges of the ranges are stored exactly (conveyor/model/validation.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Any

import pytest
from helpers import claim_one, new_job

from conveyor import Conveyor
from conveyor.backends.contract import Backend
from conveyor.backends.params import JobFilter
from conveyor.model.clock import ManualClock
from conveyor.model.errors import ConveyorError, InvalidJob
from conveyor.model.job import JobState, NewJob
from conveyor.model.validation import (
    MAX_ATTEMPTS_MAX,
    NAME_MAX,
    PRIORITY_MAX,
    PRIORITY_MIN,
    RUN_AT_MAX,
)

# (enqueue options, the field the error must name)
BAD_OPTIONS: list[tuple[dict[str, Any], str]] = [
    ({"priority": "high"}, "priority"),
    ({"priority": 2**31}, "priority"),
    ({"priority": -(2**31) - 1}, "priority"),
    ({"priority": 2**70}, "priority"),
    ({"priority": 1.5}, "priority"),
    ({"priority": True}, "priority"),
    ({"queue": ""}, "queue"),
    ({"queue": "emails\x00"}, "queue"),
    ({"queue": "a\nb"}, "queue"),
    ({"queue": "q" * (NAME_MAX + 1)}, "queue"),
    ({"job_id": ""}, "job_id"),
    ({"job_id": "a\x00b"}, "job_id"),
    ({"job_id": "\ud800"}, "job_id"),
    ({"job_id": 42}, "job_id"),
    ({"unique_key": ""}, "unique_key"),
    ({"meta": {"note": "a\x00b"}}, "meta"),
    ({"meta": {"a\x00": 1}}, "meta"),
    ({"meta": {"n": float("nan")}}, "meta"),
    ({"meta": {"when": datetime(2030, 1, 1)}}, "meta"),
    ({"meta": {1: "x"}}, "meta"),
    ({"meta": ["not", "a", "dict"]}, "meta"),
    ({"delay": -1}, "delay"),
    ({"delay": float("nan")}, "delay"),
    ({"delay": float("inf")}, "delay"),
    ({"delay": "soon"}, "delay"),
    ({"delay": timedelta(seconds=-5)}, "delay"),
    ({"timeout": 0}, "timeout"),
    ({"timeout": -3}, "timeout"),
    ({"timeout": float("inf")}, "timeout"),
    ({"unique_for": -1}, "unique_for"),
    ({"unique_for": float("nan")}, "unique_for"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"max_attempts": 2**31}, "max_attempts"),
    ({"max_attempts": "5"}, "max_attempts"),
    ({"run_at": datetime(2030, 1, 1)}, "run_at"),  # naive
    ({"run_at": datetime(1969, 12, 31, tzinfo=UTC)}, "run_at"),
    ({"run_at": datetime(9999, 1, 1, tzinfo=UTC)}, "run_at"),
    ({"run_at": float("nan")}, "run_at"),
]

# NewJob fields set by hand, past what task.options() lets through.
BAD_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"id": ""}, "id"),
    ({"id": "x\x00"}, "id"),
    ({"task": ""}, "task"),
    ({"queue": ""}, "queue"),
    ({"queue": None}, "queue"),
    ({"payload": '{"args":["\x00"],"kwargs":{}}'}, "payload"),
    ({"payload": None}, "payload"),
    ({"priority": 2**31}, "priority"),
    ({"priority": "1"}, "priority"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"run_at": float("inf")}, "run_at"),
    ({"run_at": -1.0}, "run_at"),
    ({"run_at": RUN_AT_MAX + 1}, "run_at"),
    ({"unique_for": -0.5}, "unique_for"),
    ({"timeout": 0.0}, "timeout"),
    ({"meta": None}, "meta"),
    ({"meta": {"k": "\x00"}}, "meta"),
]


def _ids(table: list[tuple[dict[str, Any], str]]) -> list[str]:
    return [" ".join(f"{k}={v!r}"[:40] for k, v in options.items()) for options, _ in table]


async def _nothing_stored(backend: Backend) -> None:
    assert await backend.count_jobs(JobFilter()) == 0


@pytest.mark.parametrize(("options", "field"), BAD_OPTIONS, ids=_ids(BAD_OPTIONS))
async def test_bad_option_is_refused_and_nothing_is_stored(
    app: Conveyor, backend: Backend, options: dict[str, Any], field: str
) -> None:
    @app.task(name="noop")
    def noop() -> None: ...

    with pytest.raises(InvalidJob) as refused:
        await noop.options(**options).enqueue_async()
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}=")
    assert "expected" in str(refused.value)
    assert isinstance(refused.value, ValueError) and isinstance(refused.value, ConveyorError)
    await _nothing_stored(backend)


@pytest.mark.parametrize(("fields", "field"), BAD_FIELDS, ids=_ids(BAD_FIELDS))
async def test_bad_job_built_by_hand_is_refused_with_its_whole_batch(
    app: Conveyor, backend: Backend, fields: dict[str, Any], field: str
) -> None:
    good = new_job(id="good")
    bad = new_job(**{"id": "bad", **fields})
    for enqueue in (app.enqueue_many_async, _sync(app)):
        with pytest.raises(InvalidJob) as refused:
            await enqueue([good, bad])
        assert refused.value.field == field
        assert f"{field}=" in str(refused.value)
    await _nothing_stored(backend)


def _sync(app: Conveyor) -> Any:
    """The sync facade (its own thread and loop), shaped like the async call."""

    async def enqueue(jobs: list[NewJob]) -> Any:
        return app.enqueue_many(jobs)

    return enqueue


async def test_priorities_at_both_ends_are_stored_exactly_and_claimed_in_order(
    app: Conveyor, backend: Backend
) -> None:
    @app.task(name="noop")
    def noop() -> None: ...

    for priority in (0, PRIORITY_MIN, PRIORITY_MAX, PRIORITY_MAX - 1, PRIORITY_MIN + 1):
        await noop.options(priority=priority, job_id=f"p{priority}").enqueue_async()
    for priority in (PRIORITY_MAX, PRIORITY_MAX - 1, 0, PRIORITY_MIN + 1, PRIORITY_MIN):
        job = await claim_one(backend)
        assert (job.id, job.priority) == (f"p{priority}", priority)
        stored = await backend.get_job(job.id)
        assert stored is not None and stored.priority == priority


async def test_values_at_the_edges_are_stored_exactly(
    app: Conveyor, backend: Backend, clock: ManualClock
) -> None:
    class Urgency(IntEnum):
        HIGH = 7

    @app.task(name="noop")
    def noop() -> None: ...

    long_id = "é" * NAME_MAX  # characters, not bytes
    meta = {"note": "ünïcode ✓ \\u0000 is text here", "nested": {"list": [1, 2.5, None, True]}}
    edge = datetime.fromtimestamp(RUN_AT_MAX, tz=UTC)
    await noop.options(
        job_id=long_id,
        queue="q" * NAME_MAX,
        priority=Urgency.HIGH,
        max_attempts=MAX_ATTEMPTS_MAX,
        meta=meta,
        unique_key="k" * NAME_MAX,
        unique_for=0,
        timeout=timedelta(microseconds=1),
    ).enqueue_async()
    await noop.options(job_id="last", run_at=edge).enqueue_async()
    await noop.options(job_id="now", delay=0).enqueue_async()

    stored = await backend.get_job(long_id)
    assert stored is not None
    assert (stored.queue, stored.priority, type(stored.priority)) == ("q" * NAME_MAX, 7, int)
    assert stored.max_attempts == MAX_ATTEMPTS_MAX and stored.meta == meta
    assert (stored.unique_key, stored.unique_for, stored.timeout) == ("k" * NAME_MAX, 0, 1e-6)
    last = await backend.get_job("last")
    assert last is not None and last.state is JobState.SCHEDULED and last.run_at == RUN_AT_MAX
    now = await backend.get_job("now")
    assert now is not None and now.state is JobState.AVAILABLE and now.run_at == clock.now

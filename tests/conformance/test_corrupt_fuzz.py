"""Fuzz: random bytes, text and numbers written into every stored field of waiting
jobs while a worker runs, on each backend. Whatever the bytes, the healthy jobs of
the same batch complete exactly once, no damaged job runs more than once, and the
worker keeps claiming (a job enqueued afterwards runs).

Each example puts one damaged job per stored field (raw_store.py: raw SQL, a raw
HSET; a value the schema refuses leaves that job healthy) in a paused queue next
to healthy ones, then lets the worker claim them all in one batch. A damaged job
then ends in one of these ways, and no other:

* completed, run once: the bytes were harmless, or were in a field a claim
  rewrites (attempt, lease token, started_at, ...; on Redis also state and queue);
* dead without running: CorruptJob naming the field (CorruptPayload for a payload
  that is not JSON args, UnknownTask for a task name no one registered), or a time
  limit (a random timeout, run once);
* not claimed at all, only when the bytes moved it: into another state or, in the
  SQL backends (where the column is where the job is), another queue.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from backends_under_test import BACKENDS, CLEANUPS
from helpers import RunningWorker, eventually, new_job
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_store import RawValue, raw_store

from conveyor import Conveyor
from conveyor.backends.codec import COLUMNS
from conveyor.backends.params import JobFilter, JobPage, QueuePause
from conveyor.model.job import JobState
from conveyor.worker import WorkerConfig

HEALTHY = 8
CORRUPT_TYPES = {"CorruptJob", "CorruptPayload"}
TIME_LIMITS = {"SoftTimeLimitExceeded", "HardTimeLimitExceeded", "JobTimeout"}

RAW = st.one_of(
    st.binary(max_size=24),
    st.text(max_size=24),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.none(),
    st.sampled_from(
        [
            "",
            "[]",
            "{}",
            "null",
            "[1]",
            '{"a":',
            "[" * 5_000,
            "-1",
            "0",
            "1",
            "1e309",
            "running",
            "dead",
            "scheduled",
            '{"args": [], "kwargs": {}}',
        ]
    ),
)


def fields_of(backend_name: str) -> tuple[str, ...]:
    return (*COLUMNS, "seq", *(("rank",) if backend_name == "redis" else ()))


def payload(*args: str) -> str:
    return json.dumps({"args": list(args), "kwargs": {}}, separators=(",", ":"))


async def scenario(url: str, backend_name: str, values: dict[str, RawValue]) -> None:
    queue = f"fuzz-{uuid.uuid4().hex[:8]}"
    app = Conveyor(url)
    calls: list[tuple[Any, ...]] = []

    @app.task(name="fuzz.record", queue=queue)
    def record(*args: Any, **kwargs: Any) -> None:
        calls.append(args)

    raw = raw_store(backend_name, url)
    try:
        backend = await app.backend()
        await backend.pause_queue(
            QueuePause(queue=queue, paused=True)
        )  # the whole batch lands in one claim
        healthy = [f"{queue}-ok-{i}" for i in range(HEALTHY)]
        targets = {field: f"{queue}-bad-{field}" for field in values}
        await backend.enqueue_jobs(
            [
                new_job(id=i, task="fuzz.record", queue=queue, payload=payload("ok", i))
                for i in healthy
            ]
            + [
                new_job(
                    id=job_id,
                    task="fuzz.record",
                    queue=queue,
                    max_attempts=1,
                    payload=payload("bad", field),
                )
                for field, job_id in targets.items()
            ]
        )
        written = {
            field
            for field, value in values.items()
            if await raw.write(
                targets[field], field, _unique_id(value, queue) if field == "id" else value
            )
        }
        config = WorkerConfig(
            queues=(queue,),
            concurrency=64,
            fetch_batch=100,
            poll_interval=0.05,
            rescue_interval=0.2,
            scheduler=False,
        )
        async with RunningWorker(app, config):
            await backend.pause_queue(QueuePause(queue=queue, paused=False))
            await eventually(lambda: _completed(backend, healthy), timeout=20)
            [later] = await backend.enqueue_jobs(
                [
                    new_job(
                        id=f"{queue}-later",
                        task="fuzz.record",
                        queue=queue,
                        payload=payload("ok", f"{queue}-later"),
                    )
                ]
            )
            await eventually(lambda: _completed(backend, [later.id]), timeout=20)
            await eventually(lambda: _none_running(backend, queue), timeout=20)

        ok_calls = sorted(c[1] for c in calls if len(c) == 2 and c[0] == "ok")
        assert ok_calls == sorted([*healthy, f"{queue}-later"])  # each exactly once
        bad_calls = [c[1] for c in calls if len(c) == 2 and c[0] == "bad"]
        other_calls = [c for c in calls if not (len(c) == 2 and c[0] in ("ok", "bad"))]
        assert len(bad_calls) == len(set(bad_calls))  # no damaged job ran twice
        assert len(other_calls) <= 1 and (not other_calls or "payload" in written)

        listed = {
            j.id: j
            for j in await backend.list_jobs(JobPage(where=JobFilter(queues=(queue,)), limit=1000))
        }
        assert await backend.count_jobs(JobFilter(queues=(queue,))) == len(listed)
        await backend.queue_stats()
        for field, job_id in targets.items():
            job = await backend.get_job(job_id)
            if job is None:  # renamed: its id was the field written (SQL backends)
                assert field == "id" and field in written
                [job] = await backend.list_jobs(
                    JobPage(where=JobFilter(queues=(queue,), args_contains='"bad","id"'), limit=5)
                )
            ran = bad_calls.count(field) + (len(other_calls) if field == "payload" else 0)
            where = f"{field}={values[field]!r} -> {job}"
            assert ran <= 1, where
            if job.state is JobState.COMPLETED and field == "state" and ran == 0:
                assert field in written, where  # the bytes moved it there: never claimed
            elif job.state is JobState.COMPLETED:
                assert ran == 1 and job.corrupt is None, where
            elif job.state is JobState.DEAD and job.errors:
                kind = job.errors[-1].type
                if kind in TIME_LIMITS:
                    assert field == "timeout", where
                elif kind == "UnknownTask":
                    assert field == "task" and ran == 0, where
                else:
                    assert kind in CORRUPT_TYPES and ran == 0, where
                    assert field in job.errors[-1].message or kind == "CorruptPayload", where
            else:  # never claimed: the bytes moved the job (another queue, another state,
                # a rate limit bucket this worker does not declare: the job waits for one)
                assert field in written and ran == 0, where
                assert field in ("state", "rate_key") or (
                    field == "queue" and backend_name != "redis"
                ), where
            assert job.state is not JobState.RUNNING, where
    finally:
        await raw.close()
        await app.aclose()


def _unique_id(value: RawValue, queue: str) -> RawValue:
    """An id value made unique to the example (the same bytes written by an earlier
    example would collide with that job, and be refused)."""
    if isinstance(value, bytes):
        return value + b"-" + queue.encode()
    return None if value is None else f"{value}-{queue}"


async def _completed(backend: Any, ids: list[str]) -> bool:
    for job_id in ids:
        job = await backend.get_job(job_id)
        if job is None or job.state is not JobState.COMPLETED:
            return False
    return True


async def _none_running(backend: Any, queue: str) -> bool:
    return await backend.count_jobs(JobFilter(queues=(queue,), states=(JobState.RUNNING,))) == 0


def test_random_bytes_in_any_field_touch_no_other_job(backend_name: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="conveyor-fuzz-"))
    url = asyncio.run(BACKENDS[backend_name](folder))
    fields = fields_of(backend_name)

    @settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.fixed_dictionaries({field: RAW for field in fields}))
    def example(values: dict[str, RawValue]) -> None:
        asyncio.run(scenario(url, backend_name, values))

    try:
        example()
    finally:
        cleanup = CLEANUPS.get(backend_name)
        if cleanup is not None:
            asyncio.run(cleanup(url))
        shutil.rmtree(folder, ignore_errors=True)

"""Each failed attempt records the application's version, on every backend: the
dead letters say which deploy failed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from helpers import RunningWorker, wait_finished

from conveyor import Conveyor, RetryOptions
from conveyor.model.job import JobState
from conveyor.worker import WorkerConfig


@pytest.fixture
async def versioned_app(backend_url: str) -> AsyncIterator[Conveyor]:
    app = Conveyor(backend_url, version="1.4.2")
    yield app
    await app.aclose()
    app.close()


async def test_failed_attempts_record_the_app_version(versioned_app: Conveyor) -> None:
    @versioned_app.task(
        name="import_sku", max_attempts=2, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.02)
    )
    def import_sku(sku: str) -> None:
        raise ConnectionError(f"catalog down for {sku}")

    handle = await import_sku.enqueue_async("A-1")
    config = WorkerConfig(poll_interval=0.05, rescue_interval=0.1, lease=5)
    async with RunningWorker(versioned_app, config):
        job = (await wait_finished(versioned_app, [handle.id]))[handle.id]
    assert job.state is JobState.DEAD
    assert [(e.attempt, e.type, e.app_version) for e in job.errors] == [
        (1, "ConnectionError", "1.4.2"),
        (2, "ConnectionError", "1.4.2"),
    ]
    assert all(e.version for e in job.errors)  # Conveyor's own, beside it

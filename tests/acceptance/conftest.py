from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from acceptance_support import Runs, WorkerProcess
from backends_under_test import CLEANUPS, SHARED_BACKENDS


@pytest.fixture(params=sorted(SHARED_BACKENDS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An isolated backend URL per test, cleaned up afterwards, for every backend that
    worker processes can share."""
    made = asyncio.run(SHARED_BACKENDS[request.param](tmp_path))
    yield made
    cleanup = CLEANUPS.get(request.param)
    if cleanup is not None:
        asyncio.run(cleanup(made))


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "runs.log")


@pytest.fixture
def workers(runs: Runs) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.kill()

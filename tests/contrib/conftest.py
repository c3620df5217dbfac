"""Fixtures of the framework integration tests: Conveyor on SQLite and on the test
PostgreSQL (a fresh schema each), as each integration is tested against both."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends_under_test import BACKENDS, CLEANUPS

INTEGRATION_BACKENDS = ("sqlite", "postgres")


@pytest.fixture(params=INTEGRATION_BACKENDS)
def conveyor_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    name = str(request.param)
    url = asyncio.run(BACKENDS[name](tmp_path))
    yield url
    cleanup = CLEANUPS.get(name)
    if cleanup is not None:
        asyncio.run(cleanup(url))

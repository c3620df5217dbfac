from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from backends_under_test import BACKENDS, CLEANUPS
from conveyor import Conveyor
from conveyor.backends.base import Backend
from conveyor.timeutil import ManualClock


@pytest.fixture(params=sorted(BACKENDS))
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def backend_url(backend_name: str, tmp_path: Path) -> AsyncIterator[str]:
    url = await BACKENDS[backend_name](tmp_path)
    yield url
    cleanup = CLEANUPS.get(backend_name)
    if cleanup is not None:
        await cleanup(url)


@pytest.fixture
async def app(backend_url: str, clock: ManualClock) -> AsyncIterator[Conveyor]:
    app = Conveyor(backend_url, clock=clock)
    yield app
    await app.aclose()
    app.close()


@pytest.fixture
async def backend(app: Conveyor) -> Backend:
    return await app.backend()


@pytest.fixture
async def live_app(backend_url: str) -> AsyncIterator[Conveyor]:
    """An app on the real clock, for tests that run a worker."""
    app = Conveyor(backend_url)
    yield app
    await app.aclose()
    app.close()

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from backends_under_test import BACKENDS, CLEANUPS
from raw_store import RawStore, raw_store

from conveyor import Conveyor
from conveyor.backends.contract import Backend
from conveyor.model.clock import ManualClock


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


@pytest.fixture
async def raw(backend_name: str, backend_url: str, backend: Backend) -> AsyncIterator[RawStore]:
    """Writes into stored fields behind Conveyor's back (raw_store.py); the backend
    is opened first, so its schema exists."""
    store = _raw_store_or_skip(backend_name, backend_url)
    yield store
    await store.close()


def _raw_store_or_skip(backend_name: str, url: str) -> RawStore:
    try:
        return raw_store(backend_name, url)
    except LookupError as exc:  # a backend joins these tests by adding its raw writer
        pytest.skip(str(exc))


@pytest.fixture
async def raw_live(
    backend_name: str, backend_url: str, live_app: Conveyor
) -> AsyncIterator[RawStore]:
    """`raw` for the tests that run a worker (on `live_app`)."""
    await live_app.backend()
    store = _raw_store_or_skip(backend_name, backend_url)
    yield store
    await store.close()

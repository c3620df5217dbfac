from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends_under_test import BACKENDS, CLEANUPS
from dashboard_fixtures import local_client, make_app, seed
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.web import create_dashboard


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Conveyor]:
    app = make_app(tmp_path)
    yield app
    app.close()


@pytest.fixture
def seeded(app: Conveyor) -> dict[str, list[str]]:
    return seed(app)


@pytest.fixture
def client(app: Conveyor) -> Iterator[TestClient]:
    with local_client(create_dashboard(app)) as client:
        yield client


def _backend_app(name: str, path: Path) -> Iterator[Conveyor]:
    url = asyncio.run(BACKENDS[name](path))
    app = make_app(path, url)
    yield app
    app.close()
    cleanup = CLEANUPS.get(name)
    if cleanup is not None:
        asyncio.run(cleanup(url))


@pytest.fixture(params=sorted(BACKENDS))
def any_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    """The dashboard's app on each backend of the conformance registry."""
    yield from _backend_app(str(request.param), tmp_path)


@pytest.fixture(params=sorted(set(BACKENDS) - {"postgres"}))
def app_storing_nul(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Conveyor]:
    """The backends whose text can hold a NUL byte (PostgreSQL's cannot, so no such
    id can ever be stored there): for what an older version may have left behind."""
    yield from _backend_app(str(request.param), tmp_path)


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def shared_app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Conveyor]:
    """One app per backend for a whole module, for tests that change nothing."""
    yield from _backend_app(str(request.param), tmp_path_factory.mktemp(str(request.param)))

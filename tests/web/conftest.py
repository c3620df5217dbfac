from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from conveyor import Conveyor
from conveyor.web import create_dashboard
from dashboard_fixtures import LOCAL, make_app, seed


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
    with TestClient(create_dashboard(app), client=LOCAL) as client:
        yield client



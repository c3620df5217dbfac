from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from conveyor import Conveyor


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Conveyor]:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    yield app
    await app.aclose()
    app.close()

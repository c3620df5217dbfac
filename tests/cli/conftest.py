from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import Cli

from conveyor import Conveyor


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def cli(db_url: str, tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(db_url, tmp_path)
    yield runner
    runner.cleanup()


@pytest.fixture
def inspector(db_url: str) -> Iterator[Conveyor]:
    """An app without tasks on the test's database, to watch jobs from the test."""
    app = Conveyor(db_url)
    yield app
    app.close()

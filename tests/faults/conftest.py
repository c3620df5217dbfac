from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends_under_test import BACKENDS
from harness import TABLE, WorkerGroup, render_table


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, tmp_path: Path) -> str:
    return asyncio.run(BACKENDS[backend](tmp_path))


@pytest.fixture
def groups() -> Iterator[list[WorkerGroup]]:
    """Worker process groups a test started; each is killed whole at the end."""
    started: list[WorkerGroup] = []
    yield started
    for group in started:
        group.kill()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TABLE:
        return
    terminalreporter.section("fault injection: lost / completed more than once / recovery")
    for line in render_table():
        terminalreporter.write_line(line)

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import backends_under_test
import pytest
from backends_under_test import SHARED_BACKENDS
from harness import TABLE, Runs, WorkerGroup, render_table


@pytest.fixture(params=sorted(SHARED_BACKENDS))
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(backend: str, tmp_path: Path) -> Iterator[str]:
    isolated = asyncio.run(SHARED_BACKENDS[backend](tmp_path))
    yield isolated
    cleanup = getattr(backends_under_test, "CLEANUPS", {}).get(backend)
    if cleanup is not None:  # a backend whose isolation leaves something behind
        asyncio.run(cleanup(isolated))


@pytest.fixture
def runs(tmp_path: Path) -> Runs:
    return Runs(tmp_path / "runs.log")


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

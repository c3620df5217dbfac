"""The pytest plugin of conveyor.testing, loaded by pytest through the
`pytest11` entry point (or `-p conveyor.testing`). Its fixtures need no server.

* `conveyor_clock`: the test clock of the test's app.
* `conveyor_app`: an app on a fresh memory backend with that clock. With the ini
  option `conveyor_app = myproject.jobs:app` it is your own app instead, pointed
  at a fresh memory backend for the test (and back afterwards).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from conveyor.app import Conveyor
from conveyor.ops.loading import load_app
from conveyor.testing.clock import TestClock
from conveyor.testing.harness import use_memory


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "conveyor_app",
        "your Conveyor app as module:attribute, for the "
        "conveyor_app fixture (default: a new app with no tasks)",
        default="",
    )


@pytest.fixture
def conveyor_clock() -> TestClock:
    """The time the test's app sees; it moves only when the test moves it."""
    return TestClock()


@pytest.fixture
def conveyor_app(request: pytest.FixtureRequest, conveyor_clock: TestClock) -> Iterator[Conveyor]:
    """An app on a memory backend of its own, on `conveyor_clock`: jobs wait until
    the test drains them (`drain(app)`), or run at once inside `with inline(app):`."""
    path = str(request.config.getini("conveyor_app"))
    app = load_app(path) if path else Conveyor("memory://", clock=conveyor_clock)
    with use_memory(app, conveyor_clock):
        yield app
    app.close()

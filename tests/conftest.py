"""Shared test plumbing.

Tests that need PostgreSQL or Redis skip with a reason when the server is not
reachable; with CONVEYOR_REQUIRE_SERVICES=1 (set by .ci/run) such a skip is a
failure instead, so CI always runs them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conveyor.model.clock import ManualClock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
# Worker processes the tests start import shared test helpers (runs_log) from here too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(ROOT / "tests"), *filter(None, [os.environ.get("PYTHONPATH")])]
)


def service_missing(reason: str) -> None:
    """Skip (locally) or fail (in CI) a test whose server is not there."""
    if os.environ.get("CONVEYOR_REQUIRE_SERVICES") == "1":
        pytest.fail(f"required service unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def clock() -> ManualClock:
    """The clock a test advances by hand; pass it to the app or backend under test."""
    return ManualClock()

"""Waiting on another process without sleeping as synchronisation: poll a check
until it holds, with a deadline that fails the test and says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.02) -> T:
    """Return check()'s first truthy value; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)

"""Testing an app's jobs without a server: a memory backend, a test clock, and the
real worker run in the test's process.

>>> def test_signup_sends_welcome(conveyor_app):       # the pytest plugin's fixture
...     signup(conveyor_app, "ada@example.org")
...     assert_enqueued(send_welcome, email="ada@example.org")
...     drained = drain(conveyor_app)
...     assert drained.states == {JobState.COMPLETED: 1}

See docs/testing.md. The pytest plugin (conveyor.testing.plugin) is loaded by
pytest on its own, through the package's entry point.
"""

from conveyor.testing.asserts import assert_enqueued, enqueued, refute_enqueued
from conveyor.testing.clock import TestClock
from conveyor.testing.drain import DrainDidNotEnd, Drained, drain, drain_async, inline
from conveyor.testing.harness import Attempt, use_memory

__all__ = [
    "Attempt",
    "DrainDidNotEnd",
    "Drained",
    "TestClock",
    "assert_enqueued",
    "drain",
    "drain_async",
    "enqueued",
    "inline",
    "refute_enqueued",
    "use_memory",
]

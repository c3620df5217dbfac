from __future__ import annotations

import random

from conveyor import Cancel
from conveyor.model.errors import ArgumentValidationError, CorruptPayload
from conveyor.rules.retry import RetryPolicy


def test_full_jitter_stays_within_the_capped_exponential_ceiling() -> None:
    policy = RetryPolicy(base=1.0, cap=60.0)
    rng = random.Random(7)
    for attempt in range(1, 12):
        ceiling = min(60.0, 2.0**attempt)
        delays = [policy.backoff(attempt, rng) for _ in range(2000)]
        assert all(0.0 <= d <= ceiling for d in delays)
        # Full jitter spreads over the whole range, not near the ceiling only.
        assert min(delays) < 0.05 * ceiling and max(delays) > 0.95 * ceiling


def test_huge_attempt_numbers_do_not_overflow() -> None:
    assert 0 <= RetryPolicy(base=2, cap=30).backoff(10_000) <= 30


def test_default_classification() -> None:
    policy = RetryPolicy()
    for transient in (ConnectionError(), TimeoutError(), OSError(), RuntimeError()):
        assert policy.is_transient(transient)
    for deterministic in (
        TypeError(),
        ValueError(),
        KeyError(),
        IndexError(),
        Cancel("x"),
        ArgumentValidationError("x"),
        CorruptPayload("x"),
    ):
        assert not policy.is_transient(deterministic)


def test_retry_on_and_dead_on_override() -> None:
    only = RetryPolicy(retry_on=(TimeoutError,))
    assert only.is_transient(TimeoutError()) and not only.is_transient(ConnectionError())
    assert only.is_transient(TimeoutError()) and not only.is_transient(ValueError())
    never = RetryPolicy(dead_on=(ConnectionRefusedError,))
    assert not never.is_transient(ConnectionRefusedError()) and never.is_transient(
        ConnectionResetError()
    )
    assert not RetryPolicy(retry_on=(Cancel,)).is_transient(Cancel("always dead"))

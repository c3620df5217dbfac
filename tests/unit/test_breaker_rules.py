"""Circuit breakers' declarations and state machine (conveyor.rules.breakers), pure."""

from __future__ import annotations

from datetime import timedelta

import pytest

from conveyor import BreakerError, Conveyor, Limits, Retry, Snooze
from conveyor.model.errors import ConfigurationError
from conveyor.rules.breakers import (
    CLOSED,
    HALF_OPEN,
    OPEN,
    Breaker,
    BreakerState,
    after_cooldown,
    after_failure,
    after_success,
    counts_as_failure,
)
from conveyor.rules.rate_limits import BURST_MAX, RATE_MAX, RateLimit
from conveyor.rules.retry import RetryPolicy

STRIPE = Breaker("stripe", failures=3, window=60.0, cooldown=30.0)


def test_a_task_behind_a_breaker_carries_its_bucket() -> None:
    app = Conveyor("memory://breaker-rules")
    app.breaker("stripe", failures=5, window=timedelta(seconds=60), cooldown=timedelta(seconds=30))

    @app.task(limits=Limits(breaker="stripe"))
    def charge() -> None: ...

    @app.task(limits=Limits(breaker="stripe", rate_key="stripe"))
    def refund() -> None: ...

    assert charge.defaults.rate_key == refund.defaults.rate_key == "stripe"
    assert app.breakers.get("stripe") == Breaker("stripe", 5, 60.0, 30.0)
    # A breaker without a rate limit is a bucket of unlimited rate while closed.
    assert app.breakers.claim_limits({}) == (RateLimit("stripe", RATE_MAX, BURST_MAX),)
    assert app.breakers.claim_limits({"stripe": OPEN}) == ()
    assert app.breakers.claim_limits({"stripe": HALF_OPEN}) == (RateLimit("stripe", 1 / 30, 1),)


def test_a_breaker_and_its_rate_limit_are_one_gate() -> None:
    app = Conveyor("memory://breaker-rules")
    app.breaker("stripe")
    app.rate_limit("other", "5/s")

    @app.task(limits=Limits(breaker="stripe", rate_limit="100/s"))
    def charge() -> None: ...

    assert app.breakers.claim_limits({}) == (
        RateLimit("other", 5.0, 5),
        RateLimit("stripe", 100.0, 100),
    )
    with pytest.raises(ConfigurationError, match="two gates"):
        app.task(limits=Limits(breaker="stripe", rate_key="other"))(lambda: None)
    with pytest.raises(ConfigurationError, match="not declared"):
        app.task(limits=Limits(breaker="mailer"))(lambda: None)


@pytest.mark.parametrize(
    "options",
    [
        {"failures": 0},
        {"failures": 1.5},
        {"window": 0},
        {"cooldown": -1},
        {"cooldown": float("nan")},
        {"window": "soon"},
    ],
)
def test_bad_declarations_are_refused(options: dict[str, object]) -> None:
    app = Conveyor("memory://breaker-rules")
    with pytest.raises(ConfigurationError, match="breaker 'stripe'"):
        app.breaker("stripe", **options)  # type: ignore[arg-type]


def test_what_counts_as_a_failure() -> None:
    default, only_timeouts = RetryPolicy(), RetryPolicy(retry_on=(TimeoutError,))
    assert counts_as_failure(ConnectionError(), default)
    assert not counts_as_failure(
        ValueError(), default
    )  # deterministic: the job, not the downstream
    assert counts_as_failure(BreakerError("503"), only_timeouts)
    assert not counts_as_failure(ConnectionError(), only_timeouts)
    assert not counts_as_failure(Retry(after=5), default)
    assert not counts_as_failure(Snooze(5), default)


def test_the_state_machine() -> None:
    state = BreakerState()
    for at in (0.0, 10.0):
        state = after_failure(STRIPE, state, at) or state
    assert state.state == CLOSED and state.failures == (0.0, 10.0)
    assert after_success(state, 11.0) is None
    opened = after_failure(STRIPE, state, 20.0)
    assert opened is not None and opened.state == OPEN and opened.opened_at == 20.0
    assert after_failure(STRIPE, opened, 21.0) is None  # a late failure changes nothing
    assert after_cooldown(STRIPE, opened, 49.9) is None
    half = after_cooldown(STRIPE, opened, 50.0)
    assert half is not None and half.state == HALF_OPEN
    reopened = after_failure(STRIPE, half, 51.0)
    assert reopened is not None and (reopened.state, reopened.opened_at) == (OPEN, 51.0)
    closed = after_success(after_cooldown(STRIPE, reopened, 81.0) or reopened, 82.0)
    assert closed is not None and closed.state == CLOSED
    assert [t.target for t in closed.history] == [OPEN, HALF_OPEN, OPEN, HALF_OPEN, CLOSED]
    assert closed.transitions == {OPEN: 2, HALF_OPEN: 2, CLOSED: 1}
    assert BreakerState.decode(closed.encode()) == closed


def test_an_unreadable_record_is_a_closed_breaker() -> None:
    for text in ("{", "[]", '{"state": 3}', '{"state": "open", "failures": "x"}'):
        assert BreakerState.decode(text) == BreakerState()

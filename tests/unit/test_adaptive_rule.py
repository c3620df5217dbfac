"""The adaptive concurrency rule (conveyor.rules.adaptive) without a store: the AIMD step,
what counts as a signal, the options' checks, and the warning for a task that calls
out with no limit (conveyor.worker.unlimited_calls)."""

from __future__ import annotations

import pytest

from conveyor import Adaptive, Conveyor, Limits
from conveyor.model.errors import ConfigurationError, SoftTimeLimitExceeded
from conveyor.rules.adaptive import LimitState, WindowCounts, http_status
from conveyor.worker.unlimited_calls import calls_out, unlimited_callers

RULE = Adaptive(min=2, max=10, increase=2, decrease=0.5)


class HTTPError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type("Response", (), {"status_code": status})()


@pytest.mark.parametrize(
    ("limit", "window", "saturated", "after_cut", "expected"),
    [
        (4, WindowCounts(ok=5), True, False, 6),  # additive increase
        (9, WindowCounts(ok=50), True, False, 10),  # never over max
        (4, WindowCounts(ok=5), False, False, 4),  # the limit was not used
        (4, WindowCounts(), True, False, 4),  # a quiet window
        (8, WindowCounts(ok=5, signals=1), True, False, 4),  # multiplicative decrease
        (3, WindowCounts(signals=1), True, False, 2),  # by at least one, never under min
        (2, WindowCounts(signals=9), True, False, 2),
        (8, WindowCounts(signals=1), True, True, 8),  # right after a cut: it stays
        (8, WindowCounts(ok=5), True, True, 10),  # ... but it may still grow
        (40, WindowCounts(), False, False, 10),  # clamped to the bounds (a redeploy)
    ],
)
def test_the_aimd_step(
    limit: int, window: WindowCounts, saturated: bool, after_cut: bool, expected: int
) -> None:
    assert RULE.next_limit(limit, window, saturated, after_cut) == expected


def test_successes_slower_than_the_target_cut_like_a_signal() -> None:
    rule = Adaptive(max=10, latency_target=0.5, decrease=0.5)
    assert rule.next_limit(8, WindowCounts(ok=4, latency_ms=2_400), True) == 4  # mean 0.6 s
    assert rule.next_limit(8, WindowCounts(ok=4, latency_ms=1_600), True) == 9  # mean 0.4 s


def test_what_counts_as_a_signal() -> None:
    rule = Adaptive()
    assert rule.is_signal(TimeoutError()) and rule.is_signal(SoftTimeLimitExceeded())
    assert rule.is_signal(HTTPError(429)) and rule.is_signal(HTTPError(503))
    assert not rule.is_signal(HTTPError(500)) and not rule.is_signal(ValueError())
    assert http_status(HTTPError(404)) == 404 and http_status(ValueError()) is None
    own = Adaptive(signals=(KeyError,))
    assert own.is_signal(KeyError()) and not own.is_signal(TimeoutError())


@pytest.mark.parametrize(
    "options",
    [
        {"min": 0},
        {"min": 5, "max": 4},
        {"start": 200},
        {"decrease": 1.0},
        {"decrease": 0},
        {"increase": 0},
        {"window": 0},
        {"latency_target": -1},
        {"signals": (int,)},
        {"signals": [TimeoutError]},
    ],
)
def test_bad_options_are_refused(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Adaptive(**options)  # type: ignore[arg-type]


def test_the_task_option() -> None:
    app = Conveyor("memory://adaptive-rule")

    @app.task(limits=Limits(adaptive=True))
    def plain(n: int) -> None: ...

    @app.task(limits=Limits(adaptive=Adaptive(min=3, max=9), concurrency_key="shop:{shop}"))
    def per_shop(shop: int) -> None: ...

    assert plain.defaults.concurrency is not None
    assert (
        plain.defaults.concurrency.fixed_key,
        plain.defaults.concurrency.limit,
        plain.defaults.concurrency.adaptive,
    ) == (f"task:{plain.name}", 1, Adaptive())
    rule = per_shop.defaults.concurrency
    assert rule is not None and rule.limit == 3 and rule.key((7,), {}) == "shop:7"
    for bad in (
        {"adaptive": True, "max_running": 3},
        {"adaptive": True, "concurrency_limit": 2},
        {"adaptive": 5},
    ):
        with pytest.raises(ConfigurationError):
            app.task(limits=Limits(**bad))(lambda: None)  # type: ignore[arg-type]


def test_a_limit_state_survives_its_record_and_a_damaged_one_is_none() -> None:
    state = LimitState(7, 3, 1_000.5, 990.0)
    assert LimitState.decode(state.encode()) == state
    for text in ("", "{}", '{"limit": 0, "version": 1, "since": 0, "cut_at": 0}', "[1]"):
        assert LimitState.decode(text) is None


def test_a_task_that_calls_out_with_no_limit_is_warned_about() -> None:
    app = Conveyor("memory://unlimited-calls")

    @app.task(retry_on=(ConnectionError,))
    def unlimited(n: int) -> None: ...

    @app.task(retry_on=(ConnectionError,), limits=Limits(rate_limit="10/s"))
    def rate_limited(n: int) -> None: ...

    @app.task(retry_on=(TimeoutError,), limits=Limits(adaptive=True))
    def adaptive(n: int) -> None: ...

    @app.task(retry_on=(ConnectionError,), limits=Limits(max_running=5))
    def capped(n: int) -> None: ...

    @app.task
    def retries_everything(n: int) -> None: ...

    app.queue("limited", rate_limit="5/s")

    @app.task(queue="limited", retry_on=(ConnectionResetError,))
    def queue_limited(n: int) -> None: ...

    assert unlimited_callers(app.tasks.values(), app.rate_limits, 20) == []
    warnings = unlimited_callers(app.tasks.values(), app.rate_limits, 100)
    assert len(warnings) == 1 and warnings[0].startswith(
        f"task {unlimited.name} retries on ConnectionError, so it calls out"
    )
    assert "concurrency 100" in warnings[0]
    assert calls_out((ValueError, ConnectionRefusedError)) == "ConnectionRefusedError"
    assert calls_out((ValueError,)) is None and calls_out(None) is None

"""Adaptive concurrency: a task's fleet-wide limit found by AIMD instead of set by hand.

`@app.task(limits=Limits(adaptive=True))` (or `adaptive=Adaptive(...)`) makes the task a concurrency
key, as `max_running=N` does, whose N the workers move: up by `increase` after a
window of successes that used the limit, down to `limit * decrease` after a window
with a *signal*: an attempt that raised one of `signals` (by default `TimeoutError`,
Conveyor's time limits, and an error carrying HTTP status 429 or 503, see
`is_signal`), or, with `latency_target`, successes whose mean duration was over it.
The limit stays within `min`..`max`. With `concurrency_key=` as well, each rendered
key has its own limit.

>>> @app.task(adaptive=Adaptive(min=1, max=20, latency_target=2.0))
... async def call_provider(order_id: int) -> None: ...

This module is the rule alone, without I/O: the workers' side (counting outcomes in
the shared records, one decision per window fleet-wide, writing the limit to the
backend) is `conveyor.downstreams.adaptive_controller`; docs/downstreams.md has the whole.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from conveyor.model.clock import Duration, to_seconds
from conveyor.model.errors import ConfigurationError, JobTimeout

# The HTTP statuses that say "too many" (429) or "over capacity" (503): what a
# downstream answers when the callers should slow down rather than retry harder.
SIGNAL_STATUSES = frozenset({429, 503})
DEFAULT_SIGNALS: tuple[type[BaseException], ...] = (TimeoutError, JobTimeout)
MAX_LIMIT = 1_000_000


def _positive_seconds(name: str, value: Duration | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = to_seconds(value)
    except TypeError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 86_400.0):
        raise ConfigurationError(f"adaptive {name}={value!r}: a duration over 0, at most a day")
    return seconds


@dataclass(frozen=True, slots=True, init=False)
class Adaptive:
    """How an adaptive task's limit moves (see the module docstring).

    `start` is the limit before the first decision (default `min`); `window` is how
    often the fleet decides, in seconds: make it at least a typical attempt's
    duration, so that a window sees the outcomes of the limit it judges."""

    min: int
    max: int
    start: int
    increase: int
    decrease: float
    signals: tuple[type[BaseException], ...]
    latency_target: float | None
    window: float

    def __init__(
        self,
        min: int = 1,
        max: int = 100,
        *,
        start: int | None = None,
        increase: int = 1,
        decrease: float = 0.9,
        signals: tuple[type[BaseException], ...] = DEFAULT_SIGNALS,
        latency_target: Duration | None = None,
        window: Duration = 1.0,
    ) -> None:
        for name, value in (("min", min), ("max", max), ("increase", increase)):
            if type(value) is not int or not 1 <= value <= MAX_LIMIT:
                raise ConfigurationError(
                    f"adaptive {name}={value!r}: a whole number from 1 to {MAX_LIMIT}"
                )
        if max < min:
            raise ConfigurationError(f"adaptive max={max} is under min={min}")
        first = min if start is None else start
        if type(first) is not int or not min <= first <= max:
            raise ConfigurationError(f"adaptive start={start!r}: a whole number from min to max")
        if (
            isinstance(decrease, bool)
            or not isinstance(decrease, (int, float))
            or not (0 < decrease < 1)
        ):
            raise ConfigurationError(f"adaptive decrease={decrease!r}: a factor between 0 and 1")
        if not isinstance(signals, tuple) or not all(
            isinstance(s, type) and issubclass(s, BaseException) for s in signals
        ):
            raise ConfigurationError(f"adaptive signals={signals!r}: a tuple of exception types")
        window_s = _positive_seconds("window", window)
        assert window_s is not None
        target = _positive_seconds("latency_target", latency_target)
        fields: tuple[tuple[str, object], ...] = (
            ("min", min),
            ("max", max),
            ("start", first),
            ("increase", increase),
            ("decrease", float(decrease)),
            ("signals", signals),
            ("latency_target", target),
            ("window", window_s),
        )
        for name, setting in fields:
            object.__setattr__(self, name, setting)

    def is_signal(self, error: BaseException) -> bool:
        """Whether an attempt that raised `error` says the downstream is overloaded:
        one of `signals`, or an error that carries HTTP status 429 or 503 (as
        `status_code` or `status`, on itself or on its `response`: httpx's and
        requests' HTTP errors, aiohttp's ClientResponseError, most SDKs' own)."""
        return isinstance(error, self.signals) or http_status(error) in SIGNAL_STATUSES

    def next_limit(
        self, limit: int, window: WindowCounts, saturated: bool, after_cut: bool = False
    ) -> int:
        """The limit after a window (the rule, exactly). A signal, or successes slower
        than `latency_target` on average, multiply it by `decrease` (rounded down, by
        at least 1, never under `min`), unless the window came right after a cut
        (`after_cut`): then it stays, as the jobs the higher limit admitted were still
        running through it. Else successes in a window that used the limit
        (`saturated`) add `increase` (never over `max`); else it stays."""
        limit = self.min if limit < self.min else self.max if limit > self.max else limit
        slow = (
            self.latency_target is not None
            and window.ok > 0
            and window.latency_ms / window.ok > self.latency_target * 1000.0
        )
        if window.signals > 0 or slow:
            if after_cut:
                return limit
            return max(self.min, min(limit - 1, math.floor(limit * self.decrease)))
        if window.ok > 0 and saturated:
            return min(self.max, limit + self.increase)
        return limit


def http_status(error: BaseException) -> int | None:
    """The HTTP status an error carries, if it says one (see Adaptive.is_signal)."""
    for holder in (error, getattr(error, "response", None)):
        for name in ("status_code", "status"):
            value = getattr(holder, name, None)
            if type(value) is int:
                return value
    return None


def adaptive_rule(value: bool | Adaptive | None) -> Adaptive | None:
    """`Limits(adaptive=...)`: True for the defaults, an Adaptive, or off."""
    if value is None or value is False:
        return None
    if value is True:
        return Adaptive()
    if isinstance(value, Adaptive):
        return value
    raise ConfigurationError(f"adaptive={value!r}: True or an Adaptive(...)")


@dataclass(slots=True)
class WindowCounts:
    """A window's outcomes, fleet-wide: successes, signals, successes' total duration."""

    ok: int = 0
    signals: int = 0
    latency_ms: int = 0


@dataclass(frozen=True, slots=True)
class LimitState:
    """A key's limit as the fleet shares it (one record per key): the limit, its
    version (one more per decision), when that decision was made, and when the limit
    last went down (signals of attempts started before it judged the older limit)."""

    limit: int
    version: int
    since: float
    cut_at: float

    def encode(self) -> str:
        return json.dumps(
            {
                "limit": self.limit,
                "version": self.version,
                "since": self.since,
                "cut_at": self.cut_at,
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str) -> LimitState | None:
        """None for a record that is not one (written by something else, or damaged)."""
        try:
            data = json.loads(text)
            state = cls(
                int(data["limit"]),
                int(data["version"]),
                float(data["since"]),
                float(data["cut_at"]),
            )
        except (ValueError, TypeError, KeyError):
            return None
        return state if state.limit >= 1 else None

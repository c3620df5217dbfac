"""Global rate limits (docs/flow-control.md): a token bucket per limit, kept in the
backend and spent inside the claim.

A limit is declared on the app, which producers and workers both import: named and
shared by several tasks (`app.rate_limit("stripe", "100/s")` and
`@app.task(limits=Limits(rate_key="stripe"))`), on one task (`Limits(rate_limit="10/s")`, bucket
`task:<name>`) or on a queue (`app.queue("bulk", rate_limit="10/s")`, bucket
`queue:<name>`). Each job carries the name of its bucket (`rate_key`, stored with the
job at enqueue); each claim carries the worker's declared limits (`ClaimRequest.rate_limits`).
A job whose bucket the claiming worker does not know waits, as a throttled one does.

The bucket holds at most `burst` tokens and gains `rate` a second; a claim takes one
token per job it claims from that bucket, never more than the whole tokens there are.
`refill` is the arithmetic every backend does (the SQL and Lua say the same).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

from conveyor.model import validation as valid
from conveyor.model.errors import ConfigurationError, InvalidJob

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
}
_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")
# A bucket's rate and burst are kept within what every backend stores exactly.
RATE_MAX = 1_000_000.0  # tokens a second
BURST_MAX = 1_000_000
# A whole token is 1 - TOKEN_SLACK or more: times near 2027 are exact to about 2e-7 s,
# so 0.05 s at 20 a second may add 0.9999999 tokens. Every backend uses this slack.
TOKEN_SLACK = 1e-6


@dataclass(frozen=True, slots=True)
class Limit:
    """`count` jobs per `per` (seconds or a timedelta), at most `burst` at once
    (default: `count`, one period's worth).

    >>> Limit(100, per=timedelta(seconds=1), burst=20).rate
    100.0
    """

    count: int
    per: float | timedelta = 1.0
    burst: int | None = None

    @property
    def seconds(self) -> float:
        return self.per.total_seconds() if isinstance(self.per, timedelta) else float(self.per)

    @property
    def rate(self) -> float:
        """Tokens a second."""
        return self.count / self.seconds


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A declared limit as a claim carries it: bucket `key`, `rate` tokens a second,
    at most `burst` tokens."""

    key: str
    rate: float
    burst: int


def parse_limit(spec: str | Limit, burst: int | None = None) -> Limit:
    """`"100/s"`, `"10/m"`, `"1000/h"`, `"5/10s"` (5 per 10 seconds), or a Limit.

    >>> parse_limit("10/m")
    Limit(count=10, per=60.0, burst=None)
    """
    if isinstance(spec, Limit):
        limit = spec if burst is None else Limit(spec.count, spec.per, burst)
    elif isinstance(spec, str) and (match := _SPEC.match(spec.lower())) is not None:
        count, times, unit = match.groups()
        if unit not in _UNITS and unit.endswith("s"):
            unit = unit[:-1]  # "seconds", "mins", "hours"
        if unit not in _UNITS:
            raise ConfigurationError(f"rate limit {spec!r}: the unit is s, m, h or d")
        limit = Limit(int(count), _UNITS[unit] * (int(times) if times else 1), burst)
    else:
        raise ConfigurationError(
            f"rate limit {spec!r}: write it as count/unit, e.g. '100/s', '10/m', '1000/h'"
        )
    return _checked(str(spec), limit)


def _checked(spec: str, limit: Limit) -> Limit:
    if type(limit.count) is not int or limit.count < 1:
        raise ConfigurationError(f"rate limit {spec!r}: the count is a whole number above 0")
    if not (math.isfinite(limit.seconds) and limit.seconds > 0):
        raise ConfigurationError(f"rate limit {spec!r}: the period is a positive duration")
    if not 0 < limit.rate <= RATE_MAX:
        raise ConfigurationError(f"rate limit {spec!r}: at most {RATE_MAX:.0f} a second")
    if limit.burst is not None and not (type(limit.burst) is int and 1 <= limit.burst <= BURST_MAX):
        raise ConfigurationError(
            f"rate limit {spec!r}: burst is a whole number from 1 "
            f"to {BURST_MAX}, got {limit.burst!r}"
        )
    if limit.burst is None and limit.count > BURST_MAX:
        raise ConfigurationError(f"rate limit {spec!r}: give a burst of at most {BURST_MAX}")
    return limit


def refill(tokens: float, updated_at: float, now: float, limit: RateLimit) -> float:
    """The bucket's tokens at `now`: what it had, plus `rate` a second since
    `updated_at`, at most `burst`. A clock behind `updated_at` adds nothing, and the
    bucket keeps `updated_at` (the backends store max(updated_at, now))."""
    return min(float(limit.burst), tokens + max(0.0, now - updated_at) * limit.rate)


def next_token_at(tokens: float, now: float, limit: RateLimit) -> float:
    """When a bucket holding `tokens` (fewer than one) has a whole token."""
    return now + max(0.0, 1.0 - tokens) / limit.rate


class RateLimitRegistry:
    """The app's declared limits, by bucket name."""

    def __init__(self) -> None:
        self._limits: dict[str, RateLimit] = {}
        self._declared: tuple[RateLimit, ...] = ()

    def declare(self, key: str, spec: str | Limit, burst: int | None = None) -> RateLimit:
        try:
            key = valid.name("rate_key", key)
        except InvalidJob as exc:
            raise ConfigurationError(f"rate limit: {exc}") from None
        limit = parse_limit(spec, burst)
        declared = RateLimit(key, limit.rate, limit.count if limit.burst is None else limit.burst)
        self._limits[key] = declared
        self._declared = tuple(self._limits.values())
        return declared

    def for_task(
        self, task_name: str, rate_limit: str | Limit | None, rate_key: str | None
    ) -> str | None:
        """The bucket a task's jobs spend from: `rate_key` (declared here before, or
        declared now with `rate_limit`), else the task's own (`task:<name>`) when it
        has a `rate_limit`, else none."""
        if rate_key is None:
            return None if rate_limit is None else self.declare(task_key(task_name), rate_limit).key
        if rate_limit is not None:
            return self.declare(rate_key, rate_limit).key
        if rate_key not in self._limits:
            raise ConfigurationError(
                f"task {task_name}: rate_key {rate_key!r} is not declared; call "
                f"app.rate_limit({rate_key!r}, '100/s') before the task, or give rate_limit="
            )
        return rate_key

    def get(self, key: str) -> RateLimit | None:
        return self._limits.get(key)

    @property
    def declared(self) -> tuple[RateLimit, ...]:
        """Every limit, as each claim carries them."""
        return self._declared

    def __iter__(self) -> Iterator[RateLimit]:
        return iter(self._declared)


def task_key(task_name: str) -> str:
    return f"task:{task_name}"


def queue_key(queue: str) -> str:
    return f"queue:{queue}"


def describe(limit: RateLimit) -> str:
    """`20/s, burst 5`, in the unit that reads best."""
    for unit, seconds in (("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if limit.rate * seconds >= 1 or unit == "h":
            return f"{limit.rate * seconds:g}/{unit}, burst {limit.burst}"
    raise AssertionError("unreachable")


def bucket_status(rate_key: str, available: bool, limits: RateLimitRegistry | None) -> str:
    """What `jobs show` says of a job's bucket: the limit, and for a job still
    available why it waits."""
    limit = None if limits is None else limits.get(rate_key)
    if limit is None:
        shown = (
            f"{rate_key} (not declared by this app, so its rate is not known here: "
            "`--app module:app` shows it; only workers whose app declares it claim the job)"
        )
    else:
        shown = f"{rate_key}: {describe(limit)}"
    if available:
        shown += (
            "; held back until the bucket has a token (jobs ahead of it in claim "
            "order take them first)"
        )
    return shown

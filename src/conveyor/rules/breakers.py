"""Circuit breakers (docs/downstreams.md): stop sending jobs to a downstream that is
failing, and let one probe through after a cooldown to find out if it is back.

>>> app.breaker("stripe", failures=5, window=timedelta(seconds=60),
...             cooldown=timedelta(seconds=30))
>>> @app.task(limits=Limits(breaker="stripe"))
... async def charge(order_id: int) -> None: ...

A breaker is a gate on a rate limit bucket of the same name (conveyor.rules.rate_limits):
the task's jobs carry that bucket, and every task spending from it is behind the
breaker. Its state is one shared record per breaker (`NAMESPACE`), changed only by
compare-and-set, so that two workers counting the last failure at once open it once:

* closed: jobs are claimed at the bucket's declared rate (unlimited if none). Each
  failure counted (`counts_as_failure`) is remembered for `window`; the `failures`-th
  within `window` opens the breaker.
* open: the bucket is left out of every claim, so its jobs stay `available` (no
  attempt used, nothing claimed and released). After `cooldown` it is half-open.
* half-open: the bucket is claimed with one token per cooldown, so the backend's own
  atomic token spend lets one probe through, fleet-wide. The first outcome of a job
  behind the breaker decides: a success closes it, a counted failure opens it again
  for a new cooldown.

Opened by hand (`conveyor breakers open NAME`), a breaker stays open until closed by
hand. This module is the pure part (declarations, the state and its transitions);
conveyor.downstreams.breaker_records reads and writes the records, the worker keeps a view.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from conveyor.model import validation as valid
from conveyor.model.clock import Duration, to_seconds
from conveyor.model.errors import ConfigurationError, InvalidJob
from conveyor.model.outcomes import Retry, Snooze
from conveyor.rules.rate_limits import BURST_MAX, RATE_MAX, Limit, RateLimit, RateLimitRegistry

if TYPE_CHECKING:
    from conveyor.rules.retry import RetryPolicy

NAMESPACE = "breakers"
CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"
STATES = (CLOSED, OPEN, HALF_OPEN)
HISTORY_KEPT = 20  # transitions remembered in the record, newest last


class BreakerError(Exception):
    """Raise it in a handler to say "the downstream is unhealthy": the attempt counts
    as a failure of the task's breaker and retries (attempts permitting), whatever
    the task's `retry_on=` says.

    >>> raise BreakerError("stripe answered 503")
    """


def counts_as_failure(error: BaseException, policy: RetryPolicy) -> bool:
    """Whether an attempt that raised `error` counts against its task's breaker: a
    BreakerError, or an error the task's retry policy calls transient. Retry and
    Snooze are the handler's own scheduling, not a failure of the downstream."""
    if isinstance(error, BreakerError):
        return True
    return not isinstance(error, (Retry, Snooze)) and policy.is_transient(error)


@dataclass(frozen=True, slots=True)
class Breaker:
    """A declared breaker: opens after `failures` counted failures within `window`
    seconds, tries one probe `cooldown` seconds after opening."""

    name: str
    failures: int
    window: float
    cooldown: float


@dataclass(frozen=True, slots=True)
class Transition:
    at: float
    source: str
    target: str
    reason: str


@dataclass(frozen=True, slots=True)
class BreakerState:
    """One breaker's shared record. `failures`: when the counted failures of the
    current window happened (closed only; at most the breaker's threshold kept).
    `held`: opened by hand, so no cooldown ends it. `transitions`: how many times it
    entered each state, ever (the metrics counter)."""

    state: str = CLOSED
    failures: tuple[float, ...] = ()
    opened_at: float | None = None
    held: bool = False
    history: tuple[Transition, ...] = ()
    transitions: dict[str, int] = field(default_factory=dict)

    def encode(self) -> str:
        return json.dumps(
            {
                "state": self.state,
                "failures": list(self.failures),
                "opened_at": self.opened_at,
                "held": self.held,
                "transitions": self.transitions,
                "history": [[t.at, t.source, t.target, t.reason] for t in self.history],
            },
            separators=(",", ":"),
        )

    @classmethod
    def decode(cls, text: str | None) -> BreakerState:
        """The record's state; an absent or unreadable record is a closed breaker (a
        corrupt record must not hold a downstream's jobs back for ever)."""
        if text is None:
            return cls()
        try:
            data = json.loads(text)
            state = data["state"] if data["state"] in STATES else CLOSED
            opened_at = data.get("opened_at")
            return cls(
                state=state,
                failures=tuple(float(t) for t in data.get("failures", ())),
                opened_at=None if opened_at is None else float(opened_at),
                held=bool(data.get("held", False)),
                history=tuple(
                    Transition(float(at), str(s), str(t), str(r))
                    for at, s, t, r in data.get("history", ())
                ),
                transitions={str(k): int(v) for k, v in data.get("transitions", {}).items()},
            )
        except (ValueError, TypeError, KeyError, AttributeError):
            return cls()

    def moved(self, target: str, now: float, reason: str, **changes: object) -> BreakerState:
        """This state moved to `target` (a transition, recorded in the history)."""
        history = (*self.history, Transition(now, self.state, target, reason))[-HISTORY_KEPT:]
        counts = {**self.transitions, target: self.transitions.get(target, 0) + 1}
        return replace(self, state=target, history=history, transitions=counts, **changes)  # type: ignore[arg-type]

    def counted(self, breaker: Breaker | None, now: float) -> int:
        """The failures counting towards opening it: those still within its window
        (every one stored when the breaker's declaration is not known here)."""
        if breaker is None:
            return len(self.failures)
        return sum(t > now - breaker.window for t in self.failures)

    def probe_due_at(self, breaker: Breaker) -> float | None:
        """When an open breaker turns half-open (None: not open, or held open)."""
        if self.state != OPEN or self.held or self.opened_at is None:
            return None
        return self.opened_at + breaker.cooldown


# --- transitions: each returns the new state, or None when nothing changes -----------
def after_failure(breaker: Breaker, state: BreakerState, now: float) -> BreakerState | None:
    if state.state == HALF_OPEN:
        return state.moved(OPEN, now, "probe failed", opened_at=now, failures=())
    if state.state != CLOSED:
        return None  # already open: a late failure of a job claimed before
    recent = (*(t for t in state.failures if t > now - breaker.window), now)
    if len(recent) >= breaker.failures:
        return state.moved(
            OPEN, now, f"{len(recent)} failures in {breaker.window:g}s", opened_at=now, failures=()
        )
    return replace(state, failures=recent[-breaker.failures :])


def after_success(state: BreakerState, now: float) -> BreakerState | None:
    if state.state != HALF_OPEN:
        return None  # closed: successes do not erase failures, they age out of the window
    return state.moved(CLOSED, now, "probe succeeded", opened_at=None, failures=())


def after_cooldown(breaker: Breaker, state: BreakerState, now: float) -> BreakerState | None:
    due = state.probe_due_at(breaker)
    if due is None or now < due:
        return None
    return state.moved(HALF_OPEN, now, f"cooldown of {breaker.cooldown:g}s over")


def opened_by_hand(state: BreakerState, now: float) -> BreakerState | None:
    if state.state == OPEN and state.held:
        return None
    return state.moved(OPEN, now, "opened by hand", opened_at=now, failures=(), held=True)


def closed_by_hand(state: BreakerState, now: float) -> BreakerState | None:
    if state.state == CLOSED and not state.failures:
        return None
    return state.moved(CLOSED, now, "closed by hand", opened_at=None, failures=(), held=False)


# --- declarations -----------------------------------------------------------------------
def _seconds(name: str, label: str, value: Duration) -> float:
    try:
        seconds = to_seconds(value)
    except TypeError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 86_400 * 7):
        raise ConfigurationError(
            f"breaker {name!r}: {label}={value!r} is a duration from more than 0 up to 7 days"
        )
    return seconds


class BreakerRegistry:
    """The app's declared breakers, by name (which is also their bucket's key)."""

    def __init__(self, limits: RateLimitRegistry) -> None:
        self._limits = limits
        self._breakers: dict[str, Breaker] = {}

    def declare(self, name: str, failures: int, window: Duration, cooldown: Duration) -> Breaker:
        try:
            name = valid.name("breaker", name)
        except InvalidJob as exc:
            raise ConfigurationError(f"breaker: {exc}") from None
        if type(failures) is not int or not 1 <= failures <= 10_000:
            raise ConfigurationError(
                f"breaker {name!r}: failures={failures!r} is a whole number from 1 to 10000"
            )
        breaker = Breaker(
            name, failures, _seconds(name, "window", window), _seconds(name, "cooldown", cooldown)
        )
        self._breakers[name] = breaker
        return breaker

    def for_task(
        self,
        task_name: str,
        rate_limit: str | Limit | None,
        rate_key: str | None,
        breaker: str | None = None,
    ) -> str | None:
        """The bucket a task's jobs carry (RateLimitRegistry.for_task), which for a
        task behind a breaker (`Limits(breaker=)`) is the breaker's own: one gate per
        downstream."""
        if breaker is not None and not isinstance(breaker, str):
            raise ConfigurationError(
                f"task {task_name}: Limits(breaker=) takes the name of an app.breaker(...), "
                f"not {breaker!r}"
            )
        if breaker is None:
            return self._limits.for_task(task_name, rate_limit, rate_key)
        if breaker not in self._breakers:
            raise ConfigurationError(
                f"task {task_name}: breaker {breaker!r} is not declared; call "
                f"app.breaker({breaker!r}, failures=5, window=..., cooldown=...) before the task"
            )
        if rate_key is not None and rate_key != breaker:
            raise ConfigurationError(
                f"task {task_name}: breaker={breaker!r} and rate_key={rate_key!r} would be two "
                f"gates; a breaker gates the bucket of its name, so declare the limit as "
                f"app.rate_limit({breaker!r}, ...)"
            )
        if rate_limit is not None:
            self._limits.declare(breaker, rate_limit)
        return breaker

    def get(self, name: str) -> Breaker | None:
        return self._breakers.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._breakers

    def __iter__(self) -> Iterator[Breaker]:
        return iter(self._breakers.values())

    def __len__(self) -> int:
        return len(self._breakers)

    def gate(self, breaker: Breaker, state: str) -> RateLimit | None:
        """The bucket as a claim carries it in `state`: the declared limit (or an
        unlimited one) when closed, none when open (its jobs wait), one token per
        cooldown when half-open (one probe)."""
        if state == OPEN:
            return None
        if state == HALF_OPEN:
            return RateLimit(breaker.name, 1.0 / breaker.cooldown, 1)
        return self._limits.get(breaker.name) or RateLimit(breaker.name, RATE_MAX, BURST_MAX)

    def claim_limits(self, states: dict[str, str]) -> tuple[RateLimit, ...]:
        """Every bucket a claim carries, the breakers' gated by `states` (name ->
        state; a breaker not in it is closed)."""
        plain = [limit for limit in self._limits.declared if limit.key not in self._breakers]
        gated = [self.gate(b, states.get(b.name, CLOSED)) for b in self._breakers.values()]
        return (*plain, *(limit for limit in gated if limit is not None))

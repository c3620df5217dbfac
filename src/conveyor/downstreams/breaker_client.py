"""The worker's client of the app's circuit breakers (conveyor.rules.breakers): a cached
view of their records it reads before each claim (which buckets its claims carry, and
how), and the outcomes it reports, written by compare-and-set.

Reading the records before every claim would add a round trip per claim. So the
view is refreshed once a second (`refresh`, one list_records), and at once when this
worker makes a transition itself. A transition another worker makes reaches this
one within REFRESH_INTERVAL (plus a claim already in flight): that is the bound
docs/downstreams.md states. A refresh also moves a breaker whose cooldown is over
to half-open (a compare-and-set: one worker does it, the others read it).

Outcomes cost nothing while the view says closed and the attempt succeeded; a
counted failure (and any outcome while the view is not closed) is one
compare-and-set on the breaker's record.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from conveyor.backends.contract import Backend
from conveyor.downstreams.breaker_records import change_breaker, hold_seconds, read_breakers
from conveyor.rules.breakers import (
    CLOSED,
    Breaker,
    BreakerRegistry,
    BreakerState,
    after_cooldown,
    after_failure,
    after_success,
)
from conveyor.rules.rate_limits import RateLimit

log = logging.getLogger("conveyor.worker")
REFRESH_INTERVAL = 1.0


class BreakerClient:
    def __init__(self, breakers: BreakerRegistry) -> None:
        self._breakers = breakers
        self._states: dict[str, BreakerState] = {}
        self._limits: tuple[RateLimit, ...] | None = None  # the claim's buckets, cached
        # Set when a breaker's state changed here: the producer claims again at once
        # (a half-open breaker's probe need not wait for the next poll).
        self.changed = asyncio.Event()

    def breaker_of(self, rate_key: str | None) -> Breaker | None:
        """The breaker a job of bucket `rate_key` is behind, if any."""
        return None if rate_key is None else self._breakers.get(rate_key)

    def state(self, name: str) -> str:
        held = self._states.get(name)
        return CLOSED if held is None else held.state

    def claim_limits(self) -> tuple[RateLimit, ...]:
        """The buckets of this worker's next claim, each breaker's gated by its state."""
        if self._limits is None:
            self._limits = self._breakers.claim_limits(
                {name: s.state for name, s in self._states.items()}
            )
        return self._limits

    def _learn(self, name: str, state: BreakerState) -> None:
        before = self.state(name)
        self._states[name] = state
        if state.state != before:
            self._limits = None
            self.changed.set()
            log.warning(
                "breaker %s is %s%s",
                name,
                state.state,
                f" ({state.history[-1].reason})" if state.history else "",
            )

    async def refresh(self, backend: Backend, now: float) -> None:
        """Read every breaker's state; move the ones whose cooldown is over to half-open."""
        states = await read_breakers(backend)
        for breaker in self._breakers:
            state = states.get(breaker.name, BreakerState())
            if after_cooldown(breaker, state, now) is not None:
                state, _ = await change_breaker(
                    backend, breaker.name, functools.partial(after_cooldown, breaker, now=now)
                )
            self._learn(breaker.name, state)

    async def report(self, backend: Backend, breaker: Breaker, failed: bool, now: float) -> None:
        """An attempt of a job behind `breaker` ended: `failed` if it counts as a
        failure (conveyor.rules.breakers.counts_as_failure)."""
        if not failed and self.state(breaker.name) == CLOSED:
            return  # the common case: nothing to write
        if failed:
            state, _ = await change_breaker(
                backend,
                breaker.name,
                lambda s: after_failure(breaker, s, now),
                hold_seconds(breaker),
            )
        else:
            state, _ = await change_breaker(backend, breaker.name, lambda s: after_success(s, now))
        self._learn(breaker.name, state)

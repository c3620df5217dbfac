"""The breakers' shared records (conveyor.rules.breakers): read them, and change one by
compare-and-set, so that any number of workers and operators agree on each
transition (two workers counting the last failure at once open the breaker once).

A change that opens a breaker also holds its rate limit bucket (Backend.
hold_rate_bucket) for the breaker's cooldown: every claim of the bucket finds no
token until then, whatever its worker's view of the breaker says, so opening stops
the whole fleet's claims at once rather than at each worker's next refresh. The
hold is a second write after the record's: a process that dies between the two
leaves the other workers to their refresh (one second).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from conveyor.backends.contract import Backend, SharedRecords
from conveyor.backends.params import BucketHold, RecordKey, RecordSwap
from conveyor.rules.breakers import (
    CLOSED,
    NAMESPACE,
    OPEN,
    Breaker,
    BreakerState,
    closed_by_hand,
    opened_by_hand,
)
from conveyor.rules.rate_limits import BURST_MAX, TOKEN_SLACK

# A change that loses the race reads the record again; this many losses in a row
# mean a store too busy to agree, which the caller reports (it is retried there).
CAS_ATTEMPTS = 50
# The hold of an opening by hand whose cooldown the caller does not know (a command
# run with --url): well past every worker's refresh (conveyor.downstreams.breaker_client),
# after which the workers' own views keep the bucket out of their claims.
HOLD_SECONDS = 5.0
# Short of a whole token while held, a whole one the moment a half-open claim refills
# it: the probe is not delayed by a period of the half-open rate.
HELD_TOKENS = 1.0 - 2 * TOKEN_SLACK


class BreakerContended(Exception):
    """A breaker's record changed under every one of CAS_ATTEMPTS tries."""


async def read_breakers(records: SharedRecords) -> dict[str, BreakerState]:
    """Every breaker with a record (one without is closed), by name."""
    return {
        name: BreakerState.decode(text)
        for name, text in (await records.list_records(NAMESPACE)).items()
    }


async def read_breaker(records: SharedRecords, name: str) -> BreakerState:
    return BreakerState.decode(await records.get_record(RecordKey(namespace=NAMESPACE, key=name)))


async def fleet_breakers(
    records: SharedRecords, declared: Iterable[str]
) -> dict[str, BreakerState]:
    """Every breaker an app declares or a record names, by name in order; one with no
    record yet is closed."""
    stored = await read_breakers(records)
    return {name: stored.get(name, BreakerState()) for name in sorted({*declared, *stored})}


def hold_seconds(breaker: Breaker | None) -> float:
    """How long an opening of `breaker` holds its bucket: its cooldown, the whole
    time it is open (HOLD_SECONDS when the caller does not know the breaker)."""
    return HOLD_SECONDS if breaker is None else breaker.cooldown


async def change_breaker(
    backend: Backend,
    name: str,
    change: Callable[[BreakerState], BreakerState | None],
    hold: float = HOLD_SECONDS,
) -> tuple[BreakerState, bool]:
    """Apply `change` (a transition of conveyor.rules.breakers: the new state, or None for
    no change) to the record as it is now; (the state after, whether this call
    changed it). An opening holds the bucket for `hold` seconds; a close from open
    (by hand) lets it go at once, full (its burst, as a claim refills it)."""
    for _ in range(CAS_ATTEMPTS):
        text = await backend.get_record(RecordKey(namespace=NAMESPACE, key=name))
        state = BreakerState.decode(text)
        new = change(state)
        if new is None:
            return state, False
        if await backend.compare_and_set_record(
            RecordSwap(namespace=NAMESPACE, key=name, expected=text, value=new.encode())
        ):
            moved_at = new.history[-1].at if new.history else None
            if new.state == OPEN and new.opened_at is not None and new.opened_at != state.opened_at:
                await backend.hold_rate_bucket(
                    BucketHold(key=name, tokens=HELD_TOKENS, until=new.opened_at + hold)
                )
            elif new.state == CLOSED and state.state == OPEN and moved_at is not None:
                await backend.hold_rate_bucket(
                    BucketHold(key=name, tokens=float(BURST_MAX), until=moved_at)
                )  # full
            return new, True
    raise BreakerContended(f"breaker {name!r}: its record kept changing; try again")


async def open_by_hand(
    backend: Backend, name: str, now: float, breaker: Breaker | None = None
) -> BreakerState:
    """Open `name` and hold it open (no cooldown ends it) until `close_by_hand`."""
    return (
        await change_breaker(backend, name, lambda s: opened_by_hand(s, now), hold_seconds(breaker))
    )[0]


async def close_by_hand(backend: Backend, name: str, now: float) -> BreakerState:
    """Close `name`, forgetting the failures it counted."""
    return (await change_breaker(backend, name, lambda s: closed_by_hand(s, now)))[0]

"""The breakers' shared records (conveyor.breakers): read them, and change one by
compare-and-set, so that any number of workers and operators agree on each
transition (two workers counting the last failure at once open the breaker once)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .backends.base import SharedRecords
from .breakers import NAMESPACE, BreakerState, closed_by_hand, opened_by_hand

# A change that loses the race reads the record again; this many losses in a row
# mean a store too busy to agree, which the caller reports (it is retried there).
CAS_ATTEMPTS = 50


class BreakerContended(Exception):
    """A breaker's record changed under every one of CAS_ATTEMPTS tries."""


async def read_breakers(records: SharedRecords) -> dict[str, BreakerState]:
    """Every breaker with a record (one without is closed), by name."""
    return {name: BreakerState.decode(text)
            for name, text in (await records.list_records(NAMESPACE)).items()}


async def read_breaker(records: SharedRecords, name: str) -> BreakerState:
    return BreakerState.decode(await records.get_record(NAMESPACE, name))


async def change_breaker(records: SharedRecords, name: str,
                         change: Callable[[BreakerState], BreakerState | None]
                         ) -> tuple[BreakerState, bool]:
    """Apply `change` (a transition of conveyor.breakers: the new state, or None for
    no change) to the record as it is now; (the state after, whether this call
    changed it)."""
    for _ in range(CAS_ATTEMPTS):
        text = await records.get_record(NAMESPACE, name)
        state = BreakerState.decode(text)
        new = change(state)
        if new is None:
            return state, False
        if await records.compare_and_set_record(NAMESPACE, name, text, new.encode()):
            return new, True
    raise BreakerContended(f"breaker {name!r}: its record kept changing; try again")


async def open_by_hand(records: SharedRecords, name: str, now: float) -> BreakerState:
    """Open `name` and hold it open (no cooldown ends it) until `close_by_hand`."""
    return (await change_breaker(records, name, lambda s: opened_by_hand(s, now)))[0]


async def close_by_hand(records: SharedRecords, name: str, now: float) -> BreakerState:
    """Close `name`, forgetting the failures it counted."""
    return (await change_breaker(records, name, lambda s: closed_by_hand(s, now)))[0]


async def fleet_breakers(records: SharedRecords, declared: Iterable[str]
                         ) -> dict[str, BreakerState]:
    """Every breaker an app declares or a record names, by name in order; one with no
    record yet is closed."""
    stored = await read_breakers(records)
    return {name: stored.get(name, BreakerState()) for name in sorted({*declared, *stored})}

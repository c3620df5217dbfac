"""Rules of the shared-record verbs that every backend's implementation shares."""

from __future__ import annotations

import math


def expiry(now: float, ttl: float | None) -> float | None:
    """When a record written now with `ttl` expires (None: never)."""
    if ttl is None:
        return None
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(f"a record's ttl must be a positive number of seconds, got {ttl!r}")
    return now + ttl


def incremented(namespace: str, key: str, current: str | None, amount: int) -> int:
    """The value after `incr_record`: absent counts as 0; a record that is not an
    integer is refused (it was written by put_record for something else)."""
    if current is None:
        return amount
    try:
        return int(current) + amount
    except ValueError:
        raise ValueError(
            f"record {namespace}/{key} holds {current[:40]!r}, not an integer; "
            "incr_record counts only what it created"
        ) from None

"""A memory store's stored row (`Row`: field name -> stored value, store.py) and how it
is read: a stored number, whether a row is live for dedup, whether it is past retention."""

from __future__ import annotations

import math
from typing import Any

from conveyor.model.job import ACTIVE_STATES, JobState

S = JobState
Row = dict[str, Any]


def as_number(value: Any) -> float | None:
    """A stored number, or None when the stored value does not read as a finite one."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def is_live(row: Row, now: float) -> bool:
    """Live for dedup: active, or completed within its unique_for window (a window
    that does not read as a number holds nothing back)."""
    state = row.get("state")
    if state in ACTIVE_STATES:
        return True
    finished_at, unique_for = as_number(row.get("finished_at")), as_number(row.get("unique_for"))
    return (
        state == S.COMPLETED
        and finished_at is not None
        and unique_for is not None
        and finished_at + unique_for > now
    )


def past_retention(row: Row, completed_before: float, dead_before: float, now: float) -> bool:
    if row.get("finished_at") is None:
        return False
    finished_at = as_number(row.get("finished_at")) or 0.0  # unreadable: old
    state = row.get("state")
    if state in (S.COMPLETED, S.CANCELLED):
        unique_for = as_number(row.get("unique_for"))
        return finished_at < completed_before and (
            unique_for is None or finished_at + unique_for < now
        )
    return state == S.DEAD and finished_at < dead_before

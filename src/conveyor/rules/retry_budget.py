"""Retry budgets: a task's retries may use at most a share of its recent first attempts.

When a dependency fails everything, every job's retries pile onto it on top of the
new work: the retries themselves become the outage. With a budget, the retries that
fit are scheduled as usual (by the task's backoff) and the rest are scheduled later,
spread over a later window that has room: the job keeps its retry (it is not sent
dead for it), and the dependency sees at most the budget's retries per window.

>>> @app.task(retry=RetryOptions(budget=RetryBudget(share=0.2, minimum=10, window=60)))
... async def charge(order_id: int) -> None: ...

In each window of `window` seconds, the task's retries may number
`minimum + share * first_attempts`, where `first_attempts` is the larger of this
window's and the last one's count of the task's first attempts, fleet-wide. A
retry counts in the window it is scheduled to run in. So `share=0.2` means "at most
one retry for every five new jobs, plus `minimum`", and `share=0, minimum=N` means
"N retries per window". See docs/downstreams.md for how workers share the counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from conveyor.model.clock import Duration, to_seconds
from conveyor.model.errors import ConfigurationError


@dataclass(frozen=True, slots=True, init=False)
class RetryBudget:
    """How many retries a task may schedule per window (see the module docstring)."""

    share: float
    minimum: int
    window: float

    def __init__(self, share: float = 0.2, minimum: int = 10, window: Duration = 60.0) -> None:
        if (
            isinstance(share, bool)
            or not isinstance(share, (int, float))
            or not (0 <= share <= 100 and math.isfinite(share))
        ):
            raise ConfigurationError(f"retry budget share={share!r}: a number from 0 to 100")
        if type(minimum) is not int or not 0 <= minimum <= 1_000_000_000:
            raise ConfigurationError(f"retry budget minimum={minimum!r}: a whole number >= 0")
        try:
            seconds = to_seconds(window)
        except TypeError:
            seconds = math.nan
        if not (math.isfinite(seconds) and 1.0 <= seconds <= 86_400.0):
            raise ConfigurationError(f"retry budget window={window!r}: from 1 second to 1 day")
        if share == 0 and minimum == 0:
            raise ConfigurationError(
                "a retry budget of share=0 and minimum=0 allows no "
                "retry at all: set max_attempts=1 instead"
            )
        object.__setattr__(self, "share", float(share))
        object.__setattr__(self, "minimum", minimum)
        object.__setattr__(self, "window", seconds)

    def allowed(self, first_attempts: int) -> int:
        """Retries allowed in a window whose task saw `first_attempts` first attempts."""
        return self.minimum + math.floor(self.share * max(first_attempts, 0))

    def window_of(self, at: float) -> int:
        """The index of the window holding the moment `at` (seconds since the epoch)."""
        return math.floor(at / self.window)


def checked_budget(owner: str, value: object) -> RetryBudget | None:
    """`value` as a task's `RetryOptions(budget=)`, or a clear error naming `owner`."""
    if value is None or isinstance(value, RetryBudget):
        return value
    raise ConfigurationError(
        f"{owner}: RetryOptions(budget=) takes a RetryBudget(...), not {value!r}"
    )

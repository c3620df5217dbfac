"""What the worker needs of its app, as a protocol `Conveyor` satisfies, so that
the worker does not import the app (which imports the layers below it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from conveyor.observe.middleware import Middleware
from conveyor.scheduling.scheduler import SchedulerApp

if TYPE_CHECKING:
    from conveyor.payloads.claim_check import ClaimCheck
    from conveyor.rules.breakers import BreakerRegistry
    from conveyor.rules.rate_limits import RateLimitRegistry


class WorkerApp(SchedulerApp, Protocol):
    """The scheduler's needs (a worker runs the schedules; they include the tasks,
    the clock and the backend), the middleware around each execution, and the
    app's version, which each failed attempt records, the claim-check that
    reads big arguments back, stores big results and sweeps orphan blobs, and the
    rate limits each claim carries, gated by the breakers."""

    @property
    def version(self) -> str: ...
    @property
    def middleware(self) -> Sequence[Middleware]: ...
    @property
    def claim_check(self) -> ClaimCheck: ...
    @property
    def rate_limits(self) -> RateLimitRegistry: ...
    @property
    def breakers(self) -> BreakerRegistry: ...

"""The warning at worker start for a task that calls out with no limit set: the
"concurrency=100 without a rate limit" anti-pattern (docs/downstreams.md).

A worker cannot see what a handler calls, so it judges by what the task declares:
a task that retries on network errors (`retry_on=` naming `ConnectionError`,
`TimeoutError` or their subclasses, or an error class of an HTTP client: httpx,
requests, aiohttp, urllib3) plainly expects to call a service over the network. If
such a task has no limit at all (no `rate_limit`/`rate_key`, no rate limit on its
queue, no `max_running`/`concurrency_key`, no `adaptive`) and the worker runs more
than `THRESHOLD` jobs at once, every one of its slots may call that service at the
same moment, and every failure's retry adds to it. Tasks that retry on everything
(no `retry_on`) are not judged: the default says nothing about what they call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from conveyor.rules.rate_limits import RateLimitRegistry, queue_key

if TYPE_CHECKING:
    from conveyor.task import Task

THRESHOLD = 20  # worker slots past which an unlimited caller is warned about
NETWORK_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)
HTTP_CLIENT_MODULES = frozenset({"httpx", "httpcore", "requests", "aiohttp", "urllib3"})


def calls_out(retry_on: tuple[type[BaseException], ...] | None) -> str | None:
    """The first error of `retry_on` that says the task calls over the network."""
    for error in retry_on or ():
        if issubclass(error, NETWORK_ERRORS) or (
            error.__module__.partition(".")[0] in HTTP_CLIENT_MODULES
        ):
            return f"{error.__module__}.{error.__qualname__}".removeprefix("builtins.")
    return None


def unlimited_callers(
    tasks: Iterable[Task[..., object]], rate_limits: RateLimitRegistry, concurrency: int
) -> list[str]:
    """One warning per task that calls out with no limit, when `concurrency` is over
    THRESHOLD; [] otherwise."""
    if concurrency <= THRESHOLD:
        return []
    warnings = []
    for task in tasks:
        d = task.defaults
        network = calls_out(d.retry.retry_on)
        if (
            network is None
            or d.rate_key is not None
            or d.concurrency is not None
            or rate_limits.get(queue_key(d.queue)) is not None
        ):
            continue
        warnings.append(
            f"task {task.name} retries on {network}, so it calls out, and it has no limit: "
            f"with concurrency {concurrency} this worker alone may make {concurrency} calls "
            "at once, and every failure's retry adds to them. Give it limits=Limits(adaptive=True, "
            "max_running= or rate_limit=) (docs/downstreams.md)"
        )
    return warnings

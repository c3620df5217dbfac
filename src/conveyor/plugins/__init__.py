"""The worker's plug-in seam: `WorkerPlugin`, a base of no-op hooks a feature overrides
(in the style of Dramatiq's middleware and River's hooks).

The worker runs a feature only through these hooks: the executor calls each plugin's
attempt hooks, the producer its claim hooks, `Worker.run` its start, stop and periodic
service. Adding a rule is one plugin, registered in `conveyor.worker.plugins`; neither
the executor nor the worker grows a branch for it. The built-in ones: circuit breakers,
adaptive limits and retry budgets (conveyor.downstreams.plugins), result expiry
(conveyor.worker.plugins) and a workflow member's inputs (conveyor.workflows.plugin).

This is the internal, feature side. What users put around an execution is the
middleware (conveyor.observe.middleware, the call_next onion), which stays as it is.

Hooks on the path of every job are plain methods; one that may wait returns an
awaitable only when it has something to wait for (None otherwise), so that a job no
plugin cares about costs no coroutine. The executor calls a hook only on the plugins
that override it (`overriding`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from typing import Any

from conveyor.backends.contract import Backend
from conveyor.backends.params import Settlement
from conveyor.model.clock import Clock
from conveyor.model.job import Job
from conveyor.rules.rate_limits import RateLimit
from conveyor.rules.retry import RetryPolicy

log = logging.getLogger("conveyor.worker")


class WorkerPlugin:
    """A feature of the worker. Every hook is a no-op here; override the ones needed.

    Lifecycle: `on_start` once the backend is open (before the first claim), then
    `service` runs beside the worker until it closes (by default `tick` every
    `tick_interval()` seconds, if that is not None), then `on_stop`.

    Claims: `on_claim` before each claim returns the buckets that gate it;
    `claim_wakeup` is an event that cuts the producer's idle wait short.

    Attempts, in order: `before_attempt`; `leading_args` (arguments put before the
    job's own); after the handler, `handler_ended` (error None: it returned);
    `completed` shapes a completed attempt's settlement; on a failure,
    `attempt_failed`, then `retry_at` when it will retry; last `after_attempt`, with
    the settlement (None: the worker stopped the attempt, counted nowhere).
    """

    name = "plugin"

    # --- lifecycle -----------------------------------------------------------------
    async def on_start(self, backend: Backend, now: float) -> None:
        """The worker started: its backend is open, nothing is claimed yet."""

    async def on_stop(self) -> None:
        """The worker stopped: every outcome is written."""

    def tick_interval(self) -> float | None:
        """Seconds between two `tick`s; None (the default): no periodic tick. Asked
        when the worker starts, once its tasks are registered."""
        return None

    async def tick(self, backend: Backend, now: float) -> None:
        """The plugin's periodic work (see `tick_interval`)."""

    def service(
        self, backend: Backend, clock: Clock, closing: asyncio.Event
    ) -> Coroutine[Any, Any, None] | None:
        """What runs beside the worker until `closing` is set, or None: by default
        `tick` every `tick_interval()` seconds."""
        interval = self.tick_interval()
        if interval is None:
            return None
        return every(interval, lambda: self.tick(backend, clock()), closing, name=self.name)

    # --- claims --------------------------------------------------------------------
    def on_claim(self) -> Iterable[RateLimit]:
        """A claim is about to be made: the buckets it must also spend."""
        return ()

    def claim_wakeup(self) -> asyncio.Event | None:
        """Set when a claim may find work it could not before (the producer waits on
        it while idle; it is cleared by `on_claim`)."""
        return None

    # --- attempts ------------------------------------------------------------------
    def before_attempt(self, job: Job, now: float) -> None:
        """An attempt of `job` starts."""

    def leading_args(self, job: Job) -> Awaitable[list[Any]] | None:
        """Arguments to put before the job's own, or None (the common case)."""
        return None

    def handler_ended(self, job: Job, error: BaseException | None, policy: RetryPolicy) -> None:
        """The handler returned (`error` None) or raised `error`."""

    def completed(self, job: Job, settlement: Settlement) -> Settlement:
        """The settlement of a completed attempt, as this plugin would have it."""
        return settlement

    def attempt_failed(self, job: Job, error: BaseException) -> None:
        """The attempt failed with `error` (any failure, before its settlement)."""

    def retry_at(self, job: Job, wanted: float, now: float) -> tuple[float, bool]:
        """When the retry of a failed attempt may run, wanted at `wanted`; True if this
        plugin moved it (a middleware sees `retry_deferred`)."""
        return wanted, False

    def after_attempt(self, job: Job, settlement: Settlement | None) -> Awaitable[None] | None:
        """The attempt ended with `settlement`: something to await before its outcome
        is handed on, or None. Never an awaitable when `settlement` is None."""
        return None


def overriding(plugins: Sequence[WorkerPlugin], hook: str) -> tuple[WorkerPlugin, ...]:
    """The plugins that override `hook`: the only ones worth calling."""
    default = getattr(WorkerPlugin, hook)
    return tuple(p for p in plugins if getattr(type(p), hook, default) is not default)


async def every(
    interval: float,
    action: Callable[[], Awaitable[None]],
    closing: asyncio.Event,
    first: float | None = None,
    name: str | None = None,
) -> None:
    """Run `action` every `interval` seconds until `closing` is set.

    The loop ends when `closing` is set, not only when cancelled, because a cancel
    can be lost: on Python 3.11, asyncio.wait_for returns its result instead of
    raising when the cancel lands just as what it awaits completes, and
    psycopg_pool's getconn waits with it. A pool child told to drain while it was
    still starting had its first rescue pass cancelled right as the pool handed
    over its first connection; the pass returned normally, the loop slept and ran
    again, and run() waited on it forever (the pool never exited).
    """
    delay = interval if first is None else first
    while not await closed_within(closing, delay):
        try:
            await action()
        except Exception as exc:
            log.warning("%s failed: %s", name or getattr(action, "__name__", action), exc)
        delay = interval


async def closed_within(closing: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`, less if `closing` is set; True once it is."""
    try:
        async with asyncio.timeout(seconds):
            await closing.wait()
    except TimeoutError:
        pass
    return closing.is_set()

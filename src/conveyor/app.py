"""The application object: task registry, backend access, sync facade."""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar, cast, overload

from conveyor.backends import backend_from_url, redact_url
from conveyor.backends.blobs import BlobStore
from conveyor.backends.capabilities import BlockingEnqueue, TransactionalEnqueue
from conveyor.backends.contract import Backend
from conveyor.backends.params import EnqueueIn
from conveyor.handle import JobHandle, handles, refusals_by_handle
from conveyor.model import validation as valid
from conveyor.model import version as versions
from conveyor.model.clock import Clock, Duration, system_clock, to_seconds
from conveyor.model.errors import ConfigurationError, InvalidJob, UnknownTask
from conveyor.model.job import Job, NewJob
from conveyor.model.portal import Portal
from conveyor.observe.middleware import EnqueueContext, Middleware, MiddlewareContext, run_chain
from conveyor.payloads.claim_check import (
    DEFAULT_MAX_PAYLOAD,
    DEFAULT_ORPHAN_GRACE,
    DEFAULT_THRESHOLD,
    ClaimCheck,
)
from conveyor.payloads.task_payload import payload_defaults
from conveyor.rules.backpressure import enqueue_offering
from conveyor.rules.breakers import Breaker, BreakerRegistry
from conveyor.rules.concurrency import task_rule
from conveyor.rules.hygiene import PayloadHygiene
from conveyor.rules.queues import OnFull, QueueSettings, QueueSettingsRegistry
from conveyor.rules.rate_limits import Limit, RateLimit, RateLimitRegistry
from conveyor.rules.retry import task_retry_policy
from conveyor.rules.task_options import MOVED_OPTIONS, Limits, PayloadOptions, RetryOptions
from conveyor.task import Task, TaskDefaults, key_templates, make_options, time_limits

if TYPE_CHECKING:
    from conveyor.admin.api import Admin, Jobs
    from conveyor.scheduling.schedules import Schedule

P = ParamSpec("P")
R = TypeVar("R")


class PeriodicDecorator(Protocol):
    """What `app.periodic(...)` returns: keeps the decorated Task's exact type."""

    @overload
    def __call__(self, target: Task[P, R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, target: Callable[P, R], /) -> Task[P, R]: ...


class Conveyor:
    """A Conveyor application. Nothing connects until first use.

    `version=` is your application's version (default: `$CONVEYOR_APP_VERSION`); each
    failed attempt records it, so a dead letter says which deploy failed.

    >>> app = Conveyor("sqlite:///jobs.db", version="1.4.2")
    >>> @app.task(queue="emails")
    ... def send_welcome(user_id: int) -> None: ...
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        default_queue: str = "default",
        clock: Clock = system_clock,
        auto_migrate: bool = True,
        middleware: Sequence[Middleware] = (),
        version: str | None = None,
        claim_check_threshold: int = DEFAULT_THRESHOLD,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        blob_store: str | BlobStore | None = None,
        orphan_grace: Duration = DEFAULT_ORPHAN_GRACE,
        payload_hygiene: str = "warn",
    ) -> None:
        resolved = url or os.environ.get("CONVEYOR_URL")
        if not resolved:
            raise ConfigurationError("no backend URL: pass Conveyor(url) or set $CONVEYOR_URL")
        backend_from_url(resolved, clock)  # validate the URL now, not at the first enqueue
        try:
            self.default_queue = valid.name("default_queue", default_queue)
        except InvalidJob as exc:
            raise ConfigurationError(str(exc)) from None
        # The application's own version, recorded in every failed attempt (the dead
        # letters say which deploy failed): `version=`, else $CONVEYOR_APP_VERSION.
        self.version = versions.app_version(version)
        self.url = resolved
        self.clock = clock
        self.auto_migrate = auto_migrate
        self.tasks: dict[str, Task[Any, Any]] = {}
        # Around every enqueue and every job execution; see conveyor.observe.middleware.
        self.middleware: list[Middleware] = list(middleware)
        self.schedules: dict[str, Schedule] = {}
        self.rate_limits = (
            RateLimitRegistry()
        )  # buckets its claims spend (conveyor.rules.rate_limits)
        self.queues = QueueSettingsRegistry(
            self.rate_limits
        )  # flow control (conveyor.rules.queues)
        # The circuit breakers (conveyor.rules.breakers), gates on its buckets.
        self.breakers = BreakerRegistry(self.rate_limits)
        self._backends: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Backend] = (
            weakref.WeakKeyDictionary()
        )
        # A script that exits without close() still closes the sync facade's backend;
        # the hook holds the backends, not the app, which stays free to be collected.
        self.portal = Portal(on_exit=functools.partial(_close_loop_backend, self._backends))
        # Big payloads stored apart; the enqueue-time secret check (docs/payloads.md).
        self.claim_check = ClaimCheck(
            self, claim_check_threshold, max_payload, blob_store, to_seconds(orphan_grace)
        )
        self.hygiene = PayloadHygiene(payload_hygiene)
        self._backend_locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()
        self._sync_backend: Backend | None = None
        self._sync_blocking: BlockingEnqueue | None = None  # its capability, looked up once

    def __repr__(self) -> str:
        return f"<Conveyor {redact_url(self.url)} tasks={len(self.tasks)}>"

    # --- flow control: declarations -------------------------------------------------
    def queue(
        self,
        name: str,
        *,
        aging: Duration | None = None,
        max_waiting: int | None = None,
        on_full: OnFull = "reject",
        block_timeout: Duration = 30.0,
        rate_limit: str | Limit | None = None,
    ) -> QueueSettings:
        """Declare (or replace) a queue's settings: `QueueSettings`, docs/flow-control.md."""
        return self.queues.declare(
            name,
            aging=aging,
            max_waiting=max_waiting,
            on_full=on_full,
            block_timeout=block_timeout,
            rate_limit=rate_limit,
        )

    def rate_limit(self, key: str, limit: str | Limit, *, burst: int | None = None) -> RateLimit:
        """Declare a bucket tasks share by `Limits(rate_key=)`: `"100/s"`, `"10/m"` or `Limit(...)`
        (docs/flow-control.md)."""
        return self.rate_limits.declare(key, limit, burst)

    def breaker(
        self, name: str, *, failures: int = 5, window: Duration = 60.0, cooldown: Duration = 30.0
    ) -> Breaker:
        """Declare a circuit breaker tasks sit behind by `Limits(breaker=name)`: open after
        `failures` transient failures within `window`, one probe after `cooldown`
        (docs/downstreams.md).

        >>> app.breaker("stripe", failures=5, window=timedelta(seconds=60),
        ...             cooldown=timedelta(seconds=30))
        """
        return self.breakers.declare(name, failures, window, cooldown)

    # --- inspection ---------------------------------------------------------------------
    # Built on first use: a worker never inspects jobs, and importing conveyor.admin.api
    # (and audit.py with it) made every worker's start longer (2.4 % of the instructions
    # from `conveyor worker` to its app loaded, counted with callgrind).
    @functools.cached_property
    def admin(self) -> Admin:
        """The inspector API (async): list, count, redrive, purge... (docs/operations.md)."""
        from conveyor.admin.api import Admin

        return Admin(self)

    @functools.cached_property
    def jobs(self) -> Jobs:
        """The inspector API's sync face."""
        from conveyor.admin.api import Jobs

        return Jobs(self)

    # --- tasks ------------------------------------------------------------------------
    @overload
    def task(self, fn: Callable[P, Awaitable[R]], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int = 20,
        timeout: Duration | None = None,
        hard_time_limit: Duration | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        dead_on: tuple[type[BaseException], ...] = (),
        idempotency_key: str | None = None,
        fairness_key: str | None = None,
        result_ttl: Duration | None = None,
        retry: RetryOptions = RetryOptions(),
        limits: Limits = Limits(),
        payload: PayloadOptions = PayloadOptions(),
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...

    def task(self, *fn: Callable[..., Any], **options: Any) -> Any:
        """Register a function as a task.

        `queue=`, `priority=` and `max_attempts=` are its jobs' defaults (each enqueue
        may override them with `.options(...)`).

        Retries: `retry_on=` lists the only errors that retry; `dead_on=` errors that
        never do. By default TypeError, ValueError, LookupError and argument errors go
        dead at once and everything else retries with exponential backoff and full
        jitter. `retry=RetryOptions(backoff_base=1, backoff_cap=600, budget=None)`
        sets the backoff, and `budget=RetryBudget(share=0.2)` caps the task's retries
        per window, fleet-wide, so that retries do not become the outage
        (docs/downstreams.md).

        Time limits: past `timeout=` (the soft limit) `SoftTimeLimitExceeded` is raised
        inside the handler so it can clean up; past `hard_time_limit=` the handler is
        stopped and the attempt fails with `HardTimeLimitExceeded` (see `docs/pool.md`
        for how sync handlers are stopped). Both retry or dead-letter by the task's
        policy.

        `idempotency_key=` is a template over the task's arguments
        (`"charge:{order_id}"`), rendered at enqueue and stored with the job:
        `current_job().idempotency_key`, the same on every attempt and after a
        redrive, to pass to providers (see docs/resilience.md). Default: the job id.
        `fairness_key=` is one too (`"tenant:{tenant_id}"`): claims rotate across a
        queue's keys (docs/flow-control.md). `result_ttl=` keeps a result that long
        after the job completed (docs/workflows.md#results).

        `limits=Limits(...)`: at most N running, `concurrency_key="user:{user_id}",
        concurrency_limit=N` or `max_running=N`; `adaptive=True` moves N by what the
        downstream says (docs/downstreams.md); rate limits, `rate_limit="10/s"` or
        `rate_key=` (`app.rate_limit`, docs/flow-control.md); a circuit breaker,
        `breaker=` (`app.breaker`).

        `payload=PayloadOptions(claim_check_threshold=, max_payload=, redact=,
        hygiene=)`: the task's payload settings over the app's (docs/payloads.md).
        """
        if len(fn) > 1:
            raise TypeError("app.task takes at most one function")
        if fn:
            return self._register(fn[0], **options)
        return lambda f: self._register(f, **options)

    def _register(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int = 20,
        timeout: Duration | None = None,
        hard_time_limit: Duration | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        dead_on: tuple[type[BaseException], ...] = (),
        idempotency_key: str | None = None,
        fairness_key: str | None = None,
        result_ttl: Duration | None = None,
        retry: RetryOptions = RetryOptions(),
        limits: Limits = Limits(),
        payload: PayloadOptions = PayloadOptions(),
        **unknown: Any,
    ) -> Task[Any, Any]:
        """The one place the task's options become its settings (`TaskDefaults`)."""
        for option in unknown:
            moved = MOVED_OPTIONS.get(option)
            hint = f": it is {moved} now" if moved is not None else ""
            raise TypeError(f"app.task() got an unexpected keyword argument {option!r}{hint}")
        if isinstance(fn, Task):
            raise ConfigurationError(
                f"{fn.name} is already a task; put @app.periodic above @app.task, not below"
            )
        task_name = name or f"{fn.__module__}.{fn.__qualname__}"
        try:
            valid.name("name", task_name)
            queue = None if queue is None else valid.name("queue", queue)
            priority = valid.priority(priority)
            max_attempts = valid.max_attempts(max_attempts)
        except InvalidJob as exc:
            raise ConfigurationError(f"task {task_name}: {exc}") from None
        for group, kind in ((retry, RetryOptions), (limits, Limits), (payload, PayloadOptions)):
            if not isinstance(group, kind):
                raise ConfigurationError(
                    f"task {task_name}: {kind.__name__}(...) expected, not {group!r}"
                )
        soft_s, hard_s = time_limits(task_name, timeout, hard_time_limit)
        templates = key_templates(task_name, fn, idempotency_key, fairness_key)
        concurrency = task_rule(
            task_name,
            inspect.signature(fn),
            limits.concurrency_key,
            limits.concurrency_limit,
            limits.max_running,
            limits.adaptive,
        )
        policy = task_retry_policy(
            task_name,
            retry_on=retry_on,
            dead_on=dead_on,
            backoff_base=retry.backoff_base,
            backoff_cap=retry.backoff_cap,
            retry_budget=retry.budget,
        )
        bucket = self.breakers.for_task(
            task_name, limits.rate_limit, limits.rate_key, limits.breaker
        )
        payload_fields = payload_defaults(
            task_name,
            claim_check_threshold=payload.claim_check_threshold,
            max_payload=payload.max_payload,
            redact=payload.redact,
            payload_hygiene=payload.hygiene,
            result_ttl=result_ttl,
        )
        if task_name in self.tasks and self.tasks[task_name].fn is not fn:
            raise ConfigurationError(f"two tasks are named {task_name!r}; pass name= to one")
        defaults = TaskDefaults(
            queue=queue or self.default_queue,
            priority=priority,
            max_attempts=max_attempts,
            timeout=soft_s,
            hard_time_limit=hard_s,
            retry=policy,
            rate_key=bucket,
            **templates,  # type: ignore[arg-type]
            concurrency=concurrency,
            **payload_fields,
        )
        task: Task[Any, Any] = Task(self, fn, task_name, defaults)
        self.tasks[task_name] = task
        return task

    # --- schedules -------------------------------------------------------------------
    def periodic(
        self,
        *,
        cron: str | None = None,
        every: timedelta | float | None = None,
        tz: str | None = None,
        name: str | None = None,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        misfire: str = "skip",
        max_catch_up: int = 10,
        overlap: str = "skip",
        jitter: Duration | None = None,
    ) -> PeriodicDecorator:
        """Run a task on a schedule, from every worker (no single beat process).

        Stack it above `@app.task` (or use it alone: the function becomes a task
        with default options); it returns the Task, unchanged.

        >>> @app.periodic(cron="0 9 * * MON-FRI", tz="Europe/Madrid", args=("daily",))
        ... @app.task(queue="reports")
        ... def send_report(kind: str) -> None: ...
        >>> app.periodic(every=timedelta(minutes=5), name="sync-5m")(sync_accounts)

        `misfire` after downtime: "skip" (fire the latest missed tick only),
        "catch_up" (one run covering the missed window) or "all" (each missed tick,
        at most `max_catch_up`). `overlap` while the previous run is still waiting or
        running: "skip", "allow" or "queue_one". See docs/scheduling.md.
        """
        from conveyor.scheduling.schedules import make_schedule

        def decorate(target: Task[Any, Any] | Callable[..., Any]) -> Task[Any, Any]:
            task = target if isinstance(target, Task) else self._register(target)
            if task.app is not self:
                raise ConfigurationError(f"task {task.name} belongs to another Conveyor app")
            schedule_name = name or task.name
            if schedule_name in self.schedules:
                raise ConfigurationError(
                    f"two schedules are named {schedule_name!r}; pass name= to one of them"
                )
            schedule = make_schedule(
                name=schedule_name,
                task=task.name,
                cron=cron,
                every=every,
                tz=tz,
                args=tuple(args),
                kwargs=dict(kwargs or {}),
                queue=queue,
                priority=priority,
                misfire=misfire,
                max_catch_up=max_catch_up,
                overlap=overlap,
                jitter=jitter,
            )
            try:
                task.validate(schedule.args, schedule.kwargs)
                # The ranges each of its enqueues will be held to, checked now.
                make_options(
                    queue=schedule.queue,
                    priority=schedule.priority,
                    job_id=schedule.job_id(int(valid.RUN_AT_MAX)),
                )
            except Exception as exc:
                raise ConfigurationError(f"schedule {schedule_name!r}: {exc}") from None
            self.schedules[schedule_name] = schedule
            return task

        return cast(PeriodicDecorator, decorate)

    def get_task(self, name: str) -> Task[Any, Any]:
        try:
            return self.tasks[name]
        except KeyError:
            raise UnknownTask(name, list(self.tasks)) from None

    # --- backend ---------------------------------------------------------------------
    async def backend(self) -> Backend:
        """The backend bound to the running event loop, opened (and migrated) on first use."""
        loop = asyncio.get_running_loop()
        backend = self._backends.get(loop)
        if backend is not None:
            return backend
        with self._lock:
            lock = self._backend_locks.setdefault(loop, asyncio.Lock())
        async with lock:
            backend = self._backends.get(loop)
            if backend is None:
                backend = backend_from_url(self.url, self.clock)
                await backend.open()
                if self.auto_migrate:
                    await backend.migrate()
                self._backends[loop] = backend
        return backend

    async def aclose(self) -> None:
        """Close the backend of the running loop."""
        await _close_loop_backend(self._backends)

    def close(self) -> None:
        """Close the sync facade's backend and thread."""
        if self.portal.loop is not None:
            self.portal.call(self.aclose())
        self._sync_backend = self._sync_blocking = None
        self.portal.stop()

    def rebind(self, url: str, clock: Clock | None = None) -> None:
        """Point the app at another backend (and clock), e.g. a memory store for a test
        (`conveyor.testing.use_memory`). The sync facade closes; each event loop opens
        a backend for the new URL at its next use, the old ones are forgotten."""
        self.close()
        self._backends.clear()
        self.url = url
        if clock is not None:
            self.clock = clock

    # --- producer -------------------------------------------------------------------
    async def enqueue_many_async(
        self, jobs: Iterable[NewJob], *, connection: Any = None
    ) -> list[JobHandle[Any]]:
        """Insert many jobs in one round trip. Build them with `task.message(...)`.

        Every job is checked first (`conveyor.model.validation`): one out of range raises
        InvalidJob and none of the batch is stored."""
        batch = self.queues.apply(self.claim_check.checked(jobs))
        if not batch:
            return []
        backend = await self.backend()
        transactional = (
            backend
            if connection is not None
            and isinstance(  # (asked only then:
                backend, TransactionalEnqueue
            )
            else None
        )  # a Protocol's isinstance costs µs)
        if connection is not None and transactional is None:
            raise ConfigurationError(
                f"{type(backend).__name__} does not support transactional enqueue (connection=)"
            )

        def stored(jobs: Sequence[NewJob]) -> Awaitable[list[Job]]:
            if transactional is None:  # (then there is no connection: checked above)
                return backend.enqueue_jobs(jobs)
            return transactional.enqueue_jobs_in(EnqueueIn(connection=connection, jobs=jobs))

        async def enqueue(jobs: Sequence[NewJob]) -> list[Job]:
            return await stored(await self.claim_check.offload(jobs))  # big payloads first

        with refusals_by_handle(self):
            if not self.middleware:  # nothing to offload or hold back: a coroutine less
                return handles(
                    self,
                    await (
                        stored(batch)
                        if self._direct(batch)
                        else enqueue_offering(enqueue, batch, self.queues)
                    ),
                )

            async def innermost(ctx: MiddlewareContext) -> None:
                assert isinstance(ctx, EnqueueContext)
                # Again: middleware may have changed or added jobs.
                ctx.jobs_out = await enqueue_offering(
                    enqueue, self.queues.apply(self.claim_check.checked(ctx.jobs_in)), self.queues
                )

            call = EnqueueContext(jobs_in=list(batch))
            await run_chain(self.middleware, call, innermost)
            return handles(self, call.jobs_out)

    def enqueue_many(
        self, jobs: Iterable[NewJob], *, connection: Any = None
    ) -> list[JobHandle[Any]]:
        """Sync form of `enqueue_many_async`, for Django, Flask, scripts."""
        batch = self.queues.apply(self.claim_check.checked(jobs))
        # Middleware is async: it runs on the portal loop, with the caller's contextvars
        # (its span, say); so does a workflow. Else a blocking backend skips the portal hop.
        if (
            connection is None
            and batch
            and not self.middleware
            and self._direct(batch)
            and not any(new.depends_on for new in batch)
        ):
            if self._sync_backend is None:
                backend = self._sync_backend = self.portal.call(self.backend())
                self._sync_blocking = backend if isinstance(backend, BlockingEnqueue) else None
            if self._sync_blocking is not None:
                with refusals_by_handle(self):
                    return handles(self, self._sync_blocking.enqueue_jobs_blocking(batch))
        return self.portal.call(self.enqueue_many_async(batch, connection=connection))

    def _direct(self, batch: Sequence[NewJob]) -> bool:
        """No payload to store apart first, no job of a queue whose producers wait."""
        return not self.claim_check.needs_offload(batch) and not self.queues.blocks(batch)


async def _close_loop_backend(
    backends: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Backend],
) -> None:
    backend = backends.pop(asyncio.get_running_loop(), None)
    if backend is not None:
        await backend.close()

"""Tasks: functions registered with an app, enqueued with type-checked arguments."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar

from conveyor.model import validation as valid
from conveyor.model.clock import Clock, Duration, to_seconds
from conveyor.model.errors import ArgumentValidationError, ConfigurationError, InvalidJob
from conveyor.model.job import NewJob
from conveyor.payloads.task_payload import encode_payload, new_job_id
from conveyor.rules.concurrency import ConcurrencyRule, job_concurrency
from conveyor.rules.fairness import FAIRNESS_META_KEY
from conveyor.rules.hygiene import REDACT_META_KEY, PayloadHygiene, redact_meta
from conveyor.rules.idempotency_key import IDEMPOTENCY_META_KEY, KeyTemplate
from conveyor.rules.results import RESULT_TTL_META_KEY, result_ttl_seconds
from conveyor.rules.retry import RetryPolicy
from conveyor.workflows.inputs import WORKFLOW_META_KEY
from conveyor.workflows.signature import Signature

if TYPE_CHECKING:
    from conveyor.handle import JobHandle

P = ParamSpec("P")
R = TypeVar("R")


class _DefaultMarker:
    def __repr__(self) -> str:
        return "_default"


def argument_checker(signature: inspect.Signature) -> Callable[..., None] | None:
    """A function taking exactly `signature`'s parameters and doing nothing: calling it
    checks an enqueue's arguments in C, where Signature.bind takes microseconds of
    Python on every enqueue. None when the signature cannot be written as source."""
    bare = signature.replace(
        parameters=[
            p.replace(
                annotation=p.empty, default=p.empty if p.default is p.empty else _DefaultMarker()
            )
            for p in signature.parameters.values()
        ],
        return_annotation=signature.empty,
    )
    namespace: dict[str, Any] = {"_default": None}
    try:
        exec(f"def check{bare}: pass", namespace)
    except SyntaxError:
        return None
    checker: Callable[..., None] = namespace["check"]
    return checker


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Per-enqueue options; never mixed with the function's own keyword arguments."""

    queue: str | None = None
    priority: int | None = None
    delay: float | None = None
    run_at: float | None = None
    job_id: str | None = None
    unique_key: str | None = None
    unique_for: float | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    connection: Any = None  # a caller's own DB connection, for transactional enqueue
    fairness_key: str | None = None  # over the task's template (conveyor.rules.fairness)
    fairness_weight: float | None = None
    depends_on: tuple[str, ...] = ()  # job ids that must end first (docs/workflows.md)
    allow_failure: bool | None = None  # run even if a parent ended dead or cancelled
    concurrency_key: str | None = None  # this job's key, in place of the task's
    concurrency_limit: int | None = None
    result_ttl: float | None = None  # seconds its result is kept (conveyor.rules.results)


_NO_OPTIONS = JobOptions()  # frozen, so one instance serves every plain enqueue


def make_options(
    *,
    queue: str | None = None,
    priority: int | None = None,
    delay: Duration | None = None,
    run_at: datetime | None = None,
    job_id: str | None = None,
    unique_key: str | None = None,
    unique_for: Duration | None = None,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    meta: dict[str, Any] | None = None,
    connection: Any = None,
    fairness_key: str | None = None,
    fairness_weight: float | None = None,
    depends_on: Iterable[Any] = (),
    allow_failure: bool | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    result_ttl: Duration | None = None,
) -> JobOptions:
    """Every value checked against `conveyor.model.validation`'s ranges (InvalidJob if not)."""
    if delay is not None and run_at is not None:
        raise InvalidJob("delay", delay, "either delay or run_at, not both")
    return JobOptions(
        queue=None if queue is None else valid.name("queue", queue),
        priority=None if priority is None else valid.priority(priority),
        delay=None if delay is None else valid.seconds("delay", delay),
        run_at=None if run_at is None else valid.epoch("run_at", run_at),
        job_id=None if job_id is None else valid.name("job_id", job_id),
        unique_key=None if unique_key is None else valid.name("unique_key", unique_key),
        unique_for=None if unique_for is None else valid.seconds("unique_for", unique_for),
        max_attempts=None if max_attempts is None else valid.max_attempts(max_attempts),
        timeout=None if timeout is None else valid.seconds("timeout", timeout, positive=True),
        meta={} if meta is None else dict(valid.meta(meta)),
        connection=connection,
        fairness_key=None if fairness_key is None else valid.name("fairness_key", fairness_key),
        fairness_weight=None if fairness_weight is None else valid.fairness_weight(fairness_weight),
        depends_on=tuple(job_id_of(parent) for parent in depends_on),
        allow_failure=allow_failure,
        concurrency_key=None
        if concurrency_key is None
        else valid.name("concurrency_key", concurrency_key),
        concurrency_limit=None
        if concurrency_limit is None
        else valid.concurrency_limit(concurrency_limit),
        result_ttl=None if result_ttl is None else result_ttl_seconds(result_ttl),
    )


def key_templates(
    task_name: str, fn: Callable[..., Any], idempotency_key: str | None, fairness_key: str | None
) -> dict[str, KeyTemplate | None]:
    """A task's argument templates (`idempotency_key=`, `fairness_key=`), checked
    against its signature: one template rule for both (conveyor.rules.idempotency_key)."""
    signature = inspect.signature(fn)
    try:
        return {
            name: None if template is None else KeyTemplate(template, signature, name)
            for name, template in (
                ("idempotency_key", idempotency_key),
                ("fairness_key", fairness_key),
            )
        }
    except ValueError as exc:
        raise ConfigurationError(f"task {task_name}: {exc}") from None


def job_id_of(parent: Any) -> str:
    """A parent named by its id, or by anything with an `id` (a JobHandle, a Job)."""
    job_id = parent if isinstance(parent, str) else getattr(parent, "id", None)
    if not isinstance(job_id, str):
        raise InvalidJob("depends_on", parent, "job ids or job handles")
    return valid.name("depends_on", job_id)


def time_limits(
    task_name: str,
    timeout: Duration | None,
    hard_time_limit: Duration | None,
) -> tuple[float | None, float | None]:
    """A task's (soft, hard) time limits in seconds, checked; `timeout=` is the soft one."""
    soft_s = None if timeout is None else to_seconds(timeout)
    hard_s = None if hard_time_limit is None else to_seconds(hard_time_limit)
    for label, limit in (("timeout", soft_s), ("hard_time_limit", hard_s)):
        if limit is not None and limit <= 0:
            raise ConfigurationError(f"task {task_name}: {label} must be positive")
    if soft_s is not None and hard_s is not None and hard_s <= soft_s:
        raise ConfigurationError(
            f"task {task_name}: hard_time_limit ({hard_s:g}s) must be longer than "
            f"timeout ({soft_s:g}s), leaving the handler time to clean up"
        )
    return soft_s, hard_s


@dataclass(frozen=True, slots=True)
class TaskDefaults:
    queue: str = "default"
    priority: int = 0
    max_attempts: int = 20
    timeout: float | None = None  # the soft time limit (seconds); a job may override it
    hard_time_limit: float | None = None
    retry: RetryPolicy = RetryPolicy()
    idempotency_key: KeyTemplate | None = None  # rendered into each job's meta at enqueue
    fairness_key: KeyTemplate | None = None  # rendered at enqueue (conveyor.rules.fairness)
    concurrency: ConcurrencyRule | None = None  # key and limit, rendered at enqueue
    # Payload limits in bytes of JSON (None: the app's); see conveyor.payloads.claim_check.
    claim_check_threshold: int | None = None
    max_payload: int | None = None
    redact: frozenset[str] = frozenset()  # argument keys masked wherever jobs are shown
    rate_key: str | None = (
        None  # the rate limit bucket its jobs spend from (conveyor.rules.rate_limits)
    )
    payload_hygiene: str | None = None  # "warn", "reject", "off"; None: the app's
    result_ttl: float | None = None  # seconds results are kept; None: with the job


class TaskApp(Protocol):
    """What a task needs of its app (a `Conveyor`): the clock (for `delay=`), the
    payload hygiene check, and the enqueue verbs, which run the middleware and the
    backend."""

    @property
    def clock(self) -> Clock: ...
    @property
    def hygiene(self) -> PayloadHygiene: ...
    def enqueue_many(
        self, jobs: Iterable[NewJob], *, connection: Any = None
    ) -> list[JobHandle[Any]]: ...
    async def enqueue_many_async(
        self, jobs: Iterable[NewJob], *, connection: Any = None
    ) -> list[JobHandle[Any]]: ...


class Task(Generic[P, R]):
    """A registered function. Call it to run inline; `enqueue` it to run on a worker.

    >>> @app.task(queue="emails", max_attempts=5)
    ... def send_welcome(user_id: int) -> None: ...
    >>> send_welcome.enqueue(42)
    """

    def __init__(
        self, app: TaskApp, fn: Callable[..., Any], name: str, defaults: TaskDefaults
    ) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.defaults = defaults
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = inspect.signature(fn)
        self._check_arguments = argument_checker(self.signature)
        # Names of the positional parameters, to name positional arguments in the
        # hygiene check and in `redact=`.
        self.positional_names = tuple(
            p.name
            for p in self.signature.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        )
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn
        self._plain = BoundTask(self, _NO_OPTIONS)  # a call without options: most of them

    def __repr__(self) -> str:
        return f"<Task {self.name} queue={self.defaults.queue}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Any:
        return self.fn(*args, **kwargs)

    def validate(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._check_arguments is not None:
            try:
                self._check_arguments(*args, **kwargs)
                return
            except TypeError:
                pass  # Signature.bind words the error better
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentValidationError(f"{self.name}{self.signature}: {exc}") from None

    def options(self, **options: Any) -> BoundTask[P, R]:
        """Enqueue with options: queue, priority, delay, run_at, job_id, unique_key,
        unique_for, max_attempts, timeout, meta, connection, fairness_key,
        fairness_weight, concurrency_key, concurrency_limit (a fixed key for this job, in
        place of the task's), result_ttl.

        >>> send_welcome.options(delay=timedelta(seconds=30), job_id="welcome:42").enqueue(42)
        """
        return BoundTask(self, make_options(**options))

    def message(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        """The job this call would enqueue, for `app.enqueue_many`."""
        return self._plain.job_of(args, kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This call as a workflow step (`conveyor.workflows.canvas.chain`, `group`, `chord`)."""
        return self._plain.s(*args, **kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step that receives no result from the step before it."""
        return self._plain.si(*args, **kwargs)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        return self.app.enqueue_many([self._plain.job_of(args, kwargs)])[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        return (await self.app.enqueue_many_async([self._plain.job_of(args, kwargs)]))[0]


class BoundTask(Generic[P, R]):
    """A task with enqueue options applied."""

    def __init__(self, task: Task[P, R], opts: JobOptions) -> None:
        self.task = task
        self.opts = opts

    def options(self, **options: Any) -> BoundTask[P, R]:
        merged = make_options(**options)
        changes = {k: getattr(merged, k) for k in options}
        if "delay" in options:
            changes["run_at"] = None
        if "run_at" in options:
            changes["delay"] = None
        return BoundTask(self.task, replace(self.opts, **changes))

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This call as a workflow step (`conveyor.workflows.canvas`): in a chain it receives
        the previous step's result as its first argument."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step that receives no result from the step before it."""
        return Signature(self, args, kwargs, takes_input=False)

    def message(self, *args: P.args, **kwargs: P.kwargs) -> NewJob:
        return self.job_of(args, kwargs)

    def job_of(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], takes_input: bool = False
    ) -> NewJob:
        """The job of this call; `takes_input`: a workflow step whose first argument
        comes from its parents when it runs (checked here as a placeholder)."""
        task, opts, d = self.task, self.opts, self.task.defaults
        checked = (None, *args) if takes_input else args
        task.validate(checked, kwargs)
        task.app.hygiene.check(
            task.name, d.payload_hygiene, task.positional_names, checked, kwargs, d.redact
        )
        meta = (
            dict(opts.meta)
            if d.idempotency_key is None
            else {**opts.meta, IDEMPOTENCY_META_KEY: d.idempotency_key.render(args, kwargs)}
        )
        if d.redact:
            meta[REDACT_META_KEY] = redact_meta(d.redact, task.positional_names, len(args))
        fairness_key = opts.fairness_key
        if fairness_key is None and d.fairness_key is not None:
            fairness_key = d.fairness_key.render(args, kwargs)
        if fairness_key is not None:
            meta[FAIRNESS_META_KEY] = fairness_key  # shown with the job
        if opts.depends_on:  # by hand: parents that give no input (conveyor.workflows.canvas)
            meta[WORKFLOW_META_KEY] = {"parents": list(opts.depends_on), "input": None}
        if (ttl := d.result_ttl if opts.result_ttl is None else opts.result_ttl) is not None:
            meta[RESULT_TTL_META_KEY] = ttl  # to the worker, which stores the expiry
        run_at = opts.run_at
        if opts.delay is not None:
            run_at = task.app.clock() + opts.delay
        key, limit = job_concurrency(
            d.concurrency, opts.concurrency_key, opts.concurrency_limit, args, kwargs
        )
        return NewJob(
            id=new_job_id() if opts.job_id is None else opts.job_id,
            task=task.name,
            queue=d.queue if opts.queue is None else opts.queue,
            payload=encode_payload(task.name, args, kwargs),
            priority=d.priority if opts.priority is None else opts.priority,
            max_attempts=d.max_attempts if opts.max_attempts is None else opts.max_attempts,
            run_at=run_at,
            unique_key=opts.unique_key,
            unique_for=opts.unique_for,
            timeout=opts.timeout if opts.timeout is not None else d.timeout,
            meta=meta,
            fairness_key=fairness_key,
            fairness_weight=opts.fairness_weight,
            depends_on=opts.depends_on,
            allow_failure=bool(opts.allow_failure),
            concurrency_key=key,
            concurrency_limit=limit,
            rate_key=d.rate_key,
        )

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        return self.task.app.enqueue_many(
            [self.message(*args, **kwargs)], connection=self.opts.connection
        )[0]

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle[R]:
        handles = await self.task.app.enqueue_many_async(
            [self.message(*args, **kwargs)], connection=self.opts.connection
        )
        return handles[0]

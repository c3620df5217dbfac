"""Run one job and decide how its attempt ends. No storage writes here: the
result is a `Settlement` that the completer writes in a batch."""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import socket
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from conveyor.backends.params import Settlement
from conveyor.context import _CURRENT, JobContext
from conveyor.model.errors import (
    ArgumentValidationError,
    CorruptPayload,
    HardTimeLimitExceeded,
    UnknownTask,
)
from conveyor.model.job import AttemptError, Job, JobState
from conveyor.model.outcomes import Cancel, Retry, Snooze
from conveyor.model.version import __version__
from conveyor.observe.middleware import ExecuteContext, MiddlewareContext, run_chain
from conveyor.plugins import WorkerPlugin, overriding
from conveyor.rules.breakers import BreakerError
from conveyor.rules.retry import RetryPolicy
from conveyor.worker.handler_call import (
    INTERRUPTS,
    HandlerOutcome,
    Returned,
    cancel_requested,
    formatted,
    release_frames,
)
from conveyor.worker.limits import run_async_limited, run_sync_limited
from conveyor.worker.thread_bridge import ThreadBridge

if TYPE_CHECKING:
    from conveyor.worker.app_protocol import WorkerApp

log = logging.getLogger("conveyor.worker")
HOST = socket.gethostname()
_DEFAULT_POLICY = RetryPolicy()


def decode_payload(job: Job, text: str | None = None) -> tuple[list[Any], dict[str, Any]]:
    """The (args, kwargs) of `text` (default: the job's stored payload)."""
    try:
        data = json.loads(job.payload if text is None else text)
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise ValueError("args must be a list and kwargs an object")
        return args, kwargs
    except (ValueError, AttributeError) as exc:
        raise CorruptPayload(f"payload of job {job.id} cannot be decoded: {exc}") from None
    except RecursionError:  # not a passing failure: it is nested too deeply every time
        raise CorruptPayload(
            f"payload of job {job.id} cannot be decoded: JSON nested too deeply"
        ) from None


class JobExecutor:
    """Runs one attempt and decides its settlement; the features around an attempt
    are the `plugins` (conveyor.plugins), each called on the hooks it overrides."""

    def __init__(
        self,
        app: WorkerApp,
        worker_id: str,
        threads: ThreadBridge,
        plugins: Sequence[WorkerPlugin] = (),
    ) -> None:
        self.app = app
        self.worker_id = worker_id
        self.threads = threads  # sync handlers run there
        self.plugins = tuple(plugins)
        self._before = overriding(self.plugins, "before_attempt")
        self._leading = overriding(self.plugins, "leading_args")
        self._handler_ended = overriding(self.plugins, "handler_ended")
        self._completed = overriding(self.plugins, "completed")
        self._attempt_failed = overriding(self.plugins, "attempt_failed")
        self._retry_at = overriding(self.plugins, "retry_at")
        self._after = overriding(self.plugins, "after_attempt")
        self._deferred: set[str] = set()  # jobs whose retry a plugin moved, until reported
        # Told when a sync handler outlives its hard limit: its thread cannot be
        # stopped, only its process (the pool child replaces itself).
        self.on_runaway: Callable[[Job], None] = lambda job: None

    async def run(self, job: Job, ctx: JobContext) -> Settlement:
        now = self.app.clock()
        for plugin in self._before:
            plugin.before_attempt(job, now)
        settlement = None
        try:
            settlement = await self._observed(job, ctx)
        finally:
            self._deferred.discard(job.id)  # however the attempt ended
            waits = [w for p in self._after if (w := p.after_attempt(job, settlement)) is not None]
        for wait in waits:
            await wait
        return settlement

    async def _observed(self, job: Job, ctx: JobContext) -> Settlement:
        """`_run` inside the app's middleware."""
        middleware = self.app.middleware
        if not middleware:
            return await self._run(job, ctx)

        async def innermost(call: MiddlewareContext) -> None:
            assert isinstance(call, ExecuteContext)
            call.settlement = await self._run(call.job, ctx)
            call.retry_deferred = job.id in self._deferred

        call = ExecuteContext(job=job, worker_id=self.worker_id)
        try:
            await run_chain(middleware, call, innermost)
        except INTERRUPTS as exc:
            if cancel_requested():
                raise  # the worker is stopping this attempt: it decides (InFlightJobs._interrupted)
            return self._middleware_failed(job, call, exc)
        except BaseException as exc:
            return self._middleware_failed(job, call, exc)
        if call.settlement is None:
            error = RuntimeError("a middleware returned without calling call_next")
            return self._failed(job, error, _DEFAULT_POLICY, tb="", force_retry=True)
        return call.settlement

    def _middleware_failed(
        self, job: Job, call: ExecuteContext, error: BaseException
    ) -> Settlement:
        log.error("middleware failed around job %s (%s)", job.id, job.task, exc_info=error)
        try:
            if call.settlement is not None:
                return call.settlement  # the handler's outcome stands
            return self._failed(job, error, _DEFAULT_POLICY, tb=formatted(error))
        finally:
            release_frames(error)

    async def _run(self, job: Job, ctx: JobContext) -> Settlement:
        try:
            task = self.app.get_task(job.task)
        except UnknownTask as exc:
            # Often a deploy in progress: a newer producer than this worker. Retry.
            return self._failed(job, exc, _DEFAULT_POLICY, tb="", force_retry=True)
        policy = task.defaults.retry
        ctx.retry_policy = policy  # once() sizes its records by it
        try:
            # Stored apart (claim_check): read back and checked; a missing or changed
            # blob is a CorruptPayload, a store that is down a retry.
            args, kwargs = decode_payload(job, await self.app.claim_check.arguments_text(job))
            for plugin in self._leading:  # a workflow member: its parents' results first
                leading = plugin.leading_args(job)
                if leading is not None:
                    args = [*await leading, *args]
            task.validate(tuple(args), kwargs)  # the enqueue's check: in C when it can be
        except (CorruptPayload, ArgumentValidationError) as exc:
            return self._failed(job, exc, policy, tb=traceback.format_exc())
        soft = job.timeout if job.timeout is not None else task.defaults.timeout
        hard = task.defaults.hard_time_limit
        token = _CURRENT.set(ctx)
        try:
            outcome: HandlerOutcome[Any]
            if task.is_async:
                outcome = await run_async_limited(
                    task.fn(*args, **kwargs), soft, hard, on_runaway=lambda: self.on_runaway(job)
                )
            else:
                in_context = functools.partial(
                    contextvars.copy_context().run, task.fn, *args, **kwargs
                )
                outcome = await run_sync_limited(
                    self.threads, in_context, soft, hard, on_runaway=lambda: self.on_runaway(job)
                )
        finally:
            _CURRENT.reset(token)
        if isinstance(outcome, Returned):
            for plugin in self._handler_ended:
                plugin.handler_ended(job, None, policy)
            result = self._encode(job, outcome.value)
            if result is not None:
                result = await self.app.claim_check.stored_result(job, result)
            settlement = Settlement(job.id, job.lease_token, JobState.COMPLETED, result=result)
            for plugin in self._completed:  # a result's expiry, say
                settlement = plugin.completed(job, settlement)
            return settlement
        error = outcome.error
        for plugin in self._handler_ended:
            plugin.handler_ended(job, error, policy)
        try:
            return self._raised(job, ctx, error, policy)
        finally:
            release_frames(error)  # the handler's locals go with its attempt

    def _raised(
        self, job: Job, ctx: JobContext, error: BaseException, policy: RetryPolicy
    ) -> Settlement:
        """The settlement of an attempt whose handler raised `error` (of any type)."""
        if isinstance(error, Snooze):
            run_at = self.app.clock() + error.delay
            state = JobState.SCHEDULED if error.delay > 0 else JobState.AVAILABLE
            return Settlement(job.id, job.lease_token, state, run_at=run_at, refund_attempt=True)
        if isinstance(error, Retry):
            return self._failed(job, error, policy, tb="", after=error.after, force_retry=True)
        if isinstance(error, Cancel):
            if ctx.cancel_requested:  # an operator asked; the handler agreed
                err = self._error(job, error, "")
                return Settlement(job.id, job.lease_token, JobState.CANCELLED, error=err)
            return self._failed(job, error, policy, tb="")
        if isinstance(error, HardTimeLimitExceeded):
            return self._failed(job, error, policy, tb="")
        if isinstance(error, UnknownTask):  # a handler calling a task not deployed yet
            return self._failed(job, error, policy, tb="", force_retry=True)
        if isinstance(error, BreakerError):  # the downstream is down: worth another attempt
            return self._failed(job, error, policy, tb=formatted(error), force_retry=True)
        return self._failed(job, error, policy, tb=formatted(error))

    def failed_outside_the_handler(self, job: Job, error: BaseException) -> Settlement:
        """The settlement of an attempt ended by `error` around the handler rather than
        in it: a cancel nobody here asked for, raised by a middleware or requested by
        the handler of its own task. A failure of the attempt like any other."""
        task = self.app.tasks.get(job.task)
        policy = task.defaults.retry if task is not None else _DEFAULT_POLICY
        try:
            return self._failed(job, error, policy, tb=formatted(error))
        finally:
            release_frames(error)
            self._deferred.discard(job.id)  # no middleware is left to report it to

    def _encode(self, job: Job, result: Any) -> str | None:
        if result is None:  # most handlers' value: json.dumps is dearer to say so
            return "null"
        try:
            return json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as exc:
            # The side effects happened; failing the job now would repeat them.
            log.warning(
                "job %s (%s) returned a value JSON cannot store (%s); result dropped",
                job.id,
                job.task,
                exc,
            )
            return None

    def _error(self, job: Job, exc: BaseException, tb: str) -> AttemptError:
        return AttemptError(
            attempt=job.attempt,
            at=self.app.clock(),
            type=type(exc).__name__,
            message=str(exc)[:4000],
            traceback=tb[-16000:],
            worker_id=self.worker_id,
            host=HOST,
            version=__version__,
            app_version=self.app.version,
        )

    def _failed(
        self,
        job: Job,
        exc: BaseException,
        policy: RetryPolicy,
        tb: str,
        after: float | None = None,
        force_retry: bool = False,
    ) -> Settlement:
        err = self._error(job, exc, tb)
        for plugin in self._attempt_failed:
            plugin.attempt_failed(job, exc)
        transient = force_retry or policy.is_transient(exc)
        if transient and job.attempt < job.max_attempts:
            delay = policy.backoff(job.attempt) if after is None else after
            now = self.app.clock()
            run_at = now + delay
            for plugin in self._retry_at:  # a retry budget may move it later
                run_at, deferred = plugin.retry_at(job, run_at, now)
                if deferred:
                    self._deferred.add(job.id)
            return Settlement(job.id, job.lease_token, JobState.RETRYABLE, error=err, run_at=run_at)
        return Settlement(job.id, job.lease_token, JobState.DEAD, error=err)

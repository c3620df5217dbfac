"""Assertions on what an app has enqueued and not yet run: `assert_enqueued`,
`refute_enqueued`, `enqueued`. Arguments match partially, by parameter name: the
ones given must be what the job was enqueued with, however it was called
(positionally or by keyword); the ones left out match anything."""

from __future__ import annotations

import inspect
import json
from typing import Any

from conveyor.app import Conveyor
from conveyor.backends.filtering import WAITING_STATES
from conveyor.backends.params import JobFilter
from conveyor.model.errors import CorruptPayload
from conveyor.model.job import Job
from conveyor.task import Task
from conveyor.worker.executor import decode_payload

_MISSING = object()


def enqueued(task: Task[Any, Any], *args: Any, **kwargs: Any) -> list[Job]:
    """The jobs of `task` waiting to run (scheduled, available, retryable) whose
    arguments include these, oldest first."""
    wanted = _given(task, args, kwargs)
    return [job for job in _waiting(task) if _matches(task, job, wanted)]


def assert_enqueued(task: Task[Any, Any], *args: Any, **kwargs: Any) -> Job:
    """Fail unless a job of `task` with these arguments waits to run; return the
    oldest such job."""
    found = enqueued(task, *args, **kwargs)
    if not found:
        raise AssertionError(
            f"no {_call(task.name, args, kwargs)} job is enqueued; {_waiting_summary(task)}"
        )
    return found[0]


def refute_enqueued(task: Task[Any, Any], *args: Any, **kwargs: Any) -> None:
    """Fail if a job of `task` with these arguments waits to run."""
    found = enqueued(task, *args, **kwargs)
    if found:
        listed = ", ".join(f"{_job_call(job)} [{job.state.value}]" for job in found[:5])
        raise AssertionError(
            f"expected no {_call(task.name, args, kwargs)} job enqueued, "
            f"found {len(found)}: {listed}"
        )


def _waiting(task: Task[Any, Any]) -> list[Job]:
    app = task.app
    if not isinstance(app, Conveyor):
        raise TypeError(f"{task.name} belongs to {app!r}, not to a Conveyor app")
    jobs = app.portal.call(
        app.admin.list(JobFilter(states=WAITING_STATES, tasks=(task.name,)), limit=1_000_000)
    )
    return list(reversed(jobs))  # oldest first


def _given(task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = task.signature.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{task.name}{task.signature}: {exc}") from None
    return {name: _as_stored(value) for name, value in bound.arguments.items()}


def _as_stored(value: Any) -> Any:
    """A value as a job holds it after the JSON round trip (tuples become lists)."""
    return json.loads(json.dumps(value))


def _matches(task: Task[Any, Any], job: Job, wanted: dict[str, Any]) -> bool:
    try:
        args, kwargs = decode_payload(job)
        stored = task.signature.bind_partial(*args, **kwargs).arguments
    except (CorruptPayload, TypeError):
        return False
    for name, value in wanted.items():
        have = stored.get(name, _MISSING)
        if task.signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            if not isinstance(have, dict) or any(
                have.get(k, _MISSING) != v for k, v in value.items()
            ):
                return False
        elif have != value:
            return False
    return True


def _call(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return f"{name}({', '.join(shown)})"


def _job_call(job: Job) -> str:
    try:
        args, kwargs = decode_payload(job)
    except CorruptPayload:
        return f"{job.task}(<unreadable payload>)"
    return _call(job.task, tuple(args), kwargs)


def _waiting_summary(task: Task[Any, Any]) -> str:
    waiting = _waiting(task)
    if not waiting:
        return f"no {task.name} job waits at all"
    listed = ", ".join(f"{_job_call(job)} [{job.state.value}]" for job in waiting[:5])
    more = f" and {len(waiting) - 5} more" if len(waiting) > 5 else ""
    return f"waiting: {listed}{more}"

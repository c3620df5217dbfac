"""Driver errors become Conveyor errors at the backend's boundary."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from redis.exceptions import (
    AuthenticationError,
    AuthenticationWrongNumberOfArgsError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from conveyor.backends import redact_url
from conveyor.model.errors import BackendUnavailable, ConfigurationError, InvalidJob
from conveyor.model.job import JobState
from conveyor.model.lifecycle import IllegalTransition

P = ParamSpec("P")
T = TypeVar("T")

# The error a script's state guard raises: this prefix, then "old>new".
ILLEGAL_TRANSITION = "CONVEYOR_ILLEGAL_TRANSITION"
UNKNOWN_PARENT = "CONVEYOR_UNKNOWN_PARENT"  # enqueue_dependants.lua: "<id> <parent>"
UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError)


def translate(url: str, exc: Exception) -> Exception | None:
    """The Conveyor error for a driver error, or None to let it through."""
    if isinstance(exc, (AuthenticationError, AuthenticationWrongNumberOfArgsError)):
        # redis-py makes these ConnectionErrors, but retrying will not help.
        return ConfigurationError(
            f"Redis at {redact_url(url)} refused the credentials ({exc}); check the "
            "user and password in the URL"
        )
    if isinstance(exc, UNAVAILABLE):
        return BackendUnavailable(
            f"Redis at {redact_url(url)} is unreachable ({type(exc).__name__}: {exc}). "
            "Retry later; re-enqueueing the same job id is safe (it deduplicates)."
        )
    if isinstance(exc, ResponseError) and UNKNOWN_PARENT in str(exc):
        child, _, parent = str(exc).split(UNKNOWN_PARENT, 1)[1].strip().partition(" ")
        return InvalidJob(
            "depends_on", parent, "the id of a stored job (or another job's)", where=child
        )
    if isinstance(exc, ResponseError) and ILLEGAL_TRANSITION in str(exc):
        old, _, new = str(exc).split(ILLEGAL_TRANSITION, 1)[1].strip().partition(">")
        return IllegalTransition(JobState(old), JobState(new))
    return None


def translated(
    method: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Wrap a method of a role object (its `connection` has the `url` to name): driver
    errors become Conveyor errors."""

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except Exception as exc:
            url: str = getattr(args[0], "connection").url  # noqa: B009 (args[0]: object)
            conveyor_error = translate(url, exc)
            if conveyor_error is None:
                raise
            raise conveyor_error from exc

    return wrapper

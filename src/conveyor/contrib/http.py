"""What an HTTP call's outcome means for the job: httpx (or httpx2) and requests,
neither of them required.

* 429 Too Many Requests and 503 Service Unavailable: `Retry`, after the response's
  `Retry-After` (seconds or an HTTP-date, at most `max_retry_after`), else after
  the task's backoff.
* any other 4xx: `PermanentHTTPError`, dead at once (the same request fails the
  same way every time).
* any other 5xx, timeouts and connection errors: `TransientHTTPError`, retried
  with the task's backoff.

>>> from conveyor.contrib.http import http_outcomes, raise_for_status
>>> raise_for_status(httpx.post(url, json=body, headers={"Idempotency-Key": key}))
>>> with http_outcomes():                      # the client's own exceptions, translated
...     requests.post(url, json=body, timeout=10).raise_for_status()

By default `PermanentHTTPError` goes dead (it is a ValueError, as Conveyor's
default policy expects of errors that repeat) and `TransientHTTPError` retries. A
task with its own `retry_on=` lists `TransientHTTPError` there to keep retrying
them. Messages name the URL without its query string or credentials.
"""

from __future__ import annotations

import functools
import importlib
import math
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from http import HTTPStatus
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from conveyor.model.clock import Duration, to_seconds
from conveyor.model.errors import ConveyorError
from conveyor.model.outcomes import Retry

__all__ = [
    "HTTPStatusFailure",
    "PermanentHTTPError",
    "TransientHTTPError",
    "http_outcomes",
    "raise_for_status",
    "retry_after",
]

R = TypeVar("R")
RETRY_AFTER_STATUSES = frozenset({HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.SERVICE_UNAVAILABLE})
DEFAULT_MAX_RETRY_AFTER = (
    3600.0  # a server asking for more is waited on this long, then asked again
)
_NO_QUERY = re.compile(r"\?[^\s'\")]*")  # a query string inside a client's message


class HTTPStatusFailure(ConveyorError):
    """A response whose status says the call did not succeed. `response` is the
    client's own response object, for handlers that want its body."""

    def __init__(
        self, status: int, url: str, response: Any = None, message: str | None = None
    ) -> None:
        super().__init__(message or f"HTTP {status} {_phrase(status)} from {url}")
        self.status, self.url, self.response = status, url, response


class PermanentHTTPError(HTTPStatusFailure, ValueError):
    """A 4xx other than 429: the request is wrong and will stay wrong. Dead at once."""


class TransientHTTPError(HTTPStatusFailure):
    """A 5xx other than 503, a timeout or a broken connection: worth another attempt.
    `status` is 0 when no response came."""


def raise_for_status(response: R, *, max_retry_after: Duration = DEFAULT_MAX_RETRY_AFTER) -> R:
    """`response` itself when its status is below 400; else raise what the status
    means for the job (see the module's rules).

    >>> charge = raise_for_status(client.post("/v1/charges", data=form)).json()
    """
    status = int(getattr(response, "status_code"))  # noqa: B009 (R is any response type)
    if status < 400:
        return response
    url = _shown_url(response)
    if status in RETRY_AFTER_STATUSES:
        after = retry_after(response, max_retry_after=max_retry_after)
        waited = "" if after is None else f"; Retry-After {after:g}s"
        raise Retry(after=after, reason=f"HTTP {status} {_phrase(status)} from {url}{waited}")
    if status < 500:
        raise PermanentHTTPError(status, url, response)
    raise TransientHTTPError(status, url, response)


def retry_after(
    response: Any,
    *,
    max_retry_after: Duration = DEFAULT_MAX_RETRY_AFTER,
    now: Callable[[], float] = time.time,
) -> float | None:
    """Seconds the response's `Retry-After` asks to wait (a number of seconds or an
    HTTP-date, counted from `now`), at most `max_retry_after`; None when there is
    no such header or it cannot be read."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - now()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
    if not math.isfinite(seconds):
        return None
    return min(max(seconds, 0.0), to_seconds(max_retry_after))


@contextmanager
def http_outcomes(*, max_retry_after: Duration = DEFAULT_MAX_RETRY_AFTER) -> Iterator[None]:
    """Translate the HTTP client's exceptions raised inside the block: a status error
    (`response.raise_for_status()` of httpx or requests) as `raise_for_status` does,
    a timeout or a connection error as `TransientHTTPError`. Others pass unchanged.
    The client's exception is not chained to ours: its message may hold the full URL.

    >>> with http_outcomes():
    ...     httpx.get("https://api.example.org/v1/rates", timeout=5).raise_for_status()
    """
    errors = _client_errors()
    try:
        yield
    except errors.status as exc:
        response = getattr(exc, "response", None)
        if response is None or int(getattr(response, "status_code", 0)) < 400:
            raise  # not a failed response: keep the client's own error
        try:
            raise_for_status(response, max_retry_after=max_retry_after)
        except (Retry, HTTPStatusFailure) as failure:
            raise failure from None
    except errors.transport as exc:
        url = _shown_url(_request_of(exc))
        detail = _NO_QUERY.sub("?...", str(exc))
        raise TransientHTTPError(
            0, url, message=f"{type(exc).__name__} calling {url}: {detail}"[:1000]
        ) from None


@functools.cache
def _client_errors() -> _ClientErrors:
    """The exception classes of whichever clients are installed."""
    status: list[type[BaseException]] = []
    transport: list[type[BaseException]] = []
    for name in ("httpx", "httpx2"):
        client = _optional(name)
        if client is not None:
            status.append(client.HTTPStatusError)
            transport += [client.TimeoutException, client.NetworkError, client.RemoteProtocolError]
    requests = _optional("requests")
    if requests is not None:
        status.append(requests.exceptions.HTTPError)
        transport += [
            requests.exceptions.Timeout,
            requests.exceptions.ConnectionError,
            requests.exceptions.ChunkedEncodingError,
        ]
    return _ClientErrors(tuple(status), tuple(transport))


class _ClientErrors:
    def __init__(
        self, status: tuple[type[BaseException], ...], transport: tuple[type[BaseException], ...]
    ) -> None:
        self.status, self.transport = status, transport


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _request_of(error: BaseException) -> Any:
    try:
        return getattr(error, "request", None)
    except RuntimeError:  # httpx: an error raised without a request
        return None


def _shown_url(carrier: Any) -> str:
    """The URL of a response or request, without query, fragment or credentials
    (they may hold tokens); "(unknown URL)" when it has none."""
    try:
        url = carrier.url
    except (AttributeError, RuntimeError):  # httpx: a response built without a request
        url = None
    if url is None:
        return "(unknown URL)"
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host  # an IPv6 address
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""

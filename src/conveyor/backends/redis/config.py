"""The Redis URL: the driver's part, Conveyor's query options, and connection settings.

URL: `redis://[:password@]host:6379/0?prefix=conveyor` (`rediss://` for TLS).
Query options:

* `prefix` (default `conveyor`): every key starts with `{prefix}:`; different
  prefixes never see each other's jobs (tests use a random one each).
* `max_completed` (default 100000): most completed (and, separately, cancelled)
  jobs kept per queue; the oldest are dropped as new ones finish. `0`: no bound.
* `max_dead` (default 100000): the same bound for the dead-letter queue.
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import parse_qs, urlsplit

from conveyor.backends import redact_url
from conveyor.model.errors import ConfigurationError

_OPTIONS = {"prefix", "max_completed", "max_dead"}
_KEEPALIVE = {
    option: value
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3))
    if (option := getattr(socket, name, None)) is not None
}


def parse_redis_url(url: str) -> tuple[str, dict[str, str]]:
    """Split a Conveyor Redis URL into the driver's URL and Conveyor's options."""
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        raise ConfigurationError(f"not a Redis URL: {redact_url(url)!r}")
    options = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ConfigurationError(
            f"unknown Redis URL option(s) {sorted(unknown)} in {redact_url(url)!r}; "
            f"known: {', '.join(sorted(_OPTIONS))}"
        )
    prefix = options.get("prefix", "conveyor")
    if not prefix or any(c in prefix for c in "{}*?[] \t\r\n"):
        raise ConfigurationError(
            f"prefix={prefix!r} in {redact_url(url)!r}: use letters, digits, '-', '_', ':' or '.'"
        )
    for name in ("max_completed", "max_dead"):
        if name in options:
            try:
                if int(options[name]) < 0:
                    raise ValueError
            except ValueError:
                raise ConfigurationError(
                    f"{name}={options[name]!r} in {redact_url(url)!r}: expected a whole "
                    "number >= 0 (0: no bound)"
                ) from None
    return parts._replace(query="").geturl(), options


def connection_settings() -> dict[str, Any]:
    """redis-py connection settings shared by the asyncio client and the enqueue connections."""
    return dict(
        decode_responses=True,
        # A stored value that is not UTF-8 arrives as text with lone surrogates in
        # place of the bad bytes instead of failing the whole reply (a claimed batch,
        # a listing page); the job codec reports that field as not valid UTF-8.
        encoding_errors="surrogateescape",
        socket_connect_timeout=5.0,
        # A server that stops answering (a partition without a reset) must not
        # hang a worker forever. TCP keepalive finds the dead peer in about 25 s.
        # Not socket_timeout, and None said out loud because redis-py 8 defaults it
        # to 5 s: with it, every send goes through asyncio.wait_for, which on Python
        # 3.11 returns instead of raising when a cancel lands as the send completes,
        # and nearly every cancel of a task inside a command was lost (a worker then
        # cannot stop its services); reads get a timeout context that does the same.
        socket_timeout=None,
        # redis-py 8 bounds a pool at 100 connections and raises past it; 7 did not.
        # A worker at -c 200 has that many jobs writing at once: keep 7's behaviour.
        max_connections=2**31,
        socket_keepalive=True,
        socket_keepalive_options=_KEEPALIVE,
        health_check_interval=30,
        client_name="conveyor",
    )

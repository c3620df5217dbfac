"""The first connection of a PostgreSQL backend, made directly before the pool opens,
so that a mistake in the URL is reported at once in the server's own words.

Through psycopg_pool every failure looks the same: the pool retries in the
background and the caller gets `PoolTimeout` after `timeout` seconds, whether the
server is restarting or the role does not exist. libpq gives no SQLSTATE for a
failed connection (the server's error reaches the client only as text, see
psycopg/psycopg#1188), so the message decides:

* permanent: authentication failures and unknown roles (SQLSTATE 28000, 28P01), an
  unknown database (3D000), settings the server refuses (42704, 22023), and libpq's
  own option errors. ConfigurationError at once: retrying cannot help.
* anything else (refused, timed out, too many clients, starting up): tried again
  until `timeout`, then BackendUnavailable with the last message.

A server that words its errors in another language (lc_messages) is treated as
transient, which costs `timeout` seconds before the same clear message.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict

from conveyor.backends.postgres.config import PostgresConfig
from conveyor.model.errors import BackendUnavailable, ConfigurationError

AsyncConn = psycopg.AsyncConnection[Any]

_PERMANENT = re.compile(
    "|".join(
        [
            r"password authentication failed",  # 28P01
            r"authentication failed for user",  # 28000: ident, peer, cert, ldap, ...
            r'role ".*" does not exist',  # 28000
            r"no pg_hba\.conf entry",  # 28000
            r"is not permitted to log in",  # 28000
            r'database ".*" does not exist',  # 3D000
            r"unrecognized configuration parameter",  # 42704
            r"invalid value for parameter",  # 22023
            r"permission denied for database",  # 42501: no CONNECT privilege
            r"no password supplied",  # libpq: the server asks for a password, the URL has none
            r"invalid \w+ value",  # libpq: invalid sslmode value, invalid integer value ...
            r"invalid connection option",
        ]
    )
)
_FIRST_PAUSE, _LONGEST_PAUSE = 0.1, 1.0


async def first_connection(config: PostgresConfig) -> AsyncConn:
    """An autocommit connection, or ConfigurationError / BackendUnavailable saying why not."""
    deadline = time.monotonic() + config.timeout
    pause = _FIRST_PAUSE
    while True:
        remaining = deadline - time.monotonic()
        try:
            return await psycopg.AsyncConnection.connect(
                config.conninfo, autocommit=True, **_connect_timeout(config, remaining)
            )
        except psycopg.Error as exc:
            said = _server_said(exc, config)
            if isinstance(exc, psycopg.ProgrammingError) or _PERMANENT.search(said):
                raise ConfigurationError(
                    f"PostgreSQL at {config.redacted} refused the connection: {said}"
                ) from exc
            if time.monotonic() + pause >= deadline:
                raise BackendUnavailable(
                    f"PostgreSQL at {config.redacted} is unavailable ({said}); nothing was "
                    "acknowledged, retry later"
                ) from exc
        await asyncio.sleep(pause)
        pause = min(pause * 2, _LONGEST_PAUSE)


def _connect_timeout(config: PostgresConfig, remaining: float) -> dict[str, Any]:
    """What is left of `timeout` for this attempt, unless the URL sets its own
    connect_timeout (libpq's default is to wait for the operating system's)."""
    if "connect_timeout" in conninfo_to_dict(config.conninfo):
        return {}
    return {"connect_timeout": max(2, round(remaining))}  # libpq's least useful value is 2


def _server_said(exc: psycopg.Error, config: PostgresConfig) -> str:
    """The error on one line, without psycopg's prefix and never with the password."""
    said = " ".join(str(exc).split()).removeprefix("connection failed: ") or type(exc).__name__
    password = urlsplit(config.conninfo).password
    if password:
        for form in {password, unquote(password)}:
            said = said.replace(form, "***")
    return said

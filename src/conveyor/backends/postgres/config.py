"""The PostgreSQL URL: libpq connection string plus Conveyor's own options.

`postgresql://user:password@host:5432/db?schema=conveyor&pool_size=10&timeout=5`

* `schema`: the PostgreSQL schema that holds Conveyor's tables (default
  `conveyor`), so jobs live apart from the application's own tables.
* `pool_size`: most connections one backend (one process, one event loop) opens.
* `timeout`: seconds to wait for a connection before BackendUnavailable.

libpq's TLS and connection options (`sslmode`, `connect_timeout`, ...) pass
through; anything else is a ConfigurationError, so a typo is never ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from conveyor.backends import redact_url
from conveyor.model.errors import ConfigurationError

_LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "connect_timeout",
        "application_name",
        "target_session_attrs",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
    }
)
_CONVEYOR_OPTIONS = frozenset({"schema", "pool_size", "timeout"})
# Lower case, so the name needs no quoting anywhere (psql, pg_dump, LISTEN channels).
_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,47}$")


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    conninfo: str  # the URL without Conveyor's options, for libpq
    schema: str
    pool_size: int
    timeout: float
    redacted: str  # for logs and errors: never the password

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema's wake-ups."""
        return f"{self.schema}_conveyor_jobs"

    @property
    def done_channel(self) -> str:
        """The channel of job ends, for those waiting on them (job.result())."""
        return f"{self.schema}_conveyor_done"


def _libpq_netloc(netloc: str) -> str:
    """The user info percent-encoded. Python splits user info from hosts at the last
    '@', libpq at the first: a password written with an '@' in it became part of a
    host name for libpq (and its tail appeared in connection errors and logs)."""
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return netloc
    user, colon, password = userinfo.partition(":")
    encoded = quote(unquote(user), safe="")
    if colon:
        encoded += ":" + quote(unquote(password), safe="")
    return f"{encoded}@{hosts}"


def parse_postgres_url(url: str) -> PostgresConfig:
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigurationError(f"not a PostgreSQL URL: {redact_url(url)!r}")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = set(options) - _CONVEYOR_OPTIONS - _LIBPQ_OPTIONS
    if unknown:
        raise ConfigurationError(
            f"unknown PostgreSQL URL option(s) {sorted(unknown)} in {redact_url(url)!r}; "
            f"Conveyor's are {sorted(_CONVEYOR_OPTIONS)}, libpq's {sorted(_LIBPQ_OPTIONS)}"
        )
    schema = options.pop("schema", "conveyor")
    if not _SCHEMA_NAME.match(schema):
        raise ConfigurationError(
            f"schema={schema!r}: use lower-case letters, digits and _ (at most 48 characters)"
        )
    try:
        pool_size = int(options.pop("pool_size", "10"))
        timeout = float(options.pop("timeout", "5"))
    except ValueError as exc:
        raise ConfigurationError(f"bad number in {redact_url(url)!r}: {exc}") from None
    if pool_size < 2:
        raise ConfigurationError("pool_size must be at least 2 (claims and outcome writes overlap)")
    if timeout <= 0:
        raise ConfigurationError("timeout must be positive")
    conninfo = parts._replace(
        scheme="postgresql", netloc=_libpq_netloc(parts.netloc), query=urlencode(options)
    ).geturl()
    return PostgresConfig(conninfo, schema, pool_size, timeout, redact_url(url))

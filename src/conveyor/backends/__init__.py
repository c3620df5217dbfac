"""Backends by URL scheme. Each is imported only when its scheme is used, so the
SQLite default needs neither psycopg nor redis installed."""

from __future__ import annotations

import importlib
from urllib.parse import urlsplit

from conveyor.backends.contract import Backend
from conveyor.model.clock import Clock, system_clock
from conveyor.model.errors import ConfigurationError

# scheme -> (module, class, pip extra that provides its driver)
_SCHEMES: dict[str, tuple[str, str, str | None]] = {
    "sqlite": ("conveyor.backends.sqlite.backend", "SqliteBackend", None),
    "postgresql": ("conveyor.backends.postgres.backend", "PostgresBackend", "postgres"),
    "postgres": ("conveyor.backends.postgres.backend", "PostgresBackend", "postgres"),
    "redis": ("conveyor.backends.redis.backend", "RedisBackend", "redis"),
    "rediss": ("conveyor.backends.redis.backend", "RedisBackend", "redis"),
    "memory": ("conveyor.backends.memory.backend", "MemoryBackend", None),
}
# Schemes whose store lives inside the process that made it (tests): no worker or
# command in another process can reach it.
IN_PROCESS_SCHEMES = frozenset({"memory"})
IN_PROCESS_ONLY = (
    "a memory:// backend lives inside one process: workers, the scheduler and "
    "the command line in another process cannot see its jobs; use "
    "sqlite:///jobs.db, postgresql:// or redis:// to share jobs between processes"
)


def in_process_only(url: str) -> bool:
    """True for a URL no other process can reach (memory://)."""
    return urlsplit(url).scheme.lower() in IN_PROCESS_SCHEMES


def redact_url(url: str) -> str:
    """The URL without its password, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _check_ports(url: str) -> None:
    """Each host's port is a number from 1 to 65535 (a PostgreSQL URL may list
    several hosts, `h1:5432,h2:5433`), so a typo is a bad URL here rather than a
    driver error at the first connection."""
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    for host in hosts.split(","):
        after_name = host.partition("]")[2] if host.startswith("[") else host  # [IPv6]:port
        _, colon, port = after_name.partition(":")
        if colon and port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigurationError(
                f"malformed backend URL {redact_url(url)!r}: port {port!r} of host {host!r} "
                "is not a number from 1 to 65535"
            )


def backend_from_url(url: str, clock: Clock = system_clock) -> Backend:
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(
            f"malformed backend URL {url!r}: expected e.g. sqlite:///jobs.db, "
            "postgresql://user@host/db, redis://host:6379/0 or memory:// (tests, one process)"
        )
    scheme = urlsplit(url).scheme.lower()
    if scheme not in _SCHEMES:
        raise ConfigurationError(
            f"unknown backend scheme {scheme!r} in {redact_url(url)!r}; "
            f"known: {', '.join(sorted(_SCHEMES))}"
        )
    _check_ports(url)
    module_name, class_name, extra = _SCHEMES[scheme]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra is None or (exc.name or "").startswith("conveyor"):
            raise
        raise ConfigurationError(
            f"the {scheme} backend needs its driver: pip install 'conveyor[{extra}]' ({exc})"
        ) from exc
    backend: Backend = getattr(module, class_name)(url, clock=clock)
    return backend

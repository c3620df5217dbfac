"""Every backend the conformance suite runs against, by name.

Each entry makes a URL for one isolated test: a temp SQLite file, a fresh
PostgreSQL schema, a random Redis key prefix. A backend joins the suite by
adding one entry here; the suite itself never changes per backend.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

IsolatedUrl = Callable[[Path], Awaitable[str]]


async def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'jobs.db'}"


BACKENDS: dict[str, IsolatedUrl] = {
    "sqlite": sqlite_url,
}

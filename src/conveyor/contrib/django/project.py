"""The Conveyor app of a Django project: enqueues follow Django's transactions."""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.db import close_old_connections, connections, transaction

from conveyor.app import Conveyor
from conveyor.handle import JobHandle, handles
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import Job, JobState, NewJob
from conveyor.task import Task

_KNOWN = {"url", "default_queue", "database", "on_commit", "transactional", "autodiscover"}


@dataclass(frozen=True, slots=True)
class Settings:
    url: str
    default_queue: str = "default"
    database: str = "default"
    on_commit: bool = True
    transactional: bool = False
    autodiscover: bool = True

    @classmethod
    def load(cls) -> Settings:
        given: dict[str, Any] = dict(getattr(django_settings, "CONVEYOR", {}) or {})
        unknown = set(given) - _KNOWN
        if unknown:
            raise ConfigurationError(
                f"unknown CONVEYOR setting(s) {sorted(unknown)}; known: {', '.join(sorted(_KNOWN))}"
            )
        url = given.pop("url", None) or os.environ.get("CONVEYOR_URL")
        if not url:
            raise ConfigurationError(
                'no backend URL: set CONVEYOR = {"url": ...} in the '
                "Django settings, or $CONVEYOR_URL"
            )
        return cls(url=url, **given)


class DjangoConveyor(Conveyor):
    """A Conveyor app whose sync enqueues follow the Django database's transaction:
    inside `atomic()` they wait for the commit (never stored on rollback), or with
    `transactional` (PostgreSQL) they go in that same transaction."""

    def __init__(self, settings: Settings, **options: Any) -> None:
        super().__init__(settings.url, default_queue=settings.default_queue, **options)
        self.settings = settings
        if settings.transactional and not self.url.startswith(("postgresql:", "postgres:")):
            raise ConfigurationError(
                'CONVEYOR["transactional"] needs the PostgreSQL backend '
                "(the jobs go in Django's own transaction)"
            )

    @classmethod
    def from_settings(cls) -> DjangoConveyor:
        return cls(Settings.load())

    def _register(self, fn: Callable[..., Any], **options: Any) -> Task[Any, Any]:
        # Sync tasks run in the worker's threads, which keep their Django connections
        # from one job to the next: retire them as a request would (CONN_MAX_AGE, a
        # connection the server dropped), before and after each job.
        if not inspect.iscoroutinefunction(fn) and not isinstance(fn, Task):
            fn = _with_fresh_connections(fn)
        return super()._register(fn, **options)

    def enqueue_many(
        self, jobs: Iterable[NewJob], *, connection: Any = None
    ) -> list[JobHandle[Any]]:
        batch = list(jobs)
        if connection is not None or not batch:
            return super().enqueue_many(batch, connection=connection)
        database = connections[self.settings.database]
        if self.settings.transactional:
            return super().enqueue_many(batch, connection=_psycopg_connection(database))
        if self.settings.on_commit and database.in_atomic_block:
            transaction.on_commit(
                lambda: super(DjangoConveyor, self).enqueue_many(batch),
                using=self.settings.database,
            )
            return handles(self, [_as_stored(job, self.clock()) for job in batch])
        return super().enqueue_many(batch)


def _with_fresh_connections(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            close_old_connections()

    return run


def _psycopg_connection(database: Any) -> Any:
    if database.vendor != "postgresql":
        raise ConfigurationError(
            f'CONVEYOR["transactional"] needs a PostgreSQL Django database; '
            f"{database.alias!r} is {database.vendor}"
        )
    database.ensure_connection()
    raw = database.connection
    import psycopg

    if not isinstance(raw, psycopg.Connection):
        raise ConfigurationError(
            'CONVEYOR["transactional"] needs Django on psycopg 3 (pip install psycopg); '
            f"this connection is {type(raw).__module__}.{type(raw).__name__}"
        )
    return raw


def _as_stored(job: NewJob, now: float) -> Job:
    """What the job will be once the transaction commits: its id is final. (A job
    that deduplicates against an existing one is that one, known only then.)"""
    due = job.run_at is None or job.run_at <= now
    return Job(
        id=job.id,
        task=job.task,
        queue=job.queue,
        payload=job.payload,
        state=JobState.AVAILABLE if due else JobState.SCHEDULED,
        priority=job.priority,
        max_attempts=job.max_attempts,
        run_at=now if job.run_at is None else job.run_at,
        created_at=now,
        unique_key=job.unique_key,
        unique_for=job.unique_for,
        timeout=job.timeout,
        meta=dict(job.meta),
    )

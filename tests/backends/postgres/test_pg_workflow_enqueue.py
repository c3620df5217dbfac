"""A workflow's enqueue on PostgreSQL costs a fixed number of statements, whatever its
size (docs/workflows.md): the parents' lock, the plain members' batch insert, one
insert of every dependant. Counted at the driver: every statement psycopg sends goes
through a cursor's execute."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from conveyor.backends.postgres.backend import PostgresBackend
from conveyor.model.job import JobState, NewJob

PAYLOAD = '{"args":[],"kwargs":{}}'


def chord_jobs(tag: str, width: int) -> list[NewJob]:
    """`width` members, a callback on all of them, then a chain of three after it."""
    members = [NewJob(id=f"{tag}-m{i}", task="t", queue="q", payload=PAYLOAD) for i in range(width)]
    callback = NewJob(
        id=f"{tag}-cb",
        task="t",
        queue="q",
        payload=PAYLOAD,
        depends_on=tuple(m.id for m in members),
    )
    chain = [
        NewJob(
            id=f"{tag}-c{i}",
            task="t",
            queue="q",
            payload=PAYLOAD,
            depends_on=(f"{tag}-cb" if i == 0 else f"{tag}-c{i - 1}",),
        )
        for i in range(3)
    ]
    return [*members, callback, *chain]


async def test_statements_per_workflow_enqueue_do_not_grow_with_its_size(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = PostgresBackend(pg_url)
    sent: list[str] = []
    real = psycopg.AsyncCursor.execute

    async def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(str(query)[:60])
        return await real(self, query, *args, **kwargs)

    try:
        await backend.migrate()
        await backend.enqueue_jobs([NewJob(id="warm", task="t", queue="q", payload=PAYLOAD)])
        monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted)
        counts = []
        for tag, width in (("small", 2), ("wide", 300)):
            sent.clear()
            stored = await backend.enqueue_jobs(chord_jobs(tag, width))
            counts.append(len(sent))
            assert [j.state for j in stored[-4:]] == [JobState.BLOCKED] * 4
        assert counts[0] == counts[1] <= 3, (counts, sent)
        monkeypatch.undo()
        assert await backend.dependants_of("wide-m7") == ["wide-cb"]
        assert await backend.dependants_of("wide-cb") == ["wide-c0"]
        assert await backend.dependants_of("wide-c1") == ["wide-c2"]
        cb = await backend.get_job("wide-cb")
        assert cb is not None and cb.state is JobState.BLOCKED
    finally:
        monkeypatch.undo()
        await backend.close()

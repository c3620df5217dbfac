"""Listing for dashboards: search in arguments, keyset pagination."""

from __future__ import annotations

import pytest
from helpers import claim_one, error, new_job

from conveyor.backends.contract import Backend
from conveyor.backends.params import BulkAction, JobFilter, JobPage, Settlement
from conveyor.model.errors import JobNotFound
from conveyor.model.job import JobState


def payload(*args: object, **kwargs: object) -> str:
    import json

    return json.dumps({"args": list(args), "kwargs": kwargs}, separators=(",", ":"))


async def test_args_contains_matches_a_substring_of_the_arguments_json(backend: Backend) -> None:
    await backend.enqueue_jobs(
        [
            new_job(id="a", payload=payload(42, email="alice@example.org")),
            new_job(id="b", payload=payload(7, email="bob@example.org")),
            new_job(id="c", payload=payload(420, note="Alice")),
            new_job(id="d", task="other.task", payload=payload(42)),
        ]
    )
    assert await backend.count_jobs(JobFilter(args_contains="alice@")) == 1
    listed = await backend.list_jobs(JobPage(where=JobFilter(args_contains="42"), limit=10))
    assert sorted(j.id for j in listed) == ["a", "c", "d"]
    # Case-sensitive, and combined with the other fields.
    assert [
        j.id for j in await backend.list_jobs(JobPage(where=JobFilter(args_contains="Alice")))
    ] == ["c"]
    both = JobFilter(args_contains="42", tasks=("tests.noop",))
    assert await backend.count_jobs(both) == 2
    assert await backend.count_jobs(JobFilter(args_contains="nobody")) == 0
    # The JSON text as the producer wrote it: compact separators.
    assert await backend.count_jobs(JobFilter(args_contains='"email":"bob@example.org"')) == 1


async def test_args_contains_narrows_redrive_and_delete(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id=f"k{i}", payload=payload(i)) for i in range(3)])
    for _ in range(3):
        job = await claim_one(backend)
        await backend.settle_jobs(
            [
                Settlement(
                    job.id, job.lease_token, JobState.DEAD, error=error(job.attempt, "KeyError")
                )
            ]
        )
    dead_one = JobFilter(states=(JobState.DEAD,), args_contains="[1]")
    assert [
        j.id for j in await backend.redrive_jobs(BulkAction(where=dead_one, limit=10, dry_run=True))
    ] == ["k1"]
    assert await backend.delete_jobs(
        BulkAction(where=JobFilter(args_contains="[2]"), limit=10, dry_run=False)
    ) == ["k2"]
    assert await backend.count_jobs(JobFilter(states=(JobState.DEAD,))) == 2


async def test_cursor_pages_walk_newest_first_without_gaps_or_repeats(backend: Backend) -> None:
    ids = [f"p{i:02d}" for i in range(23)]
    for job_id in ids:  # one by one: insertion order is the listing order
        await backend.enqueue_jobs(
            [new_job(id=job_id, queue="even" if int(job_id[1:]) % 2 == 0 else "odd")]
        )
    seen: list[str] = []
    page = await backend.list_jobs(JobPage(where=JobFilter(), limit=5))
    while page:
        seen.extend(j.id for j in page)
        page = await backend.list_jobs(JobPage(where=JobFilter(), limit=5, after=page[-1].id))
    assert seen == list(reversed(ids))

    # The cursor combines with a filter: the page after p14 within queue "even".
    evens = await backend.list_jobs(
        JobPage(where=JobFilter(queues=("even",)), limit=3, after="p14")
    )
    assert [j.id for j in evens] == ["p12", "p10", "p08"]
    # A cursor taken from another filter's listing still says where to start.
    assert [
        j.id
        for j in await backend.list_jobs(
            JobPage(where=JobFilter(queues=("even",)), limit=2, after="p13")
        )
    ] == [
        "p12",
        "p10",
    ]
    assert await backend.list_jobs(JobPage(where=JobFilter(), limit=5, after="p00")) == []


async def test_cursor_of_a_vanished_job_raises_job_not_found(backend: Backend) -> None:
    await backend.enqueue_jobs([new_job(id="only")])
    with pytest.raises(JobNotFound):
        await backend.list_jobs(JobPage(where=JobFilter(), limit=5, after="never-was"))

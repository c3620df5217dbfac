"""Redis's flow_loads counts keys a page at a time (key_loads.lua): the pages add up to
what one read of the whole index would count."""

from __future__ import annotations

import pytest

from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import FlowQuery, JobPage, KeyLoad
from conveyor.backends.redis import flow, inspector
from conveyor.backends.redis.backend import RedisBackend
from conveyor.model.job import NewJob


async def test_pages_of_two_jobs_count_what_one_page_counts(
    backend: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    await backend.enqueue_jobs(
        [
            NewJob(
                task="t",
                queue="default",
                payload='{"args":[],"kwargs":{}}',
                id=f"j{i}",
                concurrency_key=f"user:{i % 3}",
                concurrency_limit=1,
            )
            for i in range(11)
        ]
    )
    assert len(await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30.0))) == 3
    whole = await backend.flow_loads(FlowQuery(queue="default"))
    monkeypatch.setattr(flow, "_KEY_PAGE", 2)
    assert await backend.flow_loads(FlowQuery(queue="default")) == whole
    assert whole.by_held == (
        KeyLoad("user:0", 1, 3),
        KeyLoad("user:1", 1, 3),
        KeyLoad("user:2", 1, 2),
    )
    assert (whole.running, whole.held, whole.keys) == (3, 8, 3)


async def test_a_count_by_error_type_is_counted_on_the_server_page_by_page(
    backend: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.backends.params import JobFilter
    from conveyor.model.job import JobState, QueueBound

    bound = QueueBound(2, shed_oldest=True)
    for i in range(7):  # each past the second sheds the oldest waiting job
        await backend.enqueue_jobs(
            [
                NewJob(
                    task="t",
                    queue="mail",
                    id=f"m{i}",
                    bound=bound,
                    payload='{"args":[],"kwargs":{}}',
                )
            ]
        )
    shed = JobFilter(states=(JobState.CANCELLED,), queues=("mail",), error_type="queuefull")
    listed = len(await backend.list_jobs(JobPage(where=shed, limit=100)))
    monkeypatch.setattr(inspector, "_ERROR_PAGE", 2)
    assert await backend.count_jobs(shed) == listed == 5
    other = JobFilter(states=(JobState.CANCELLED,), queues=("mail",), error_type="KeyError")
    assert await backend.count_jobs(other) == 0

"""Corrupt job hashes on Redis: no script stops half-way, and no job ends outside
every index.

Redis does not roll back a Lua script that raises: the writes before the error
stay. A script that took a job out of one index and then failed on a field (a
`tonumber` of text, a rank built from a bad run_at) left the job in no index at
all, where nothing would ever claim, list or rescue it. Each test here writes one
bad field with a raw HSET and runs the script that used to fail on it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import BulkAction, JobFilter, JobPage, Settlement
from conveyor.backends.redis.backend import RedisBackend
from conveyor.backends.redis.config import parse_redis_url
from conveyor.model.clock import ManualClock
from conveyor.model.job import JobState, NewJob
from conveyor.worker.rescue import rescue_expired


def job(name: str, **fields: object) -> NewJob:
    return NewJob(id=name, task="t", queue="default", payload='{"args":[],"kwargs":{}}', **fields)  # type: ignore[arg-type]


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A client that writes and reads bytes, as another program would."""
    client = aioredis.Redis.from_url(parse_redis_url(redis_url)[0])
    yield client
    await client.aclose()


async def indexes_of(backend: RedisBackend, job_id: str) -> list[str]:
    """The state indexes (of any queue) that hold `job_id`."""
    found = []
    for queue in sorted(await backend.client.smembers(backend.keys.queues) | {""}):
        for state in JobState:
            members = await backend.client.zrange(backend.keys.state(queue, state), 0, -1)
            if state is JobState.AVAILABLE:
                members = [m[29:] for m in members]
            if job_id in members:
                found.append(f"{queue}:{state.value}")
    return found


async def test_staging_a_due_job_with_a_corrupt_seq_and_priority(
    backend: RedisBackend, raw: aioredis.Redis, clock: ManualClock
) -> None:
    await backend.enqueue_jobs(
        [job("later", run_at=clock.now + 5), job("fine", run_at=clock.now + 5)]
    )
    await raw.hset(backend.keys.job("later"), mapping={"seq": "x", "priority": b"\xff"})
    clock.advance(10)
    await backend.fetch_jobs(strict_claim(["elsewhere"], 1, "w", 30))  # stages every queue
    assert await indexes_of(backend, "later") == ["default:available"]
    claimed = await backend.fetch_jobs(strict_claim(["default"], 5, "w", 30))
    assert {j.id for j in claimed} == {"later", "fine"}
    [later] = [j for j in claimed if j.id == "later"]
    assert later.corrupt == "priority: not a whole number ('\\udcff')"
    assert await indexes_of(backend, "later") == ["default:running"]


async def test_a_far_future_run_at_cannot_shift_the_id_out_of_its_rank(
    backend: RedisBackend, raw: aioredis.Redis, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job("soon", run_at=clock.now + 5)])
    await raw.hset(backend.keys.job("soon"), "run_at", "1e300")
    await raw.zadd(backend.keys.due, {"soon": clock.now + 5})  # due by its index
    clock.advance(10)
    [claimed] = await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30))
    assert claimed.id == "soon" and claimed.run_at == 1e300


@pytest.mark.parametrize("field", ["state", "queue"])
async def test_a_claim_takes_what_its_index_holds_whatever_the_state_or_queue_field_says(
    backend: RedisBackend, raw: aioredis.Redis, field: str
) -> None:
    await backend.enqueue_jobs([job("a"), job("b"), job("c")])
    await raw.hset(backend.keys.job("b"), field, b"zom\xffbie")
    claimed = await backend.fetch_jobs(strict_claim(["default"], 5, "w", 30))
    assert [j.id for j in claimed] == ["a", "b", "c"]
    assert [j.corrupt for j in claimed] == [None, None, None]  # the claim rewrote the field
    for job_id in "abc":
        assert await indexes_of(backend, job_id) == ["default:running"]


async def test_a_claim_takes_a_job_whose_state_field_is_gone(
    backend: RedisBackend, raw: aioredis.Redis
) -> None:
    await backend.enqueue_jobs([job("a"), job("b")])
    await raw.hdel(backend.keys.job("a"), "state")
    claimed = await backend.fetch_jobs(strict_claim(["default"], 5, "w", 30))
    assert [j.id for j in claimed] == ["a", "b"] and claimed[0].state is JobState.RUNNING


async def test_a_claim_with_a_corrupt_counter_loses_none_of_its_batch(
    backend: RedisBackend, raw: aioredis.Redis
) -> None:
    await backend.enqueue_jobs([job(n) for n in "abcd"])
    await raw.hset(backend.keys.job("b"), mapping={"attempt": "x", "lease_token": "1.5"})
    claimed = await backend.fetch_jobs(strict_claim(["default"], 5, "w", 30))
    assert [(j.id, j.attempt, j.lease_token) for j in claimed] == [
        ("a", 1, 1),
        ("b", 1, 1),
        ("c", 1, 1),
        ("d", 1, 1),
    ]
    for job_id in "abcd":
        assert await indexes_of(backend, job_id) == ["default:running"]


async def test_a_value_that_is_not_utf8_never_fails_a_whole_reply(
    backend: RedisBackend, raw: aioredis.Redis
) -> None:
    await backend.enqueue_jobs([job("a"), job("b"), job("c")])
    await raw.hset(backend.keys.job("b"), mapping={"unique_key": b"k\xfe", "junk": b"\xff\x00"})
    claimed = await backend.fetch_jobs(strict_claim(["default"], 5, "w", 30))
    assert [j.id for j in claimed] == ["a", "b", "c"]
    assert [j.corrupt for j in claimed] == [None, "unique_key: not valid UTF-8 ('k\\udcfe')", None]
    listed = await backend.list_jobs(JobPage(where=JobFilter(), limit=10))
    assert sorted(j.id for j in listed) == ["a", "b", "c"]
    stored = await backend.get_job("b")
    assert stored is not None and stored.unique_key == "k\ufffd"  # shown, never raw


async def test_redrive_of_a_dead_job_with_a_corrupt_seq_and_priority(
    backend: RedisBackend, raw: aioredis.Redis
) -> None:
    await backend.enqueue_jobs([job("a")])
    [a] = await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30))
    await backend.settle_jobs([Settlement("a", a.lease_token, JobState.DEAD)])
    await raw.hset(backend.keys.job("a"), mapping={"seq": b"\xff", "priority": "top"})
    [redriven] = await backend.redrive_jobs(
        BulkAction(where=JobFilter(ids=("a",)), limit=10, dry_run=False)
    )
    assert redriven.state is JobState.AVAILABLE
    assert await indexes_of(backend, "a") == ["default:available"]
    [again] = await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30))
    assert again.id == "a" and again.corrupt is not None and again.corrupt.startswith("priority")


async def test_rescue_back_to_available_with_a_corrupt_rank_source(
    backend: RedisBackend, raw: aioredis.Redis, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job("a", max_attempts=3), job("b", max_attempts=3)])
    await backend.fetch_jobs(strict_claim(["default"], 2, "w", 10))
    await raw.hset(backend.keys.job("a"), mapping={"seq": "?", "priority": "?", "run_at": "?"})
    clock.advance(11)
    assert sorted(await rescue_expired(backend, clock.now)) == ["a", "b"]
    for job_id in "ab":
        assert await indexes_of(backend, job_id) == ["default:available"]


async def test_release_of_a_job_whose_run_at_and_attempt_are_gone(
    backend: RedisBackend, raw: aioredis.Redis
) -> None:
    await backend.enqueue_jobs([job("a"), job("b")])
    claimed = await backend.fetch_jobs(strict_claim(["default"], 2, "w", 30))
    await raw.hdel(backend.keys.job("a"), "run_at")
    await raw.hset(backend.keys.job("a"), "attempt", "lots")
    # A cold stop gives both back without using their attempts (release.lua).
    stale = await backend.settle_jobs(
        [Settlement(j.id, j.lease_token, JobState.AVAILABLE, refund_attempt=True) for j in claimed]
    )
    assert stale == []
    for job_id in "ab":
        assert await indexes_of(backend, job_id) == ["default:available"]
    a = await backend.get_job("a")
    assert a is not None and a.attempt == 0 and a.run_at == 0.0


async def test_an_index_entry_that_disagrees_with_a_known_state_moves_the_job(
    backend: RedisBackend, raw: aioredis.Redis, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job("a"), job("b"), job("c", run_at=clock.now + 5)])
    await raw.hset(backend.keys.job("a"), "state", "running")  # still in the available index
    await raw.hset(backend.keys.job("c"), "state", "available")  # still in the due index
    clock.advance(10)
    claimed = await backend.fetch_jobs(strict_claim(["default"], 5, "w", 30))
    # The state field wins when it names a state: a goes where running jobs are (and
    # a rescuer finds it), c where available ones are (and is claimed, after b).
    assert [j.id for j in claimed] == ["b", "c"]
    assert await indexes_of(backend, "a") == ["default:running"]
    assert await indexes_of(backend, "c") == ["default:running"]
    clock.advance(31)
    assert sorted(await rescue_expired(backend, clock.now)) == ["a", "b", "c"]

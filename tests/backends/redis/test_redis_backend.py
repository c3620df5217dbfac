"""Redis-specific behaviour beyond the shared conformance suite: URL options,
isolation by prefix, the key layout's invariants, retention by count, wake-ups,
stale tokens and outages."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from redis.crc import key_slot
from redis_helpers import RedisServer, free_port
from sockets import tcp_ports_of

from conveyor import Conveyor
from conveyor.backends import backend_from_url
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import (
    BulkAction,
    CheckpointWrite,
    Heartbeat,
    JobFilter,
    JobPage,
    JobWait,
    Lease,
    Retention,
    Settlement,
)
from conveyor.backends.redis.backend import RedisBackend
from conveyor.backends.redis.keys import id_from_rank
from conveyor.model.clock import ManualClock
from conveyor.model.errors import BackendUnavailable, ConfigurationError
from conveyor.model.job import JobState, NewJob


def job(n: int, queue: str = "default", **fields: object) -> NewJob:
    return NewJob(id=f"job-{n}", task="t", queue=queue, payload='{"args":[],"kwargs":{}}', **fields)  # type: ignore[arg-type]


def with_options(url: str, **options: object) -> str:
    return url + "".join(f"&{k}={v}" for k, v in options.items())


# --- URL ----------------------------------------------------------------------------
def test_unknown_url_option_is_a_configuration_error() -> None:
    with pytest.raises(
        ConfigurationError, match=r"unknown Redis URL option\(s\) \['sockettimeout'\]"
    ):
        backend_from_url("redis://localhost:6379/0?sockettimeout=3")


@pytest.mark.parametrize(
    "bad", ["prefix=", "prefix=a{b}", "prefix=a*", "max_completed=-1", "max_dead=many"]
)
def test_bad_option_values_are_refused(bad: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisBackend(f"redis://localhost:6379/0?{bad}")


def test_password_never_appears_in_errors() -> None:
    with pytest.raises(ConfigurationError) as info:
        RedisBackend("redis://:s3cret@localhost:6379/0?nope=1")
    assert "s3cret" not in str(info.value) and "***" in str(info.value)
    assert "s3cret" not in repr(RedisBackend("redis://:s3cret@localhost:6379/0"))


def test_rediss_scheme_maps_to_the_redis_backend() -> None:
    assert isinstance(backend_from_url("rediss://localhost:6380/0?prefix=x"), RedisBackend)


async def test_enqueue_during_an_outage_raises_backend_unavailable() -> None:
    url = f"redis://:pw-secret@127.0.0.1:{free_port()}/0?prefix=nobody"
    b = RedisBackend(url)
    await b.open()
    try:
        with pytest.raises(BackendUnavailable, match="unreachable") as info:
            await b.enqueue_jobs([job(1)])
        assert "pw-secret" not in str(info.value)
    finally:
        await b.close()


# --- isolation and layout ------------------------------------------------------------
async def test_prefixes_do_not_see_each_other(redis_url: str, clock: ManualClock) -> None:
    other_url = redis_url.replace("prefix=", "prefix=other-")
    a, b = RedisBackend(redis_url, clock=clock), RedisBackend(other_url, clock=clock)
    await a.open()
    await b.open()
    try:
        await a.enqueue_jobs([job(1)])
        assert await b.get_job("job-1") is None
        assert await b.fetch_jobs(strict_claim(["default"], 10, "w", 30)) == []
        assert await b.delete_all_keys() == 0  # nothing of b's; a's keys untouched
        assert await a.get_job("job-1") is not None
        assert await a.delete_all_keys() > 0
        assert await a.get_job("job-1") is None
    finally:
        await a.close()
        await b.close()


async def test_every_key_shares_the_prefix_hash_tag(backend: RedisBackend) -> None:
    await backend.enqueue_jobs([job(1, "a"), job(2, "b", run_at=backend.clock() + 60)])
    claimed = await backend.fetch_jobs(strict_claim(["a"], 1, "w", 30))
    await backend.settle_jobs(
        [Settlement(claimed[0].id, claimed[0].lease_token, JobState.COMPLETED)]
    )
    keys = [k async for k in backend.client.scan_iter(match=backend.keys.pattern())]
    assert keys and all(k.startswith("{" + backend.keys.prefix + "}:") for k in keys)
    assert len({key_slot(k.encode()) for k in keys}) == 1  # one Redis Cluster slot


async def test_a_job_is_in_exactly_one_state_index(
    backend: RedisBackend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job(i) for i in range(6)] + [job(9, run_at=clock() + 5)])
    claimed = await backend.fetch_jobs(strict_claim(["default"], 4, "w", 30))
    await backend.settle_jobs(
        [
            Settlement(claimed[0].id, claimed[0].lease_token, JobState.COMPLETED),
            Settlement(
                claimed[1].id, claimed[1].lease_token, JobState.RETRYABLE, run_at=clock() + 1
            ),
            Settlement(claimed[2].id, claimed[2].lease_token, JobState.DEAD),
            Settlement(
                claimed[3].id,
                claimed[3].lease_token,
                JobState.SCHEDULED,
                run_at=clock() + 9,
                refund_attempt=True,
            ),
        ]
    )
    await backend.cancel_job("job-4")
    for n in list(range(6)) + [9]:
        stored = await backend.get_job(f"job-{n}")
        assert stored is not None
        found = []
        for state in JobState:
            key = backend.keys.state("default", state)
            members = await backend.client.zrange(key, 0, -1)
            if state is JobState.AVAILABLE:
                members = [id_from_rank(m) for m in members]
            if stored.id in members:
                found.append(state)
        assert found == [stored.state], (stored.id, found)
    due = set(await backend.client.zrange(backend.keys.due, 0, -1))
    assert due == {"job-9", claimed[1].id, claimed[3].id}
    assert set(await backend.client.zrange(backend.keys.jobs, 0, -1)) == {
        f"job-{n}" for n in list(range(6)) + [9]
    }


# --- fencing -------------------------------------------------------------------------
async def test_stale_token_changes_nothing_and_is_reported(backend: RedisBackend) -> None:
    await backend.enqueue_jobs([job(1)])
    first = (await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30)))[0]
    before = await backend.client.hgetall(backend.keys.job("job-1"))
    stale = await backend.settle_jobs(
        [
            Settlement("job-1", first.lease_token + 1, JobState.COMPLETED, result="1"),
            Settlement("job-1", first.lease_token - 1, JobState.DEAD),
        ]
    )
    assert stale == ["job-1", "job-1"]
    assert await backend.client.hgetall(backend.keys.job("job-1")) == before
    reply = await backend.heartbeat_jobs(
        Heartbeat(leases=[Lease("job-1", first.lease_token + 5)], lease_seconds=30)
    )
    assert reply.lost == {"job-1"}
    assert not await backend.checkpoint_job(
        CheckpointWrite(lease=Lease("job-1", 0), checkpoint='{"x":1}', progress=None)
    )
    assert await backend.client.hgetall(backend.keys.job("job-1")) == before


# --- retention ---------------------------------------------------------------------
async def test_completed_and_dead_are_bounded_by_count(redis_url: str, clock: ManualClock) -> None:
    b = RedisBackend(with_options(redis_url, max_completed=3, max_dead=2), clock=clock)
    await b.open()
    try:
        await b.enqueue_jobs([job(i, unique_key=f"u{i}") for i in range(10)])
        for n in range(10):
            clock.advance(1)
            claimed = (await b.fetch_jobs(strict_claim(["default"], 1, "w", 30)))[0]
            state = JobState.COMPLETED if n < 6 else JobState.DEAD
            assert await b.settle_jobs([Settlement(claimed.id, claimed.lease_token, state)]) == []
        completed = await b.list_jobs(JobPage(where=JobFilter(states=(JobState.COMPLETED,))))
        dead = await b.list_jobs(JobPage(where=JobFilter(states=(JobState.DEAD,))))
        assert [j.id for j in completed] == ["job-5", "job-4", "job-3"]  # newest kept
        assert [j.id for j in dead] == ["job-9", "job-8"]
        assert await b.get_job("job-0") is None
        # The dropped jobs' unique keys are gone too: nothing points at a missing job.
        assert sorted(await b.client.hkeys(b.keys.unique)) == ["u3", "u4", "u5", "u8", "u9"]
        assert sorted(await b.client.zrange(b.keys.jobs, 0, -1)) == [
            "job-3",
            "job-4",
            "job-5",
            "job-8",
            "job-9",
        ]
    finally:
        await b.delete_all_keys()
        await b.close()


async def test_prune_by_age_keeps_jobs_inside_their_dedup_window(
    backend: RedisBackend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job(1), job(2, unique_key="k", unique_for=100.0), job(3)])
    for _ in range(3):
        c = (await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30)))[0]
        state = JobState.DEAD if c.id == "job-3" else JobState.COMPLETED
        await backend.settle_jobs([Settlement(c.id, c.lease_token, state)])
    clock.advance(50)
    assert (
        await backend.prune_jobs(Retention(completed_before=clock(), dead_before=clock() - 60)) == 1
    )
    assert await backend.get_job("job-1") is None
    assert await backend.get_job("job-2") is not None  # inside its unique_for window
    assert await backend.get_job("job-3") is not None  # dead retention is longer
    clock.advance(60)
    assert await backend.prune_jobs(Retention(completed_before=clock(), dead_before=clock())) == 2
    assert await backend.count_jobs(JobFilter()) == 0
    assert await backend.client.hlen(backend.keys.unique) == 0
    assert await backend.client.zcard(backend.keys.jobs) == 0


# --- wake-ups --------------------------------------------------------------------------
async def test_wait_for_jobs_returns_on_enqueue_not_on_timeout(backend: RedisBackend) -> None:
    waiter = asyncio.create_task(backend.wait_for_jobs(JobWait(queues=["default"], timeout=10.0)))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    started = time.monotonic()
    await backend.enqueue_jobs([job(1)])
    await asyncio.wait_for(waiter, 2.0)
    assert time.monotonic() - started < 0.5


async def test_a_claim_that_leaves_work_behind_wakes_the_next_worker(backend: RedisBackend) -> None:
    await backend.enqueue_jobs([job(i) for i in range(5)])
    await backend.client.delete(backend.keys.wake("default"))  # the enqueue's own token
    await backend.fetch_jobs(strict_claim(["default"], 2, "w1", 30))
    assert await backend.client.llen(backend.keys.wake("default")) == 1
    await backend.client.delete(backend.keys.wake("default"))
    await backend.fetch_jobs(strict_claim(["default"], 10, "w2", 30))  # takes the rest
    assert await backend.client.llen(backend.keys.wake("default")) == 0


async def test_wait_for_jobs_with_redis_down_behaves_like_a_poll() -> None:
    b = RedisBackend(f"redis://127.0.0.1:{free_port()}/0")
    await b.open()
    try:
        started = time.monotonic()
        await b.wait_for_jobs(JobWait(queues=["default"], timeout=0.2))
        assert 0.15 < time.monotonic() - started < 2.0
    finally:
        await b.close()


async def test_app_level_round_trip(redis_url: str) -> None:
    app = Conveyor(redis_url)
    try:

        @app.task(name="add")
        def add(a: int, b: int) -> int:
            return a + b

        handle = await add.enqueue_async(1, 2)
        assert (await app.admin.get(handle.id)).state is JobState.AVAILABLE  # type: ignore[union-attr]
    finally:
        await app.aclose()


async def test_text_survives_the_trip_through_lua_exactly(
    backend: RedisBackend, clock: ManualClock
) -> None:
    payload = '{"args":["é 😀 \\u0000 \\n \\"q\\" \\\\"],"kwargs":{}}'
    odd = NewJob(
        id="ïd 😀\x01",
        task="täsk",
        queue="qüeue",
        payload=payload,
        priority=-7,
        run_at=clock() + 0.123456789,
        unique_key="ü\x00k",
        unique_for=1.5e-7,
        timeout=3.25,
        meta={"emoji": "😀", "n": 1},
    )
    [made] = await backend.enqueue_jobs([odd])
    stored = await backend.get_job(odd.id)
    assert stored == made
    assert (stored.payload, stored.task, stored.queue, stored.unique_key) == (
        payload,
        "täsk",
        "qüeue",
        "ü\x00k",
    )
    assert (stored.run_at, stored.unique_for, stored.timeout) == (
        clock() + 0.123456789,
        1.5e-7,
        3.25,
    )
    assert stored.meta == {"emoji": "😀", "n": 1} and stored.priority == -7
    [again] = await backend.enqueue_jobs([odd])  # dedup by the same odd id
    assert again == made


async def test_a_redriven_job_holds_its_unique_key_again(
    backend: RedisBackend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job(1, unique_key="k", max_attempts=1)])
    first = (await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30)))[0]
    await backend.settle_jobs([Settlement(first.id, first.lease_token, JobState.DEAD)])
    # The key is free while job-1 is dead: job-2 takes it and completes.
    await backend.enqueue_jobs([job(2, unique_key="k")])
    second = (await backend.fetch_jobs(strict_claim(["default"], 1, "w", 30)))[0]
    await backend.settle_jobs([Settlement(second.id, second.lease_token, JobState.COMPLETED)])
    await backend.redrive_jobs(BulkAction(where=JobFilter(ids=("job-1",)), limit=10, dry_run=False))
    [dup] = await backend.enqueue_jobs([job(3, unique_key="k")])
    assert dup.id == "job-1" and dup.state is JobState.AVAILABLE


async def test_oldest_available_age_looks_at_every_priority(
    backend: RedisBackend, clock: ManualClock
) -> None:
    await backend.enqueue_jobs([job(1, priority=5)])
    clock.advance(10)
    await backend.enqueue_jobs([job(2, priority=-3, run_at=clock() - 30), job(3, priority=9)])
    clock.advance(1)
    [stats] = await backend.queue_stats()
    assert stats.oldest_available_age == 31.0  # job-2: lowest priority, earliest run_at


async def test_scripts_come_back_after_the_server_forgets_them(private_redis: RedisServer) -> None:
    # A restarted (or SCRIPT FLUSHed) server knows no scripts: single calls and
    # pipelined ones load them again by themselves. A private server, so that the
    # flush touches nobody else's scripts.
    clock = ManualClock()
    b = RedisBackend(private_redis.url + "?prefix=flush", clock=clock)
    await b.open()
    try:
        await b.client.script_flush()
        made = await b.enqueue_jobs([job(i) for i in range(1500)])  # two chunks: a pipeline
        assert len(made) == 1500
        await b.client.script_flush()
        claimed = await b.fetch_jobs(strict_claim(["default"], 2, "w", 30))
        await b.client.script_flush()
        assert (
            await b.settle_jobs(
                [  # complete + fail: two scripts in one pipeline
                    Settlement(claimed[0].id, claimed[0].lease_token, JobState.COMPLETED),
                    Settlement(claimed[1].id, claimed[1].lease_token, JobState.DEAD),
                ]
            )
            == []
        )
        assert await b.count_jobs(JobFilter(states=(JobState.COMPLETED, JobState.DEAD))) == 2
    finally:
        await b.close()


async def test_long_listings_walk_the_seq_index_in_the_same_order(backend: RedisBackend) -> None:
    await backend.enqueue_jobs([job(i, queue="a" if i % 3 else "b") for i in range(3000)])
    claimed = await backend.fetch_jobs(strict_claim(["a"], 700, "w", 30))
    await backend.settle_jobs(
        [Settlement(c.id, c.lease_token, JobState.COMPLETED) for c in claimed]
    )
    for where in (
        JobFilter(),
        JobFilter(queues=("a",)),
        JobFilter(tasks=("t",)),
        JobFilter(states=(JobState.AVAILABLE,), queues=("a", "b")),
    ):
        everything = await backend.inspector.select(where, oldest_finished_first=False)
        assert await backend.inspector.newest(where, 1234) == everything[:1234]
        page = await backend.list_jobs(JobPage(where=where, limit=25, offset=2000))
        assert [j.id for j in page] == everything[2000:2025]
    newest = await backend.list_jobs(JobPage(where=JobFilter(), limit=2))
    assert [j.id for j in newest] == ["job-2999", "job-2998"]
    assert await backend.client.zcard(backend.keys.jobs) == 3000


async def test_long_listings_start_a_cursor_page_below_the_cursor(backend: RedisBackend) -> None:
    await backend.enqueue_jobs([job(i, queue="a" if i % 3 else "b") for i in range(3300)])
    for where in (JobFilter(), JobFilter(queues=("a",)), JobFilter(args_contains="[")):
        everything = await backend.inspector.select(where, oldest_finished_first=False)
        assert len(everything) > 2000  # so list_jobs walks the seq index
        cursor = everything[1499]
        page = await backend.list_jobs(JobPage(where=where, limit=25, after=cursor))
        assert [j.id for j in page] == everything[1500:1525]
        seq = int(await backend.client.zscore(backend.keys.jobs, cursor))
        assert await backend.inspector.newest(where, 25, before_seq=seq) == everything[1500:1525]


async def test_wrong_credentials_are_a_configuration_error_not_an_outage(redis_url: str) -> None:
    # A user that does not exist: refused by any server. (A password alone is not: a
    # server without one lets redis-py 8 fall back to no AUTH.)
    url = redis_url.replace("redis://", "redis://conveyor-no-such-user:not-the-password@", 1)
    b = RedisBackend(url)
    await b.open()
    try:
        with pytest.raises(ConfigurationError, match="refused the credentials") as info:
            await b.enqueue_jobs([job(1)])
        assert "not-the-password" not in str(info.value)
    finally:
        await b.close()


async def test_a_task_cancelled_inside_a_command_is_cancelled(backend: RedisBackend) -> None:
    # redis-py 8 sends every command through asyncio.wait_for when a socket timeout is
    # set (its default is 5 s); on Python 3.11 that loses most cancels landing as the
    # send completes, so a cancelled task carried on and a worker could not stop.
    # Each try cancels a loop of commands at a different moment; every one must stop.
    await backend.enqueue_jobs([job(1)])
    finished = 0
    for n in range(60):

        async def commands() -> None:
            for _ in range(1000):
                await backend.get_job("job-1")

        task = asyncio.ensure_future(commands())
        for _ in range(n % 6):
            await asyncio.sleep(0)
        await asyncio.sleep(0.0005 * (n % 5))
        task.cancel()
        try:
            await task
            finished += 1
        except asyncio.CancelledError:
            pass
    assert finished == 0


# --- the enqueue lane (one held connection beside the pool) ---------------------------
async def test_enqueue_survives_the_server_closing_the_lane_connection(
    backend: RedisBackend,
) -> None:
    await backend.enqueue_jobs([job(1)])
    # Only this process's connections: the server is shared with other test workers.
    ports, own = tcp_ports_of([os.getpid()]), await backend.client.client_id()
    killed = 0
    for client in await backend.client.client_list():
        if int(str(client["addr"]).rpartition(":")[2]) in ports and int(client["id"]) != own:
            killed += int(await backend.client.client_kill_filter(_id=client["id"]))
    assert killed >= 1  # the lane's connection (and any idle pooled one)
    [made] = await backend.enqueue_jobs([job(2)])  # one retry on a fresh connection
    assert made.id == "job-2" and (await backend.get_job("job-2")) is not None


async def test_cancelled_enqueues_never_leave_a_reply_for_the_next_caller(
    backend: RedisBackend,
) -> None:
    # A caller cancelled between sending and reading must not leave its reply in the
    # lane's socket: the next caller would read it as its own. The cancelled ones
    # enqueue duplicates, so a stray reply (the existing job) differs from a fresh 0.
    await backend.enqueue_jobs([job(100 + n) for n in range(40)])
    for n in range(40):
        task = asyncio.ensure_future(backend.enqueue_jobs([job(100 + n)]))
        for _ in range(n % 4):
            await asyncio.sleep(0)  # cancel at different points of the call
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        [made] = await backend.enqueue_jobs([job(1000 + n)])
        assert made.id == f"job-{1000 + n}"
    assert await backend.count_jobs(JobFilter()) == 80


async def test_concurrent_enqueues_each_get_their_own_reply(backend: RedisBackend) -> None:
    # One caller holds the lane; the others go through the pool at the same time.
    made = await asyncio.gather(*(backend.enqueue_jobs([job(n)]) for n in range(200)))
    assert [m[0].id for m in made] == [f"job-{n}" for n in range(200)]
    assert await backend.count_jobs(JobFilter(states=(JobState.AVAILABLE,))) == 200


async def test_the_lane_packs_commands_without_hiredis_too(
    backend: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conveyor.backends.redis import enqueue_connections

    monkeypatch.setattr(enqueue_connections, "_hiredis_pack", None)  # hiredis is an optional extra
    [made] = await backend.enqueue_jobs([job(1, unique_key="")])  # an empty key is a key
    [again] = await backend.enqueue_jobs([job(2, unique_key="")])
    assert (made.id, again.id) == ("job-1", "job-1")


async def test_blocking_enqueue_from_threads_stores_each_job_once(backend: RedisBackend) -> None:
    # The sync facade's path: each thread its own connection, no event loop involved.
    def produce(t: int) -> list[str]:
        return [
            made.id for n in range(25) for made in backend.enqueue_jobs_blocking([job(t * 100 + n)])
        ]

    ids = await asyncio.gather(*(asyncio.to_thread(produce, t) for t in range(4)))
    assert sorted(i for chunk in ids for i in chunk) == sorted(
        f"job-{t * 100 + n}" for t in range(4) for n in range(25)
    )
    [again] = backend.enqueue_jobs_blocking([job(3)])  # a duplicate: the stored job back
    assert again.id == "job-3" and again.created_at == (await backend.get_job("job-3")).created_at  # type: ignore[union-attr]
    assert await backend.count_jobs(JobFilter()) == 100


async def test_blocking_and_lane_enqueues_reload_scripts_after_a_flush(
    flushable_backend: RedisBackend,
) -> None:
    await flushable_backend.enqueue_jobs([job(1)])
    flushable_backend.enqueue_jobs_blocking([job(2)])
    await flushable_backend.client.script_flush()  # as after a server restart
    [a] = await flushable_backend.enqueue_jobs([job(3)])
    await flushable_backend.client.script_flush()
    [b] = await asyncio.to_thread(flushable_backend.enqueue_jobs_blocking, [job(4)])
    assert (a.id, b.id) == ("job-3", "job-4")
    assert await flushable_backend.count_jobs(JobFilter()) == 4


def test_blocking_enqueue_during_an_outage_raises_backend_unavailable() -> None:
    url = f"redis://:pw-secret@127.0.0.1:{free_port()}/0?prefix=nobody"
    b = RedisBackend(url)
    asyncio.run(b.open())
    try:
        with pytest.raises(BackendUnavailable, match="unreachable") as info:
            b.enqueue_jobs_blocking([job(1)])
        assert "pw-secret" not in str(info.value)
    finally:
        asyncio.run(b.close())


async def test_a_batch_larger_than_one_script_call_is_one_write(backend: RedisBackend) -> None:
    made = await backend.enqueue_jobs([job(n) for n in range(2500)])
    assert [m.id for m in made] == [f"job-{n}" for n in range(2500)]
    made = backend.enqueue_jobs_blocking([job(n) for n in range(2400, 2600)])
    assert [m.id for m in made] == [f"job-{n}" for n in range(2400, 2600)]
    assert await backend.count_jobs(JobFilter()) == 2600


async def test_concurrent_enqueues_after_a_script_flush_each_get_their_own_reply(
    flushable_backend: RedisBackend,
) -> None:
    # Every caller meets NOSCRIPT, loads the script and sends again: the resend must
    # not take the lane while another caller holds it (replies would cross).
    await flushable_backend.enqueue_jobs([job(n, unique_key=f"k{n}") for n in range(50)])
    for round_ in range(5):
        await flushable_backend.client.script_flush()
        made = await asyncio.gather(
            *(flushable_backend.enqueue_jobs([job(1000 * (round_ + 1) + n)]) for n in range(50))
        )
        assert [m[0].id for m in made] == [f"job-{1000 * (round_ + 1) + n}" for n in range(50)]
    assert await flushable_backend.count_jobs(JobFilter()) == 50 + 250


async def test_the_lane_refuses_a_second_caller_instead_of_crossing_replies(
    backend: RedisBackend,
) -> None:
    lane = backend.connection.enqueue_connection
    assert lane is not None
    lane.busy = True  # as while another caller's round trip is in flight
    try:
        with pytest.raises(RuntimeError, match="in use"):
            await lane.call_many([("PING",)])
        [made] = await backend.enqueue_jobs([job(1)])  # the busy lane sends it to the pool
        assert made.id == "job-1"
    finally:
        lane.busy = False

"""Transactional enqueue on the caller's connection, and complete-in-transaction
fenced by the lease token."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import psycopg
import pytest

from conveyor import Conveyor, current_job
from conveyor.backends.claiming import strict_claim
from conveyor.context import JobContext
from conveyor.handle import JobHandle
from conveyor.model.clock import ManualClock
from conveyor.model.errors import ConfigurationError, StaleLease
from conveyor.model.job import JobState
from conveyor.worker import WorkerConfig
from conveyor.worker.rescue import rescue_expired


def business_table(admin_conn: psycopg.Connection, schema: str) -> str:
    table = f'"{schema}".orders'
    admin_conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, note text)")
    return table


# --- transactional enqueue -----------------------------------------------------------
async def test_enqueue_joins_async_transaction(
    pg_app: Conveyor, pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    orders = business_table(admin_conn, schema)

    @pg_app.task(name="ship")
    def ship(order_id: int) -> None: ...

    conn = await psycopg.AsyncConnection.connect(pg_url.split("?")[0])
    try:
        async with conn.transaction():
            await conn.execute(f"INSERT INTO {orders} VALUES (1, 'kept')")
            kept = await ship.options(connection=conn).enqueue_async(1)
        with pytest.raises(ZeroDivisionError):
            async with conn.transaction():
                await conn.execute(f"INSERT INTO {orders} VALUES (2, 'rolled back')")
                gone = await ship.options(connection=conn).enqueue_async(2)
                raise ZeroDivisionError  # a failure inside the transaction
    finally:
        await conn.close()
    backend = await pg_app.backend()
    assert (await backend.get_job(kept.id)).state is JobState.AVAILABLE  # type: ignore[union-attr]
    assert await backend.get_job(gone.id) is None
    assert admin_conn.execute(f"SELECT id FROM {orders}").fetchall() == [(1,)]


async def test_enqueue_is_invisible_until_commit(pg_app: Conveyor, pg_url: str) -> None:
    @pg_app.task(name="ship")
    def ship(order_id: int) -> None: ...

    backend = await pg_app.backend()
    conn = await psycopg.AsyncConnection.connect(pg_url.split("?")[0])
    try:
        handle = await ship.options(connection=conn).enqueue_async(1)  # opens a transaction
        assert await backend.get_job(handle.id) is None
        assert await backend.fetch_jobs(strict_claim(["default"], 10, "w", 30)) == []
        await conn.commit()
        assert [j.id for j in await backend.fetch_jobs(strict_claim(["default"], 10, "w", 30))] == [
            handle.id
        ]
    finally:
        await conn.close()


def test_enqueue_joins_sync_transaction(
    pg_url: str, schema: str, admin_conn: psycopg.Connection
) -> None:
    app = Conveyor(pg_url)
    app.portal.call(app.backend())  # migrated: the schema exists
    orders = business_table(admin_conn, schema)

    @app.task(name="ship")
    def ship(order_id: int) -> None: ...

    try:
        with psycopg.connect(pg_url.split("?")[0]) as conn:
            with conn.transaction():
                conn.execute(f"INSERT INTO {orders} VALUES (1, 'kept')")
                kept = ship.options(connection=conn).enqueue(1)
                batch = app.enqueue_many([ship.message(10), ship.message(11)], connection=conn)
            with pytest.raises(ZeroDivisionError), conn.transaction():
                conn.execute(f"INSERT INTO {orders} VALUES (2, 'rolled back')")
                gone = ship.options(connection=conn).enqueue(2)
                raise ZeroDivisionError  # a failure inside the transaction
        assert app.jobs.get(kept.id).state is JobState.AVAILABLE  # type: ignore[union-attr]
        assert all(app.jobs.get(h.id) is not None for h in batch)
        assert app.jobs.get(gone.id) is None
        assert admin_conn.execute(f"SELECT id FROM {orders}").fetchall() == [(1,)]
    finally:
        app.close()


def test_enqueue_on_a_connection_with_client_side_cursors(pg_url: str) -> None:
    # Django's psycopg connections make ClientCursors, which cannot return binary
    # results: the enqueue uses a cursor of its own.
    app = Conveyor(pg_url)

    @app.task(name="ship")
    def ship(order_id: int) -> None: ...

    async def on_async_connection() -> str:
        async with await psycopg.AsyncConnection.connect(
            pg_url.split("?")[0], cursor_factory=psycopg.AsyncClientCursor
        ) as conn:
            async with conn.transaction():
                return (await ship.options(connection=conn).enqueue_async(2)).id

    try:
        with psycopg.connect(pg_url.split("?")[0], cursor_factory=psycopg.ClientCursor) as conn:
            with conn.transaction():
                made = ship.options(connection=conn).enqueue(1)
        made_async = app.portal.call(on_async_connection())
        assert [app.jobs.get(i).args for i in (made.id, made_async)] == [[1], [2]]  # type: ignore[union-attr]
    finally:
        app.close()


async def test_enqueue_refuses_foreign_connections(pg_app: Conveyor) -> None:
    @pg_app.task(name="ship")
    def ship(order_id: int) -> None: ...

    with pytest.raises(ConfigurationError, match="psycopg Connection"):
        await ship.options(connection=object()).enqueue_async(1)


# --- complete in transaction ----------------------------------------------------------
async def _claimed_pay_job(app: Conveyor) -> tuple[str, JobContext]:
    """One job of a no-op task `pay`, claimed by worker w1 on a 10 s lease: its id, and
    the context its handler would run in."""

    @app.task(name="pay")
    def pay() -> None: ...

    handle = await pay.enqueue_async()
    backend = await app.backend()
    [job] = await backend.fetch_jobs(strict_claim(["default"], 1, "w1", 10.0))
    return handle.id, JobContext(job, backend, asyncio.get_running_loop(), "w1")


async def test_lease_lost_inside_transaction_rolls_back_business_write(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, clock = manual_app
    orders = business_table(admin_conn, schema)
    job_id, ctx = await _claimed_pay_job(app)
    backend = await app.backend()
    with pytest.raises(StaleLease, match="rolled back"):
        async with ctx.transaction(result="paid") as conn:
            await conn.execute(f"INSERT INTO {orders} VALUES (1, 'paid')")
            # The worker stalls past its lease: rescued, and claimed by another worker.
            clock.advance(11)
            assert await rescue_expired(backend, backend.clock()) == [job_id]
            [again] = await backend.fetch_jobs(strict_claim(["default"], 1, "w2", 10.0))
            assert again.lease_token == ctx.lease.token + 1
    assert ctx.lease_lost and not ctx.completed_in_transaction
    assert admin_conn.execute(f"SELECT count(*) FROM {orders}").fetchone() == (0,)
    job = await backend.get_job(job_id)
    assert job is not None and (job.state, job.worker_id, job.attempt) == (
        JobState.RUNNING,
        "w2",
        2,
    )


async def test_the_job_counts_as_completed_while_its_transaction_commits(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    # A heartbeat that crosses the commit finds the job completed, its lease gone; the
    # worker spares a handler whose job completed in its transaction. Flagged only after
    # the connection had gone back to its pool, a heartbeat answered in between stopped
    # the handler after its commit (seen in a full run: 19 of 20 counted). A deferred
    # constraint trigger raises a NOTICE during COMMIT: what the flag says then.
    app, _ = manual_app
    orders = business_table(admin_conn, schema)
    admin_conn.execute(f"""
        CREATE FUNCTION "{schema}".committing() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN RAISE NOTICE 'committing'; RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER committing AFTER INSERT ON {orders}
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "{schema}".committing();
    """)
    job_id, ctx = await _claimed_pay_job(app)
    at_commit: list[bool] = []
    async with ctx.transaction(result="paid") as conn:
        conn.add_notice_handler(lambda notice: at_commit.append(ctx.completed_in_transaction))
        await conn.execute(f"INSERT INTO {orders} VALUES (1, 'paid')")
        assert not ctx.completed_in_transaction  # not while the handler's block runs
    assert at_commit == [True]
    assert ctx.completed_in_transaction
    job = await (await app.backend()).get_job(job_id)
    assert job is not None and job.state is JobState.COMPLETED


async def test_lease_lost_before_transaction_writes_nothing(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, clock = manual_app
    orders = business_table(admin_conn, schema)
    _, ctx = await _claimed_pay_job(app)
    clock.advance(11)
    backend = await app.backend()
    await rescue_expired(backend, backend.clock())
    entered = False
    with pytest.raises(StaleLease, match="nothing written"):
        async with ctx.transaction():
            entered = True
    assert not entered
    assert admin_conn.execute(f"SELECT count(*) FROM {orders}").fetchone() == (0,)


async def test_error_inside_transaction_rolls_back_and_keeps_job_running(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, _ = manual_app
    orders = business_table(admin_conn, schema)
    job_id, ctx = await _claimed_pay_job(app)
    with pytest.raises(RuntimeError):
        async with ctx.transaction() as conn:
            await conn.execute(f"INSERT INTO {orders} VALUES (1, 'paid')")
            raise RuntimeError("card declined")
    assert not ctx.completed_in_transaction
    assert admin_conn.execute(f"SELECT count(*) FROM {orders}").fetchone() == (0,)
    assert (await (await app.backend()).get_job(job_id)).state is JobState.RUNNING  # type: ignore[union-attr]


async def test_worker_completes_jobs_in_handler_transactions(
    pg_app: Conveyor, schema: str, admin_conn: psycopg.Connection
) -> None:
    from pg_helpers import RunningWorker, wait_finished

    orders = business_table(admin_conn, schema)
    runs: Counter[str] = Counter()

    @pg_app.task(name="pay_async")
    async def pay_async(order_id: int) -> str:
        runs["async"] += 1
        async with current_job().transaction(result={"order": order_id}) as conn:
            await conn.execute(f"INSERT INTO {orders} VALUES (%s, 'async')", (order_id,))
        await asyncio.sleep(0.3)  # returning slowly: heartbeats must not cancel it
        return "ignored: the transaction stored the result"

    @pg_app.task(name="pay_sync")
    def pay_sync(order_id: int) -> None:
        runs["sync"] += 1
        with current_job().transaction_sync(result=order_id) as conn:
            conn.execute(f"INSERT INTO {orders} VALUES (%s, 'sync')", (order_id,))

    handles: list[JobHandle[Any]] = [await pay_async.enqueue_async(i) for i in range(10)]
    handles += [await pay_sync.enqueue_async(100 + i) for i in range(10)]
    config = WorkerConfig(
        concurrency=8, poll_interval=0.05, rescue_interval=0.1, lease=0.6, heartbeat_interval=0.1
    )
    async with RunningWorker(pg_app, config) as worker:
        jobs = await wait_finished(pg_app, [h.id for h in handles])
    assert runs == {"async": 10, "sync": 10}
    assert all(j.state is JobState.COMPLETED and j.attempt == 1 for j in jobs.values())
    assert [jobs[h.id].result_value for h in handles] == (
        [{"order": i} for i in range(10)] + [100 + i for i in range(10)]
    )
    assert admin_conn.execute(f"SELECT count(*) FROM {orders}").fetchone() == (20,)
    assert worker.counts == {"completed": 20}


async def test_sync_transaction_rolls_back_on_lease_loss(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, clock = manual_app
    orders = business_table(admin_conn, schema)
    job_id, ctx = await _claimed_pay_job(app)
    backend = await app.backend()
    loop = asyncio.get_running_loop()

    def lose_lease() -> None:  # what another host does while this one stalls
        clock.advance(11)
        asyncio.run_coroutine_threadsafe(rescue_expired(backend, backend.clock()), loop).result()
        asyncio.run_coroutine_threadsafe(
            backend.fetch_jobs(strict_claim(["default"], 1, "w2", 10.0)), loop
        ).result()

    def handler() -> None:  # runs in a thread, as sync handlers do
        with ctx.transaction_sync(result="paid") as conn:
            conn.execute(f"INSERT INTO {orders} VALUES (1, 'paid')")
            lose_lease()

    with pytest.raises(StaleLease, match="rolled back"):
        await asyncio.to_thread(handler)
    assert ctx.lease_lost and not ctx.completed_in_transaction
    assert admin_conn.execute(f"SELECT count(*) FROM {orders}").fetchone() == (0,)
    job = await backend.get_job(job_id)
    assert job is not None and (job.state, job.worker_id) == (JobState.RUNNING, "w2")


def test_sync_facade_enqueues_from_the_callers_thread(pg_url: str) -> None:
    """task.enqueue() without a connection takes the blocking path on the sync pool."""
    app = Conveyor(pg_url)

    @app.task(name="ship")
    def ship(order_id: int) -> None: ...

    try:
        first = ship.options(unique_key="order-1").enqueue(1)
        again = ship.options(unique_key="order-1").enqueue(1)
        plain = [ship.enqueue(i) for i in range(3)]
        assert again.id == first.id
        backend = app.portal.call(app.backend())
        # Ignored for mypy: the Postgres backend's own attributes
        state = backend._state  # type: ignore[attr-defined]
        assert state._sync_pool is not None  # the blocking path was taken
        jobs = [app.jobs.get(h.id) for h in [first, *plain]]
        assert [j.state for j in jobs if j] == [JobState.AVAILABLE] * 4
    finally:
        app.close()


async def test_a_result_stored_by_a_handler_transaction_keeps_its_result_ttl(
    pg_app: Conveyor, schema: str, admin_conn: psycopg.Connection
) -> None:
    from pg_helpers import RunningWorker, wait_finished

    orders = business_table(admin_conn, schema)

    @pg_app.task(name="pay_kept", result_ttl=600)
    async def pay_kept(order_id: int) -> None:
        async with current_job().transaction(result=order_id) as conn:
            await conn.execute(f"INSERT INTO {orders} VALUES (%s, 'kept')", (order_id,))

    @pg_app.task(name="pay_kept_sync", result_ttl=60)
    def pay_kept_sync(order_id: int) -> None:
        with current_job().transaction_sync(result=order_id) as conn:
            conn.execute(f"INSERT INTO {orders} VALUES (%s, 'kept')", (order_id,))

    handles: list[JobHandle[Any]] = [
        await pay_kept.enqueue_async(1),
        await pay_kept_sync.enqueue_async(2),
    ]
    async with RunningWorker(pg_app, WorkerConfig(concurrency=2, poll_interval=0.05)):
        jobs = await wait_finished(pg_app, [h.id for h in handles])
    kept, kept_sync = (jobs[h.id] for h in handles)
    assert kept.result_value == 1 and kept.finished_at is not None
    assert kept.result_expires_at == kept.finished_at + 600
    assert kept_sync.result_expires_at == kept_sync.finished_at + 60  # type: ignore[operator]

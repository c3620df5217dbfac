"""once() inside current_job().transaction(): the done-mark is written on the
transaction's connection, so it commits, or rolls back, with the business write and
the job's completion."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

from conveyor import Conveyor, Retry
from conveyor.backends.claiming import strict_claim
from conveyor.backends.params import RecordKey
from conveyor.context import JobContext
from conveyor.model.clock import ManualClock
from conveyor.model.errors import StaleLease
from conveyor.model.job import JobState
from conveyor.once import ONCE_NAMESPACE
from conveyor.worker.rescue import rescue_expired


def ledger_table(admin_conn: psycopg.Connection, schema: str) -> str:
    table = f'"{schema}".ledger'
    admin_conn.execute(f"CREATE TABLE {table} (order_id int, amount int)")
    return table


async def claimed(app: Conveyor, worker: str = "w1") -> JobContext:
    backend = await app.backend()
    [job] = await backend.fetch_jobs(strict_claim(["default"], 1, worker, 10.0))
    return JobContext(job, backend, asyncio.get_running_loop(), worker)


async def pay_jobs(app: Conveyor, n: int = 1) -> None:
    @app.task(name="pay")
    def pay(order_id: int) -> None: ...

    for _ in range(n):
        await pay.enqueue_async(1)


async def state_of_key(app: Conveyor, key: str) -> str | None:
    text = await (await app.backend()).get_record(RecordKey(namespace=ONCE_NAMESPACE, key=key))
    return None if text is None else str(json.loads(text)["state"])


def rows(admin_conn: psycopg.Connection, table: str) -> list[tuple[object, ...]]:
    return admin_conn.execute(f"SELECT order_id, amount FROM {table}").fetchall()


async def test_done_mark_commits_with_the_transaction(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, _ = manual_app
    ledger = ledger_table(admin_conn, schema)
    await pay_jobs(app)
    ctx = await claimed(app)
    seen_inside: list[str | None] = []

    async with ctx.transaction(result="paid") as conn:

        async def book() -> str:
            await conn.execute(f"INSERT INTO {ledger} VALUES (1, 500)")
            return "booked"

        assert await ctx.once("book:1", book) == "booked"
        # Not committed yet: everyone else still sees our claim, not the mark.
        seen_inside.append(await state_of_key(app, "book:1"))
    assert seen_inside == ["claimed"]
    assert await state_of_key(app, "book:1") == "done"
    assert rows(admin_conn, ledger) == [(1, 500)]
    job = await (await app.backend()).get_job(ctx.id)
    assert job is not None and job.state is JobState.COMPLETED and job.result_value == "paid"


async def test_rollback_takes_the_mark_back_and_frees_the_key(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, _ = manual_app
    ledger = ledger_table(admin_conn, schema)
    await pay_jobs(app, 2)
    ctx = await claimed(app)
    effects: list[str] = []

    async def book_on(conn: psycopg.AsyncConnection, who: str) -> str:
        await conn.execute(f"INSERT INTO {ledger} VALUES (1, 500)")
        effects.append(who)
        return who

    with pytest.raises(ZeroDivisionError):
        async with ctx.transaction() as conn:
            await ctx.once("book:1", lambda: book_on(conn, "first"))
            raise ZeroDivisionError  # a failure after the effect, before the commit
    assert rows(admin_conn, ledger) == []
    assert await state_of_key(app, "book:1") == "released"
    other = await claimed(app, "w2")
    async with other.transaction() as conn:
        assert await other.once("book:1", lambda: book_on(conn, "second")) == "second"
    assert effects == ["first", "second"] and rows(admin_conn, ledger) == [(1, 500)]


async def test_lease_lost_before_commit_takes_the_mark_back(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, clock = manual_app
    ledger = ledger_table(admin_conn, schema)
    await pay_jobs(app)
    ctx = await claimed(app)
    backend = await app.backend()

    async def book(conn: psycopg.AsyncConnection) -> None:
        await conn.execute(f"INSERT INTO {ledger} VALUES (1, 500)")

    with pytest.raises(StaleLease):
        async with ctx.transaction() as conn:
            await ctx.once("book:1", lambda: book(conn))
            clock.advance(11)  # this worker stalls; another host takes the job
            assert await rescue_expired(backend, backend.clock()) == [ctx.id]
            await backend.fetch_jobs(strict_claim(["default"], 1, "w2", 10.0))
    assert rows(admin_conn, ledger) == []
    assert await state_of_key(app, "book:1") == "released"  # the new owner may book


async def test_claim_taken_by_another_during_the_transaction_rolls_back_with_retry(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, clock = manual_app
    ledger = ledger_table(admin_conn, schema)
    await pay_jobs(app, 2)
    slow, fast = await claimed(app), await claimed(app, "w2")

    async def book(conn: psycopg.AsyncConnection) -> None:
        await conn.execute(f"INSERT INTO {ledger} VALUES (1, 500)")

    async def quick() -> str:
        return "fast"

    with pytest.raises(Retry, match="claim expired"):
        async with slow.transaction() as conn:

            async def slow_book() -> None:
                await book(conn)
                clock.advance(3)  # longer than the claim's lease: another job takes the key
                assert await fast.once("book:1", quick, lease=2) == "fast"

            await slow.once("book:1", slow_book, lease=2)
    assert rows(admin_conn, ledger) == []  # the slow attempt's write did not commit
    assert await state_of_key(app, "book:1") == "done"


async def test_sync_form_joins_transaction_sync(
    manual_app: tuple[Conveyor, ManualClock], schema: str, admin_conn: psycopg.Connection
) -> None:
    app, _ = manual_app
    ledger = ledger_table(admin_conn, schema)
    await pay_jobs(app, 2)
    ctx = await claimed(app)

    def handler(context: JobContext) -> str:  # in a thread, as sync handlers run
        with context.transaction_sync() as conn:

            def book() -> str:
                conn.execute(f"INSERT INTO {ledger} VALUES (1, 500)")
                return "booked"

            return context.once_sync("book:1", book)

    assert await asyncio.to_thread(handler, ctx) == "booked"
    assert await state_of_key(app, "book:1") == "done"
    again = await claimed(app, "w2")
    assert await asyncio.to_thread(handler, again) == "booked"  # skipped: no second row
    assert rows(admin_conn, ledger) == [(1, 500)]

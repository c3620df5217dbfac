"""The app of the idempotency fault tests, run in real worker processes. Handlers log
their events to the runs log (tests/runs_log.py); a worker started with
$BLOCK_IN_EFFECT=1 stops inside the effect, after it happened and before its
done-mark, until the test kills it; one started with $STALL_GATE waits for that file
before writing to the sink (the test stops it with SIGSTOP meanwhile)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time

from runs_log import record

from conveyor import Conveyor, RetryOptions, current_job

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///once.db"))
CLAIM_LEASE = 3.0  # seconds a crashed run's claim keeps others from running the effect
BLOCKED = os.environ.get("BLOCK_IN_EFFECT") == "1"


def block_here() -> None:
    record("blocked")
    threading.Event().wait()  # until SIGKILL


@app.task(name="charge", max_attempts=5, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05))
def charge(order_id: int) -> str:
    """The effect is an append to a file: outside any transaction, as a provider's is."""
    ctx = current_job()

    def create_charge() -> str:
        record("effect")
        if BLOCKED:
            block_here()
        return f"charged by {os.getpid()}"

    return ctx.once_sync(f"charge:{order_id}", create_charge, lease=CLAIM_LEASE)


@app.task(name="book", max_attempts=5, retry=RetryOptions(backoff_base=0.01, backoff_cap=0.05))
async def book(order_id: int, amount: int) -> str:
    """The effect is a row in the same PostgreSQL transaction as the done-mark."""
    ctx = current_job()
    async with ctx.transaction() as conn:

        async def write_ledger() -> str:
            await conn.execute(
                f"INSERT INTO {os.environ['LEDGER_TABLE']} VALUES (%s, %s)", (order_id, amount)
            )
            record("effect")
            if BLOCKED:
                record("blocked")
                await asyncio.Event().wait()  # until SIGKILL
            return f"booked by {os.getpid()}"

        return await ctx.once(f"book:{order_id}", write_ledger, lease=CLAIM_LEASE)


@app.task(name="set_balance", max_attempts=5)
def set_balance(account: int, value: int) -> int:
    """A write to the application's own database, conditional on the fence."""
    ctx = current_job()
    record("start")
    gate = os.environ.get("STALL_GATE")
    while gate and not os.path.exists(gate):
        time.sleep(0.01)  # the stalled worker's own wait, not the test's synchronisation
    with sqlite3.connect(os.environ["SINK_DB"], timeout=30) as sink:
        written = sink.execute(
            "UPDATE balances SET value = ?, last_fence = ? WHERE account = ? AND last_fence < ?",
            (value, ctx.fence, account, ctx.fence),
        ).rowcount
    record(f"wrote:{written}:fence:{ctx.fence}")
    return written

"""Checkout as a background job that charges a card once, however often it runs.

The job has two side effects, a charge and a receipt, and a database write between
them. The mailer is down on the first attempt, so the job retries: the retry must
not charge again, and a stalled first attempt must not overwrite what the retry
wrote. The idempotency toolkit (docs/resilience.md) does each part:

* `idempotency_key="charge:{order_id}"`: one key per order, the same on every
  attempt and after a redrive; the provider dedupes on it too (`Idempotency-Key`).
* `current_job().once(key, effect)`: an effect that completed is not run again; the
  retry gets the stored charge back without calling the provider.
* `current_job().fence`: the order row is written only by a newer attempt than the
  last writer (`... WHERE last_fence < :fence`).
* `conveyor.contrib.http.raise_for_status`: the mailer's 503 + Retry-After becomes a
  retry after the second it asks for.

    python examples/payments/checkout.py /tmp/checkout
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path
from typing import Any

import httpx
from provider import Providers

from conveyor import Conveyor, current_job
from conveyor.contrib.http import raise_for_status
from conveyor.worker import Worker, WorkerConfig

HERE = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
app = Conveyor(f"sqlite:///{HERE / 'jobs.db'}", version="1.4.2")
ORDERS = HERE / "orders.db"
API = {"url": ""}  # the providers' address, once they are up (main)


@app.task(idempotency_key="charge:{order_id}", max_attempts=5)
async def checkout(order_id: int, amount: int, email: str) -> str:
    ctx = current_job()

    async def post(path: str, body: dict[str, Any], **headers: str) -> Any:
        async with httpx.AsyncClient(base_url=API["url"], timeout=10) as client:
            return raise_for_status(await client.post(path, json=body, headers=headers)).json()

    charge = await ctx.once(
        f"{ctx.idempotency_key}:charge",
        lambda: post(
            "/v1/charges",
            {"amount": amount, "order": order_id},
            **{"Idempotency-Key": ctx.idempotency_key},
        ),
    )
    mark_paid(order_id, charge["id"], ctx.fence)
    await ctx.once(
        f"{ctx.idempotency_key}:receipt",
        lambda: post("/v1/mail", {"to": email, "charge": charge["id"]}),
    )
    return str(charge["id"])


def mark_paid(order_id: int, charge_id: str, fence: int) -> int:
    """The order row, written only by an attempt newer than the last one that wrote it."""
    with sqlite3.connect(ORDERS) as db:
        return db.execute(
            "UPDATE orders SET status = 'paid', charge_id = ?, last_fence = ? "
            "WHERE id = ? AND last_fence < ?",
            (charge_id, fence, order_id, fence),
        ).rowcount


async def main() -> None:
    with sqlite3.connect(ORDERS) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, status TEXT, "
            "charge_id TEXT, last_fence INTEGER NOT NULL DEFAULT 0)"
        )
        db.execute("INSERT OR REPLACE INTO orders (id, status) VALUES (42, 'new')")
    providers = Providers()
    API["url"] = providers.url
    handle = await checkout.enqueue_async(42, 500, "ana@example.org")
    worker = Worker(app, WorkerConfig(poll_interval=0.05))
    running = asyncio.create_task(worker.run())
    charge_id = await handle.result_async(timeout=30)
    worker.stop()
    await running
    job = handle.job  # as result_async last read it
    first = job.errors[0]
    print(
        f"order 42: paid with {charge_id} after {job.attempt} attempts (attempt 1 ended "
        f"{first.type}, {first.message.rsplit('; ', 1)[1]}, app {first.app_version})"
    )
    print(
        f"provider: {len(providers.charge_requests)} charge request(s), "
        f"{len(providers.charges)} charge, key {providers.charge_requests[0]}"
    )
    print(f"mailer: {providers.mail_requests} request(s), {len(providers.receipts)} receipt sent")
    # The first attempt, had it stalled instead of failing, would write now with its
    # older fence: the row stays as the retry left it.
    print(f"late write from fence 1: {mark_paid(42, 'ch_stale', fence=1)} row(s) changed")
    with sqlite3.connect(ORDERS) as db:
        print(
            "orders:", db.execute("SELECT id, status, charge_id, last_fence FROM orders").fetchall()
        )
    providers.stop()
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())

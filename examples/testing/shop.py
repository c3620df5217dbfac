"""A small web shop: a Starlette route takes an order and enqueues its receipt; the
mailer is flaky. Its tests (test_shop.py) run without any server:

    cd examples/testing && pytest
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from conveyor import Conveyor, RetryOptions, current_job

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///shop-jobs.db"))
ORDERS: dict[int, str] = {}
OUTBOX: list[str] = []  # what the mailer sent


class MailerDown(ConnectionError):
    pass


def mailer_send(to: str, text: str) -> None:
    if len(OUTBOX) == 0 and current_job().attempt < 3:  # down for the first two tries
        raise MailerDown("mail server did not answer")
    OUTBOX.append(f"to {to}: {text}")


@app.task(retry=RetryOptions(backoff_base=30, backoff_cap=60))
def send_receipt(order_id: int, email: str) -> str:
    mailer_send(email, f"receipt for order {order_id}")
    if order_id >= 100:
        thank_big_spender.enqueue(email)
    return f"sent on attempt {current_job().attempt}"


@app.task
def thank_big_spender(email: str) -> None:
    OUTBOX.append(f"to {email}: thank you!")


async def create_order(request: Request) -> JSONResponse:
    body = await request.json()
    order_id = int(body.get("id", len(ORDERS) + 1))
    ORDERS[order_id] = body["email"]
    await send_receipt.enqueue_async(order_id, email=body["email"])
    return JSONResponse({"order": order_id}, status_code=201)


web = Starlette(routes=[Route("/orders", create_order, methods=["POST"])])

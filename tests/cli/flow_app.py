"""An app that declares flow-control limits, for `conveyor queues` (docs/flow-control.md)."""

from __future__ import annotations

from conveyor import Conveyor, Limits

app = Conveyor()  # the URL comes from $CONVEYOR_URL
app.queue("bulk", rate_limit="10/m", max_waiting=1000, on_full="shed_oldest", aging=60)
app.queue("critical", max_waiting=50, on_full="block", block_timeout=5)


@app.task(name="sync", queue="reports", limits=Limits(concurrency_key="user:{user_id}"))
def sync(user_id: int) -> None: ...


@app.task(name="charge", queue="reports", limits=Limits(rate_limit="1/h"))
def charge(order_id: int) -> None: ...


@app.task(name="crunch", queue="bulk")
def crunch(n: int) -> None: ...

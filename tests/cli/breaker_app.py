"""An app with a circuit breaker, for `conveyor breakers`."""

from __future__ import annotations

from conveyor import Conveyor, Limits

app = Conveyor()  # the URL comes from $CONVEYOR_URL
app.breaker("stripe", failures=5, window=60, cooldown=30)


@app.task(name="charge", limits=Limits(breaker="stripe"))
def charge(order_id: int) -> None: ...

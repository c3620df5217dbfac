"""Found by autodiscovery: conveyor.contrib.django imports every app's tasks.py."""

from conveyor.contrib.django import app


@app.task(queue="emails")
def send_receipt(order_id: int) -> str:
    return f"receipt for order {order_id}"


@app.task
def parse_total(text: str) -> float:
    return float(text)  # ValueError on bad input: dead at once


@app.task
def use_the_database() -> int:
    from .models import Order

    return Order.objects.count()

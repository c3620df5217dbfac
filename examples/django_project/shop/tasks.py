"""Imported at start-up by conveyor.contrib.django (every installed app's tasks.py)."""

from conveyor.contrib.django import app

from .models import Order


@app.task(queue="emails", max_attempts=5)
def send_receipt(order_id: int) -> str:
    order = Order.objects.get(id=order_id)
    # ... send the mail; marking it sent makes a repeated delivery harmless
    Order.objects.filter(id=order_id, receipt_sent=False).update(receipt_sent=True)
    return f"receipt sent to {order.email}"

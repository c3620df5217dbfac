from django.db import transaction
from django.http import HttpRequest, JsonResponse

from .models import Order
from .tasks import send_receipt


def place_order(request: HttpRequest) -> JsonResponse:
    total = int(request.POST["total"])
    with transaction.atomic():
        order = Order.objects.create(total=total)
        job = send_receipt.enqueue(order.id)
        if total < 0:
            raise ValueError("a negative total")  # rolls back the order and the job
    return JsonResponse({"order": order.id, "job": job.id})

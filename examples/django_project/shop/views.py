from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import send_receipt


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    with transaction.atomic():
        order = Order.objects.create(email=request.POST["email"])
        # Stored when the transaction commits: a worker never sees an order that
        # does not exist yet, and a rolled-back order sends nothing.
        job = send_receipt.enqueue(order.id)
    return JsonResponse({"order": order.id, "job": job.id})

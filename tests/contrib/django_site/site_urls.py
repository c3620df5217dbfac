from django.urls import include, path
from shop.views import place_order

urlpatterns = [
    path("orders/", place_order),
    path("ops/jobs/", include("conveyor.contrib.django.urls")),
]

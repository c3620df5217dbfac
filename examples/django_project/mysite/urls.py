from django.contrib import admin
from django.urls import include, path
from shop.views import place_order

urlpatterns = [
    path("admin/", admin.site.urls),
    path("orders/", place_order),
    # The job dashboard, for staff users (others: the login page, or 403).
    path("ops/jobs/", include("conveyor.contrib.django.urls")),
]

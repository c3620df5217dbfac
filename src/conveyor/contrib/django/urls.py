"""`path("ops/jobs/", include("conveyor.contrib.django.urls"))`: the dashboard for
active staff users (see dashboard.py for other permissions and options)."""

from __future__ import annotations

from django.urls import re_path

from conveyor.contrib.django.dashboard import dashboard_view

app_name = "conveyor"
urlpatterns = [re_path(r"^(?P<path>.*)$", dashboard_view(), name="dashboard")]

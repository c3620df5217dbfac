"""The Django app config: builds the Conveyor app and imports each app's tasks.py."""

from __future__ import annotations

from django.apps import AppConfig


class ConveyorConfig(AppConfig):
    name = "conveyor.contrib.django"
    label = "conveyor"
    verbose_name = "Conveyor"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from conveyor.contrib.django import get_app

        app = get_app()
        if app.settings.autodiscover:
            autodiscover_modules("tasks")

"""Django: settings, task autodiscovery, enqueue on commit, `manage.py conveyor`, and
the dashboard in `urls.py` for staff users.

    # settings.py
    INSTALLED_APPS = [..., "conveyor.contrib.django"]
    CONVEYOR = {"url": "postgresql://app@db/app?schema=conveyor"}

    # shop/tasks.py (every installed app's tasks.py is imported at start-up)
    from conveyor.contrib.django import app

    @app.task(queue="emails")
    def send_receipt(order_id: int) -> None: ...

    # shop/views.py
    with transaction.atomic():
        order = Order.objects.create(...)
        send_receipt.enqueue(order.id)      # stored when the transaction commits

    $ python manage.py conveyor worker -c 20

Settings (`CONVEYOR`): `url` (else `$CONVEYOR_URL`), `default_queue`, `database`
(the Django database whose transactions enqueues follow; default "default"),
`on_commit` (default True: an enqueue inside `atomic()` waits for the commit and is
dropped on rollback), `transactional` (PostgreSQL: enqueue on Django's own
connection, in its transaction, instead of after it), `autodiscover` (default True).
"""

from __future__ import annotations

import threading
from typing import Any

from conveyor.contrib.django.project import DjangoConveyor

__all__ = ["DjangoConveyor", "app", "get_app"]

_app: DjangoConveyor | None = None
_lock = threading.Lock()


def get_app() -> DjangoConveyor:
    """The project's Conveyor app, built from `settings.CONVEYOR` on first use (and
    Django set up first, in a process that starts from this import: a pool child)."""
    global _app
    if _app is None:
        with _lock:
            if _app is None:
                from django.apps import apps

                if not apps.ready and not apps.loading:
                    import django

                    django.setup()  # runs ready(), which builds the app and discovers tasks
                if _app is None:
                    _app = DjangoConveyor.from_settings()
    return _app


def __getattr__(name: str) -> Any:
    # `from conveyor.contrib.django import app` in a tasks.py: built on first import.
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The dashboard inside a Django project, for staff users, at a path of `urls.py`:

    urlpatterns = [..., path("ops/jobs/", include("conveyor.contrib.django.urls"))]

A Django view that hands the request to the dashboard (an ASGI app) on the Conveyor
app's own event-loop thread, so it works under runserver, WSGI and ASGI servers
alike. Django decides who may see it (a login redirect for anonymous users, 403 for
users that are not staff); the dashboard's own CSRF checks (a signed token per
session, the Origin) still guard every action, so the view is exempt from Django's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.utils.crypto import salted_hmac

from conveyor.web.app import create_dashboard

USER_KEY = "conveyor.django_user"  # set in the ASGI scope by this view only
Permission = Callable[[Any], bool]


def is_staff(user: Any) -> bool:
    return bool(user.is_active and user.is_staff)


def dashboard_view(
    permission: Permission = is_staff, **options: Any
) -> Callable[..., HttpResponse]:
    """A view serving the dashboard to the users `permission` allows (default: active
    staff). `options` go to `create_dashboard` (read_only, title, trusted_origins...).
    Route it with a `path` argument catching the rest of the URL, as urls.py does."""
    from conveyor.contrib.django import get_app

    app = get_app()
    options.setdefault("secret", salted_hmac("conveyor.dashboard", "csrf").digest())
    asgi = create_dashboard(app, auth=_django_user, close_backend_on_shutdown=False, **options)

    def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
        user = request.user  # needs django.contrib.auth's AuthenticationMiddleware
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        if not permission(user):
            raise PermissionDenied("the job dashboard is for staff users")
        prefix = request.path[: len(request.path) - len(path)].rstrip("/")
        status, headers, body = app.portal.call(
            _serve(asgi, _scope(request, prefix, user.get_username()), request.body)
        )
        return _response(status, headers, body)

    # What csrf_exempt sets: the dashboard checks its own tokens and the Origin.
    setattr(dashboard, "csrf_exempt", True)  # noqa: B010 (a function attribute Django reads)
    return dashboard


def _django_user(request: Any) -> str | None:
    """The dashboard's auth hook: the user this view let in."""
    user = request.scope.get(USER_KEY)
    return f"django:{user}" if isinstance(user, str) and user else None


def _scope(request: HttpRequest, prefix: str, user: str) -> dict[str, Any]:
    host, _, port = (
        request.get_host().rpartition(":")
        if ":" in request.get_host()
        else (request.get_host(), "", "")
    )
    default_port = 443 if request.is_secure() else 80
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "root_path": prefix,
        "query_string": request.META.get("QUERY_STRING", "").encode("latin-1"),
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in request.headers.items()
        ],
        "client": (
            request.META.get("REMOTE_ADDR") or "",
            int(request.META.get("REMOTE_PORT") or 0),
        ),
        "server": (host, int(port) if port.isdigit() else default_port),
        USER_KEY: user,
    }


async def _serve(
    asgi: Any, scope: dict[str, Any], body: bytes
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    done = asyncio.Event()
    sent_body = False
    status = 500
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client "leaves" once the whole answer is written
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers.extend((bytes(k), bytes(v)) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                done.set()

    try:
        await asgi(scope, receive, send)
    finally:
        done.set()
    return status, headers, b"".join(chunks)


def _response(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> HttpResponse:
    response = HttpResponse(body, status=status)
    for raw_name, raw_value in headers:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name.lower() == "set-cookie":
            response.cookies.load(SimpleCookie(value))  # several cookies, each kept
        elif name.lower() != "content-length":
            response[name] = value
    return response

"""The dashboard: a Starlette app over `app.admin`, so it works on every backend.

>>> dashboard = create_dashboard(app, basic_auth="ops:secret")      # an ASGI app
>>> fastapi_app.mount("/jobs", create_dashboard(app, auth=current_staff_user))

Server-rendered pages (Jinja2 with autoescape) and htmx (shipped in `static/`)
for live refresh; no build step, nothing from a CDN.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from conveyor.app import Conveyor
from conveyor.web.actions import Actions
from conveyor.web.csrf import CsrfGuard, load_origins, load_secret
from conveyor.web.dashboard import Dashboard, DashboardSettings, Forbidden, package_dir, refuse
from conveyor.web.gate import Gate
from conveyor.web.params import BadRequest
from conveyor.web.security import AuthHook, AuthSettings

log = logging.getLogger("conveyor.dashboard")


def create_dashboard(
    app: Conveyor,
    *,
    read_only: bool = False,
    basic_auth: str | None = None,
    token: str | None = None,
    auth: AuthHook | None = None,
    poll_seconds: float = 5.0,
    title: str = "Conveyor",
    secret: str | bytes | None = None,
    trusted_origins: Iterable[str] | None = None,
    close_backend_on_shutdown: bool = True,
    metrics_top_keys: int = 20,
) -> Starlette:
    """The dashboard as an ASGI app, to serve (`conveyor dashboard`) or to mount.

    `basic_auth="user:password"`, `token=` (bearer) or `auth=` (a callable given the
    request, returning the user's name or None) protect it; with none of them it
    serves loopback clients only. `read_only=True` hides and refuses every action.

    `secret` signs the CSRF tokens (default `$CONVEYOR_DASHBOARD_SECRET`, else random
    per process): give every replica behind one load balancer the same one.
    `trusted_origins` are origins the browser may see the dashboard at besides the
    one the app sees (default `$CONVEYOR_DASHBOARD_ORIGINS`, comma-separated), e.g.
    `["https://ops.example.org"]` behind a proxy that ends TLS. `metrics_top_keys`:
    how many concurrency keys get a series of their own in `/metrics`.
    """
    settings = DashboardSettings(
        read_only=read_only,
        poll_seconds=poll_seconds,
        title=title,
        metrics_top_keys=metrics_top_keys,
    )
    csrf = CsrfGuard(load_secret(secret), load_origins(trusted_origins))
    auth_settings = AuthSettings.from_strings(basic_auth, token, auth)
    d = Dashboard(app, csrf, settings)
    act = Actions(d)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            await d.adopt_runs()  # paced redrives whose driver is gone carry on here
        except Exception:
            log.exception("could not look for redrive runs to adopt")
        yield
        await d.stop_driving()
        if close_backend_on_shutdown:
            await app.aclose()

    routes = [
        Route("/", d.overview, name="overview"),
        Route("/jobs", d.jobs, name="jobs"),
        Route("/jobs/bulk", act.bulk, methods=["POST"], name="bulk"),
        Route("/jobs/{job_id:str}", d.old_job_link),
        Route("/job", d.job, name="job"),
        Route("/job/{action:str}", act.job_action, methods=["POST"], name="job_action"),
        Route("/redrive", d.redrive_page, name="redrive_page"),
        Route("/redrive", act.redrive, methods=["POST"], name="redrive"),
        Route("/redrive/runs", act.start_run, methods=["POST"], name="start_run"),
        Route("/redrive/runs/{action:str}", act.run_action, methods=["POST"], name="run_action"),
        Route("/audit", d.audit_page, name="audit"),
        Route("/queues/{action:str}", act.queue_action, methods=["POST"], name="queue_action"),
        Route("/queue", d.queue, name="queue"),
        Route("/workers", d.workers, name="workers"),
        Route("/breakers", d.breakers, name="breakers"),
        Route(
            "/breakers/{action:str}", act.breaker_action, methods=["POST"], name="breaker_action"
        ),
        Route("/metrics", d.metrics, name="metrics"),
        Mount("/static", StaticFiles(directory=package_dir("static")), name="static"),
    ]
    return Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={BadRequest: refuse, Forbidden: refuse},
        middleware=[Middleware(Gate, auth=auth_settings, csrf=csrf)],
    )


__all__ = ["AuthHook", "Dashboard", "DashboardSettings", "create_dashboard"]

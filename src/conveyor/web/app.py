"""The dashboard: a Starlette app over `app.admin`, so it works on every backend.

>>> dashboard = create_dashboard(app, basic_auth="ops:secret")      # an ASGI app
>>> fastapi_app.mount("/jobs", create_dashboard(app, auth=current_staff_user))

Server-rendered pages (Jinja2 with autoescape) and htmx (shipped in `static/`)
for live refresh; no build step, nothing from a CDN.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..admin import make_filter
from ..app import Conveyor
from ..backends.base import JobFilter
from ..errors import JobNotFound
from ..job import ACTIVE_STATES, TERMINAL_STATES, JobState
from ..version import __version__
from . import views
from .security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    AuthHook,
    AuthSettings,
    authenticate,
    csrf_ok,
    csrf_token_of,
    new_csrf_token,
)

audit = logging.getLogger("conveyor.dashboard.audit")
log = logging.getLogger("conveyor.dashboard")

PAGE_SIZES = (25, 50, 100, 200)
FLASH_COOKIE = "conveyor_flash"
RETRYABLE_BY_OPERATOR = (JobState.DEAD, JobState.CANCELLED)


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    read_only: bool = False
    poll_seconds: float = 5.0
    redrive_batch: int = 100
    bulk_batch: int = 500
    title: str = "Conveyor"


def _package_dir(name: str) -> str:
    return str(resources.files("conveyor.web").joinpath(name))


class Dashboard:
    def __init__(self, app: Conveyor, auth: AuthSettings, settings: DashboardSettings) -> None:
        self.app = app
        self.auth = auth
        self.settings = settings
        self.env = Environment(loader=FileSystemLoader(_package_dir("templates")),
                               autoescape=select_autoescape(default=True), trim_blocks=True,
                               lstrip_blocks=True)
        self.env.filters.update(
            duration=views.format_duration, time=views.format_time, ago=views.format_ago,
            pretty_json=views.pretty_json, number=lambda n: f"{n:,}",
            args_preview=views.args_preview, last_error=views.last_error,
        )

    # --- rendering ------------------------------------------------------------------------
    def render(self, request: Request, name: str, context: dict[str, Any],
               status_code: int = 200) -> HTMLResponse:
        token = csrf_token_of(request) or new_csrf_token()
        flash = request.cookies.get(FLASH_COOKIE)
        ctx = {
            "request": request, "settings": self.settings, "version": __version__,
            "csrf_field": CSRF_FIELD, "csrf_token": token, "user": request.state.user,
            "flash": flash,
            "url": lambda route, query=None, **params: self.url(request, route, query, **params),
            "states": views.STATE_ORDER, "page": name.removesuffix(".html"),
            **context,
        }
        html = self.env.get_template(name).render(ctx)
        response = HTMLResponse(html, status_code=status_code)
        path = request.scope.get("root_path") or "/"
        if csrf_token_of(request) != token:
            response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path=path,
                                secure=request.url.scheme == "https")
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path=path)
        return response

    def url(self, request: Request, route: str, query: dict[str, str] | None = None,
            **params: str) -> str:
        if route == "static":
            return str(request.url_for("static", path=params["path"]).path)
        base = str(request.url_for(route, **params).path)
        clean = {k: v for k, v in (query or {}).items() if v not in ("", None)}
        return f"{base}?{urlencode(clean)}" if clean else base

    def redirect(self, request: Request, to: str, notice: str) -> RedirectResponse:
        response = RedirectResponse(to, status_code=303)
        response.set_cookie(FLASH_COOKIE, notice[:300], httponly=True, samesite="strict",
                            path=request.scope.get("root_path") or "/")
        return response

    def back(self, request: Request, form: Any, fallback: str) -> str:
        """Where to go after an action: the page it came from, if it is one of ours."""
        target = form.get("next") if form is not None else None
        root = request.scope.get("root_path", "")
        # Only a path on this dashboard: "//host" and "/\\host" would leave the site.
        if (isinstance(target, str) and target.startswith(root + "/")
                and not target.startswith(("//", "/\\")) and "\\" not in target):
            return target
        return fallback

    async def guard(self, request: Request) -> Response | None:
        """Checks every action: not read-only, and CSRF token matches."""
        if self.settings.read_only:
            return PlainTextResponse("the dashboard is read-only", status_code=403)
        if not await csrf_ok(request):
            log.warning("rejected %s %s from %s: missing or wrong CSRF token", request.method,
                        request.url.path, request.state.user)
            return PlainTextResponse("CSRF token missing or wrong: reload the page and try again",
                                     status_code=403)
        return None

    def audit(self, request: Request, action: str, target: str, result: str) -> None:
        audit.info("%s %s %s: %s", request.state.user, action, target, result,
                   extra={"dashboard_user": request.state.user, "action": action})

    # --- pages ------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        admin = self.app.admin
        data = views.build_overview(await admin.stats(), await admin.workers(),
                                    await admin.throughput(60))
        template = "_overview_live.html" if request.query_params.get("partial") else "overview.html"
        return self.render(request, template, {"o": data})

    async def jobs(self, request: Request) -> Response:
        query = views.ListQuery.from_mapping(request.query_params)
        try:
            limit = int(request.query_params.get("limit", "50"))
        except ValueError:
            limit = 50
        limit = limit if limit in PAGE_SIZES else 50
        after = request.query_params.get("after") or None
        where = query.to_filter()
        notice = None
        try:
            page = await self.app.admin.list(where, limit + 1, after=after)
        except JobNotFound:
            notice = "The job that page started after is gone (deleted or pruned): first page."
            after = None
            page = await self.app.admin.list(where, limit + 1)
        more = len(page) > limit
        page = page[:limit]
        total = await self.app.admin.count(where)
        next_url = None
        if more and page:
            next_url = self.url(request, "jobs", {**query.params(), "limit": str(limit),
                                                  "after": page[-1].id})
        # Suggestions for the queue field, from what is known without scanning jobs.
        queue_names = sorted({t.defaults.queue for t in self.app.tasks.values()}
                             | {q for w in await self.app.admin.workers() for q in w.queues})
        return self.render(request, "jobs.html", {
            "query": query, "jobs": page, "total": total, "next_url": next_url,
            "first_url": self.url(request, "jobs", {**query.params(), "limit": str(limit)})
            if after else None,
            "limit": limit, "page_sizes": PAGE_SIZES, "notice": notice,
            "queue_names": queue_names,
            "task_names": sorted(self.app.tasks),
            "here": request.url.path + (f"?{request.url.query}" if request.url.query else ""),
        })

    async def job(self, request: Request) -> Response:
        job = await self.app.admin.get(request.path_params["job_id"])
        if job is None:
            return self.render(request, "not_found.html",
                               {"job_id": request.path_params["job_id"]}, status_code=404)
        return self.render(request, "job.html", {
            "job": job, "progress": views.progress_of(job), "events": views.timeline(job),
            "here": request.url.path, "can_retry": job.state in RETRYABLE_BY_OPERATOR,
            "can_cancel": job.state in ACTIVE_STATES and not job.cancel_requested,
            "can_delete": job.state in TERMINAL_STATES,
        })

    async def workers(self, request: Request) -> Response:
        return self.render(request, "workers.html", {
            "workers": await self.app.admin.workers(), "now": self.app.clock()})

    async def redrive_page(self, request: Request) -> Response:
        query = views.ListQuery.from_mapping(request.query_params)
        if query.state not in ("dead", "cancelled"):
            query = views.ListQuery(state="dead", queue=query.queue, task=query.task,
                                    error_type=query.error_type, q=query.q)
        try:
            batch = max(1, min(int(request.query_params.get("batch", "")), 10_000))
        except ValueError:
            batch = self.settings.redrive_batch
        where = query.to_filter()
        preview = await self.app.admin.redrive(where, limit=batch, dry_run=True)
        return self.render(request, "redrive.html", {
            "query": query, "batch": batch, "preview": preview,
            "matching": await self.app.admin.count(where),
        })

    async def metrics(self, request: Request) -> Response:
        try:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            from ..metrics import exposition_registry
            from ..metrics.queue_state import queue_state_text
        except ImportError:
            return PlainTextResponse("metrics need prometheus-client: "
                                     "pip install 'conveyor[metrics]'", status_code=404)
        body = await queue_state_text(self.app) + generate_latest(exposition_registry())
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    # --- actions ----------------------------------------------------------------------------
    async def job_action(self, request: Request) -> Response:
        if (refused := await self.guard(request)) is not None:
            return refused
        form = await request.form()
        job_id = request.path_params["job_id"]
        action = request.path_params["action"]
        fallback = self.url(request, "job", job_id=job_id)
        admin = self.app.admin
        if action == "retry":
            moved = await admin.redrive(make_filter(ids=[job_id], states=RETRYABLE_BY_OPERATOR), 1)
            result = "sent back to its queue" if moved else "not dead or cancelled: nothing to retry"
        elif action == "cancel":
            job = await admin.cancel(job_id)
            result = ("not found" if job is None else
                      "cancelled" if job.state is JobState.CANCELLED else
                      "asked to stop (it is running)" if job.cancel_requested else
                      f"already {job.state.value}")
        elif action == "delete":
            deleted = await admin.delete(JobFilter(ids=(job_id,)), limit=1)
            result = "deleted" if deleted else "not deleted (only finished jobs can be)"
            if deleted:
                fallback = self.url(request, "jobs")
        else:
            return PlainTextResponse(f"unknown action {action!r}", status_code=404)
        self.audit(request, action, f"job {job_id}", result)
        if action == "delete" and deleted:  # its page is gone: back to the list
            return self.redirect(request, fallback, f"Job {job_id}: {result}.")
        return self.redirect(request, self.back(request, form, fallback), f"Job {job_id}: {result}.")

    async def bulk(self, request: Request) -> Response:
        if (refused := await self.guard(request)) is not None:
            return refused
        form = await request.form()
        action = str(form.get("action", ""))
        if action not in ("retry", "cancel", "delete"):
            return PlainTextResponse(f"unknown action {action!r}", status_code=400)
        query = views.ListQuery.from_mapping(form)
        ids = [str(v) for v in form.getlist("ids") if isinstance(v, str) and v]
        scope = "selected" if form.get("scope") != "filter" else "filter"
        if scope == "selected" and not ids:
            return self.redirect(request, self.back(request, form, self.url(request, "jobs")),
                                 "Nothing selected.")
        where = self._bulk_filter(action, query, ids if scope == "selected" else None)
        count = 0 if where is None else await self.app.admin.count(where)
        what = (f"{len(ids)} selected" if scope == "selected"
                else f"every job matching {query.describe()}")
        if form.get("confirmed") != "yes":
            return self.render(request, "confirm.html", {
                "action": action, "count": count, "what": what, "query": query, "ids": ids,
                "scope": scope, "next": self.back(request, form, self.url(request, "jobs")),
            })
        try:
            expected = int(str(form.get("expected", count)))
        except ValueError:
            expected = count
        done = 0 if where is None else await self._apply(action, where, cap=min(expected, count))
        verb = {"retry": "Retried", "cancel": "Cancelled", "delete": "Deleted"}[action]
        result = f"{verb} {done:,} of {count:,} job(s)"
        self.audit(request, f"bulk {action}", what, result)
        return self.redirect(request, self.back(request, form, self.url(request, "jobs")),
                             result + ".")

    def _bulk_filter(self, action: str, query: views.ListQuery,
                     ids: list[str] | None) -> JobFilter | None:
        """The jobs an action applies to: the selection or the filter, narrowed to the
        states the action can change (so the count in the confirmation is honest)."""
        base = make_filter(ids=ids) if ids is not None else query.to_filter()
        allowed = {"retry": RETRYABLE_BY_OPERATOR, "cancel": tuple(ACTIVE_STATES),
                   "delete": tuple(TERMINAL_STATES)}[action]
        states = tuple(s for s in (base.states or allowed) if s in allowed)
        return replace(base, states=states) if states else None

    async def _apply(self, action: str, where: JobFilter, cap: int) -> int:
        """Apply in batches, never to more than `cap` jobs (what the operator confirmed):
        redriven jobs that die again at once are not redriven a second time."""
        admin, batch, done = self.app.admin, self.settings.bulk_batch, 0
        after: str | None = None
        while done < cap:
            size = min(batch, cap - done)
            if action == "retry":
                n = len(await admin.redrive(where, limit=size))
            elif action == "delete":
                n = len(await admin.delete(where, limit=size))
            else:
                # A running job stays running (cancel only asks it to stop), so walk
                # the matches with the cursor rather than re-reading the first page.
                jobs = await admin.list(where, limit=size, after=after)
                for job in jobs:
                    await admin.cancel(job.id)
                n = len(jobs)
                after = jobs[-1].id if jobs else after
            done += n
            if n < size:
                break
        return done

    async def redrive(self, request: Request) -> Response:
        if (refused := await self.guard(request)) is not None:
            return refused
        form = await request.form()
        query = views.ListQuery.from_mapping(form)
        if query.state not in ("dead", "cancelled"):
            query = views.ListQuery(state="dead", queue=query.queue, task=query.task,
                                    error_type=query.error_type, q=query.q)
        try:
            batch = max(1, min(int(str(form.get("batch", ""))), 10_000))
        except ValueError:
            batch = self.settings.redrive_batch
        moved = await self.app.admin.redrive(query.to_filter(), limit=batch)
        result = f"Redrove {len(moved):,} job(s) (batch of {batch:,})"
        self.audit(request, "redrive", query.describe(), result)
        return self.redirect(request, self.url(request, "redrive_page",
                                               {**query.params(), "batch": str(batch)}),
                             result + ".")

    async def queue_action(self, request: Request) -> Response:
        if (refused := await self.guard(request)) is not None:
            return refused
        form = await request.form()
        name, action = request.path_params["queue"], request.path_params["action"]
        if action == "pause":
            await self.app.admin.pause(name)
        elif action == "resume":
            await self.app.admin.resume(name)
        else:
            return PlainTextResponse(f"unknown action {action!r}", status_code=404)
        self.audit(request, action, f"queue {name}", "done")
        return self.redirect(request, self.back(request, form, self.url(request, "overview")),
                             f"Queue {name} {'paused' if action == 'pause' else 'resumed'}.")


class _Authenticate(BaseHTTPMiddleware):
    def __init__(self, app: Any, auth: AuthSettings) -> None:
        super().__init__(app)
        self.auth = auth

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        user = await authenticate(request, self.auth)
        if user is None:
            if not self.auth.configured:
                return PlainTextResponse(
                    "this dashboard has no authentication configured, so it only serves "
                    "localhost; configure basic auth, a token or an auth hook", status_code=403)
            headers = {"WWW-Authenticate": 'Basic realm="Conveyor", charset="UTF-8"'} \
                if self.auth.basic is not None else {}
            return PlainTextResponse("authentication required", status_code=401, headers=headers)
        request.state.user = user
        response = await call_next(request)
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cache-Control", "no-store")
        return response


def create_dashboard(
    app: Conveyor,
    *,
    read_only: bool = False,
    basic_auth: str | None = None,
    token: str | None = None,
    auth: AuthHook | None = None,
    poll_seconds: float = 5.0,
    title: str = "Conveyor",
    close_backend_on_shutdown: bool = True,
) -> Starlette:
    """The dashboard as an ASGI app, to serve (`conveyor dashboard`) or to mount.

    `basic_auth="user:password"`, `token=` (bearer) or `auth=` (a callable given the
    request, returning the user's name or None) protect it; with none of them it
    serves loopback clients only. `read_only=True` hides and refuses every action.
    """
    settings = DashboardSettings(read_only=read_only, poll_seconds=poll_seconds, title=title)
    dashboard = Dashboard(app, AuthSettings.from_strings(basic_auth, token, auth), settings)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        if close_backend_on_shutdown:
            await app.aclose()

    d = dashboard
    routes = [
        Route("/", d.overview, name="overview"),
        Route("/jobs", d.jobs, name="jobs"),
        Route("/jobs/bulk", d.bulk, methods=["POST"], name="bulk"),
        Route("/jobs/{job_id:str}", d.job, name="job"),
        Route("/jobs/{job_id:str}/{action:str}", d.job_action, methods=["POST"], name="job_action"),
        Route("/redrive", d.redrive_page, name="redrive_page"),
        Route("/redrive", d.redrive, methods=["POST"], name="redrive"),
        Route("/queues/{queue:str}/{action:str}", d.queue_action, methods=["POST"],
              name="queue_action"),
        Route("/workers", d.workers, name="workers"),
        Route("/metrics", d.metrics, name="metrics"),
        Mount("/static", StaticFiles(directory=_package_dir("static")), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(_Authenticate, auth=dashboard.auth)])


__all__ = ["AuthHook", "Dashboard", "DashboardSettings", "create_dashboard"]

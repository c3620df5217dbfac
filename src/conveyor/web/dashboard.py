"""The dashboard's pages, and what pages and actions share: rendering, URLs, redirects.

Every URL is built by `url()`, which percent-encodes what goes into it; job ids and
queue names go in the query string (`/job?id=a%2Fb`), never in the path, because
servers and proxies decode `%2F` in a path and resolve `..` in it (nginx with a URI in
`proxy_pass` would send `/jobs/x%2F..%2Fy/delete` to job `y`), and browsers resolve
`.` and `..` segments: a query string reaches the app as sent.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from conveyor.admin.api import RETRYABLE_BY_OPERATOR
from conveyor.app import Conveyor
from conveyor.model.errors import JobNotFound
from conveyor.model.job import ACTIVE_STATES, TERMINAL_STATES
from conveyor.model.names import AmbiguousTaskName
from conveyor.model.version import __version__
from conveyor.observe.audit import RETENTION
from conveyor.observe.timeline import timeline
from conveyor.ops.queue_overview import queue_overview
from conveyor.ops.redrive_driver import Driver, drive
from conveyor.ops.redrive_runs import Runs, format_rate, new_driver_id
from conveyor.rules.rate_limits import bucket_status, describe
from conveyor.web import views
from conveyor.web.audit import warn
from conveyor.web.csrf import CSRF_FIELD, SESSION_COOKIE, CsrfGuard
from conveyor.web.params import (
    MAX_BATCH,
    PAGE_SIZES,
    BadRequest,
    ListQuery,
    bounded_int,
    id_for_form,
    job_id,
    page_size,
    read_form,
    single,
)
from conveyor.workflows.graph import workflow_levels

FLASH_COOKIE = "conveyor_flash"
AUDIT_ACTIONS = (
    "retry",
    "redrive",
    "cancel",
    "delete",
    "purge",
    "pause",
    "resume",
    "open",
    "close",
    "redrive run started",
    "redrive run paused",
    "redrive run resumed",
    "redrive run cancelled",
    "redrive run stopped",
    "redrive run done",
)
log = logging.getLogger("conveyor.dashboard")


class Forbidden(Exception):
    """The action is not allowed (read-only, CSRF); answered with 403 and the message."""


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    read_only: bool = False
    poll_seconds: float = 5.0
    redrive_batch: int = 100
    bulk_batch: int = 500
    title: str = "Conveyor"
    metrics_top_keys: int = 20  # /metrics: concurrency keys with a series of their own


def package_dir(name: str) -> str:
    return str(resources.files("conveyor.web").joinpath(name))


class Dashboard:
    def __init__(self, app: Conveyor, csrf: CsrfGuard, settings: DashboardSettings) -> None:
        self.app = app
        self.csrf = csrf
        self.settings = settings
        self.env = Environment(
            loader=FileSystemLoader(package_dir("templates")),
            autoescape=select_autoescape(default=True),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(
            duration=views.format_duration,
            time=views.format_time,
            ago=views.format_ago,
            pretty_json=views.pretty_json,
            pretty_value=views.pretty_value,
            number=lambda n: f"{n:,}",
            args_preview=views.args_preview,
            payload_json=views.payload_json,
            result_json=views.result_json,
            last_error=views.last_error,
            form_id=id_for_form,
            user_traceback=views.user_traceback,
            rate=format_rate,
        )
        # Paced redrive runs this process drives (started or resumed here, or adopted).
        self.driver_id = new_driver_id()
        self.drivers: dict[str, asyncio.Task[Any]] = {}

    # --- paced redrive runs ---------------------------------------------------------------
    def drive(self, run_id: str) -> None:
        """Drive a run in the background of this process, until it ends or lets go."""
        if run_id in self.drivers and not self.drivers[run_id].done():
            return

        async def go() -> None:
            try:
                run = await drive(Driver(self.app, run_id, self.driver_id))
                log.info("redrive run %s: %s", run_id, run.describe())
            except Exception:
                log.exception(
                    "redrive run %s: driving failed; the next dashboard to start adopts it", run_id
                )

        self.drivers[run_id] = asyncio.create_task(go(), name=f"redrive-run-{run_id}")

    async def adopt_runs(self) -> None:
        """Drive the runs whose driver is gone (a dashboard that restarted, a CLI killed)."""
        if self.settings.read_only:
            return
        for run in await Runs(self.app).adopt_orphans(self.driver_id):
            log.info("redrive run %s: adopted (its driver stopped)", run.id)
            self.drive(run.id)

    async def stop_driving(self) -> None:
        """On shutdown: runs stay running in their records, to be adopted."""
        for task in self.drivers.values():
            task.cancel()
        await asyncio.gather(*self.drivers.values(), return_exceptions=True)

    # --- rendering ------------------------------------------------------------------------
    def render(
        self, request: Request, name: str, context: dict[str, Any], status_code: int = 200
    ) -> HTMLResponse:
        user: str = request.state.user
        session = self.csrf.session_of(request)
        new_session = session is None
        session = session or self.csrf.new_session()
        token = self.csrf.token_for(session, user)
        flash = request.cookies.get(FLASH_COOKIE)
        ctx = {
            "request": request,
            "settings": self.settings,
            "version": __version__,
            "csrf_field": CSRF_FIELD,
            "csrf_token": token,
            "user": user,
            "flash": self.csrf.unseal(flash),
            "url": lambda route, query=None, **params: self.url(request, route, query, **params),
            "states": views.STATE_ORDER,
            "page": name.removesuffix(".html"),
            **context,
        }
        html = self.env.get_template(name).render(ctx)
        # The token in a header too, for scripts (a page of another origin cannot read it).
        response = HTMLResponse(html, status_code=status_code, headers={"X-CSRF-Token": token})
        path = request.scope.get("root_path") or "/"
        if new_session:
            response.set_cookie(
                SESSION_COOKIE,
                session,
                httponly=True,
                samesite="strict",
                path=path,
                secure=request.url.scheme == "https",
            )
        if flash is not None:
            response.delete_cookie(FLASH_COOKIE, path=path)
        return response

    def url(
        self, request: Request, route: str, query: dict[str, str] | None = None, **params: str
    ) -> str:
        """The path of `route` with its parameters percent-encoded, and `query` (empty
        values left out) as its query string."""
        if route == "static":
            return str(request.url_for("static", path=params["path"]).path)
        quoted = {name: quote(value, safe="") for name, value in params.items()}
        base = str(request.url_for(route, **quoted).path)
        clean = {k: v for k, v in (query or {}).items() if v not in ("", None)}
        return f"{base}?{urlencode(clean)}" if clean else base

    def redirect(self, request: Request, to: str, notice: str) -> RedirectResponse:
        response = RedirectResponse(to, status_code=303)
        response.set_cookie(
            FLASH_COOKIE,
            self.csrf.seal(notice[:300]),
            httponly=True,
            samesite="strict",
            path=request.scope.get("root_path") or "/",
        )
        return response

    def back(self, request: Request, form: FormData | None, fallback: str) -> str:
        """Where to go after an action: the page it came from, if it is one of ours."""
        target = form.get("next") if form is not None else None
        root = request.scope.get("root_path", "")
        # Only a path on this dashboard, as url() writes them (printable ASCII):
        # "//host" and "/\\host" would leave the site.
        if (
            isinstance(target, str)
            and target.isascii()
            and target.isprintable()
            and target.startswith(root + "/")
            and not target.startswith(("//", "/\\"))
            and "\\" not in target
        ):
            return target
        return fallback

    async def action_form(self, request: Request) -> FormData:
        """The form of an action that may go ahead: not read-only, a well-formed form,
        the token signed for this session and user."""
        if self.settings.read_only:
            raise Forbidden("the dashboard is read-only")
        form = await read_form(request)
        if not self.csrf.token_ok(request, form, request.state.user):
            warn(
                "refused %s %s from %s: missing or wrong CSRF token",
                request.method,
                request.url.path,
                request.state.user,
            )
            raise Forbidden("CSRF token missing or wrong: reload the page and try again")
        return form

    # --- pages ------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        admin = self.app.admin
        data = views.build_overview(
            await admin.stats(), await admin.workers(), await admin.throughput(60)
        )
        partial = single(request.query_params, "partial")
        template = "_overview_live.html" if partial else "overview.html"
        return self.render(request, template, {"o": data})

    async def jobs(self, request: Request) -> Response:
        query = ListQuery.from_mapping(request.query_params)
        limit = page_size(request.query_params)
        after = single(request.query_params, "after") or None
        where = query.to_filter()
        notice = None
        try:
            where = await self.app.admin.resolve(where)
        except AmbiguousTaskName as exc:
            raise BadRequest(str(exc)) from None
        try:
            page = await self.app.admin.list(where, limit + 1, after=after)
        except JobNotFound:
            notice = "The job that page started after is gone (deleted or pruned): first page."
            after = None
            page = await self.app.admin.list(where, limit + 1)
        more = len(page) > limit
        page = page[:limit]
        total = await self.app.admin.count(where)
        here = {**query.params(), "limit": str(limit)}
        next_url = None
        if more and page:
            next_url = self.url(request, "jobs", {**here, "after": page[-1].id})
        # Suggestions for the queue field, from what is known without scanning jobs.
        queue_names = sorted(
            {t.defaults.queue for t in self.app.tasks.values()}
            | {q for w in await self.app.admin.workers() for q in w.queues}
        )
        return self.render(
            request,
            "jobs.html",
            {
                "query": query,
                "jobs": page,
                "total": total,
                "next_url": next_url,
                "first_url": self.url(request, "jobs", here) if after else None,
                "limit": limit,
                "page_sizes": PAGE_SIZES,
                "notice": notice,
                "queue_names": queue_names,
                "task_names": sorted(self.app.tasks),
                "here": self.url(request, "jobs", {**here, "after": after or ""}),
            },
        )

    async def job(self, request: Request) -> Response:
        wanted = job_id(request.query_params)
        job = await self.app.admin.get(wanted)
        if job is None:
            return self.render(request, "not_found.html", {"job_id": wanted}, status_code=404)
        events = timeline(job, await self.app.admin.actions_on(job.id))
        workflow, cut = await workflow_levels(await self.app.backend(), job)
        return self.render(
            request,
            "job.html",
            {
                "job": job,
                "progress": views.progress_of(job),
                "events": events,
                "workflow": workflow if sum(map(len, workflow)) > 1 else None,
                "workflow_cut": cut,
                "held_back": await self.app.admin.held_back(job),
                "rate_limit": None
                if job.rate_key is None
                else bucket_status(
                    job.rate_key, False, self.app.rate_limits
                ),  # why it waits: in held_back
                "here": self.url(request, "job", {"id": job.id}),
                "can_retry": job.state in RETRYABLE_BY_OPERATOR,
                "can_cancel": job.state in ACTIVE_STATES and not job.cancel_requested,
                "can_delete": job.state in TERMINAL_STATES,
            },
        )

    async def old_job_link(self, request: Request) -> Response:
        """`/jobs/<id>`, as links before ids moved to the query string: the same page."""
        target = self.url(request, "job", {"id": request.path_params["job_id"]})
        return RedirectResponse(target, status_code=308)

    async def queue(self, request: Request) -> Response:
        """One queue: how workers claim it, its declared limits, its counts, and what
        holds its jobs back (the busiest keys, the buckets). `/queue?queue=<name>`."""
        name = single(request.query_params, "queue")
        if not name:
            raise BadRequest("which queue? pass its name: /queue?queue=<name>")
        found = await queue_overview(self.app, name)
        if found is None:
            return self.render(request, "not_found.html", {"queue": name}, status_code=404)
        overview, loads = found
        limits = {bucket: self.app.rate_limits.get(bucket) for bucket, _ in loads.buckets}
        return self.render(
            request,
            "queue.html",
            {
                "q": overview,
                "loads": loads,
                "bucket_limits": {b: describe(lim) for b, lim in limits.items() if lim is not None},
                "here": self.url(request, "queue", {"queue": name}),
            },
        )

    async def workers(self, request: Request) -> Response:
        return self.render(
            request,
            "workers.html",
            {"workers": await self.app.admin.workers(), "now": self.app.clock()},
        )

    async def breakers(self, request: Request) -> Response:
        """The circuit breakers (docs/downstreams.md): state, failures counted, when the
        probe is due, recent transitions; open or close one."""
        now = self.app.clock()
        rows = [
            {
                "name": name,
                "state": state,
                "breaker": self.app.breakers.get(name),
                "counted": state.counted(self.app.breakers.get(name), now),
                "probe_due_at": (
                    None if (b := self.app.breakers.get(name)) is None else state.probe_due_at(b)
                ),
                "history": list(reversed(state.history[-10:])),
            }
            for name, state in (await self.app.admin.breakers()).items()
        ]
        return self.render(request, "breakers.html", {"breakers": rows, "now": now})

    async def redrive_page(self, request: Request) -> Response:
        query = ListQuery.from_mapping(request.query_params).for_redrive()
        batch = bounded_int(
            request.query_params, "batch", 1, MAX_BATCH, self.settings.redrive_batch
        )
        try:
            where = await self.app.admin.resolve(query.to_filter())
        except AmbiguousTaskName as exc:
            raise BadRequest(str(exc)) from None
        preview = await self.app.admin.redrive(where, limit=batch, dry_run=True)
        await self.adopt_runs()
        return self.render(
            request,
            "redrive.html",
            {
                "query": query,
                "batch": batch,
                "preview": preview,
                "matching": await self.app.admin.count(where),
                "runs": await Runs(self.app).all(),
                "now": self.app.clock(),
            },
        )

    async def audit_page(self, request: Request) -> Response:
        days = bounded_int(request.query_params, "days", 1, int(RETENTION // 86400), 7)
        action = single(request.query_params, "action") or ""
        if action and action not in AUDIT_ACTIONS:
            raise BadRequest(f"action {action[:40]!r} is not one of: {', '.join(AUDIT_ACTIONS)}")
        entries = await self.app.admin.audit(
            since=self.app.clock() - days * 86400, limit=500, actions=[action] if action else ()
        )
        return self.render(
            request,
            "audit.html",
            {"entries": entries, "days": days, "action": action, "actions": AUDIT_ACTIONS},
        )

    async def metrics(self, request: Request) -> Response:
        try:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

            from conveyor.observe.metrics import exposition_registry
            from conveyor.ops.queue_state import queue_state_text
        except ImportError:
            return PlainTextResponse(
                "metrics need prometheus-client: pip install 'conveyor[metrics]'", status_code=404
            )
        body = await queue_state_text(self.app, self.settings.metrics_top_keys) + generate_latest(
            exposition_registry()
        )
        return Response(body, media_type=CONTENT_TYPE_LATEST)


async def refuse(request: Request, exc: Exception) -> Response:
    """The answer to BadRequest (400) and Forbidden (403): the message, as plain text."""
    status = 400 if isinstance(exc, BadRequest) else 403
    return PlainTextResponse(str(exc), status_code=status)

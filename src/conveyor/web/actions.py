"""What an operator can do from the dashboard: retry, cancel, delete (one job or in
bulk, after a confirmation that counts), redrive (a batch, or a paced run), pause and
resume a queue, open and close a circuit breaker. Each is allowed by
`Dashboard.action_form` first; `app.admin` records it in the audit trail as the
dashboard's user, and a log line says what it did.
"""

from __future__ import annotations

from dataclasses import replace

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from conveyor.admin.api import RETRYABLE_BY_OPERATOR, make_filter
from conveyor.backends.params import JobFilter
from conveyor.model.job import ACTIVE_STATES, TERMINAL_STATES, JobState
from conveyor.observe.audit import Actor
from conveyor.ops.redrive_runs import Runs, parse_rate, parse_share
from conveyor.web.audit import record_action
from conveyor.web.dashboard import Dashboard
from conveyor.web.params import (
    MAX_BATCH,
    BadRequest,
    ListQuery,
    bounded_int,
    ids_from_form,
    job_id,
    one_of,
    single,
)

BULK_ACTIONS = ("retry", "cancel", "delete")


class Actions:
    def __init__(self, dashboard: Dashboard) -> None:
        self.d = dashboard

    def audit(self, request: Request, action: str, target: str, result: str) -> None:
        record_action(request.state.user, action, target, result)

    @staticmethod
    def actor(request: Request) -> Actor:
        return Actor(request.state.user, "dashboard", request.client.host if request.client else "")

    async def job_action(self, request: Request) -> Response:
        d = self.d
        action = request.path_params["action"]
        if action not in BULK_ACTIONS:
            return PlainTextResponse(f"unknown action {action[:40]!r}", status_code=404)
        form = await d.action_form(request)
        target = job_id(request.query_params)
        fallback = d.url(request, "job", {"id": target})
        admin, by = d.app.admin, self.actor(request)
        deleted = False
        if action == "retry":
            moved = await admin.retry([target], by=by)
            result = (
                "sent back to its queue" if moved else "not dead or cancelled: nothing to retry"
            )
        elif action == "cancel":
            job = await admin.cancel(target, by=by)
            result = (
                "not found"
                if job is None
                else "cancelled"
                if job.state is JobState.CANCELLED
                else "asked to stop (it is running)"
                if job.cancel_requested
                else f"already {job.state.value}"
            )
        else:
            deleted = bool(await admin.delete(JobFilter(ids=(target,)), limit=1, by=by))
            result = "deleted" if deleted else "not deleted (only finished jobs can be)"
        self.audit(request, action, f"job {target}", result)
        if deleted:  # its page is gone: back to the list
            return d.redirect(request, d.url(request, "jobs"), f"Job {target}: {result}.")
        return d.redirect(request, d.back(request, form, fallback), f"Job {target}: {result}.")

    async def bulk(self, request: Request) -> Response:
        d = self.d
        form = await d.action_form(request)
        action = single(form, "action") or ""
        if action not in BULK_ACTIONS:
            raise BadRequest(f"unknown action {action[:40]!r}: one of {', '.join(BULK_ACTIONS)}")
        query = ListQuery.from_mapping(form)
        ids = ids_from_form(form)
        scope = one_of(form, "scope", ("selected", "filter"), "selected")
        back = d.back(request, form, d.url(request, "jobs"))
        if scope == "selected" and not ids:
            return d.redirect(request, back, "Nothing selected.")
        where = self._bulk_filter(action, query, ids if scope == "selected" else None)
        count = 0 if where is None else await d.app.admin.count(where)
        what = (
            f"{len(ids)} selected"
            if scope == "selected"
            else f"every job matching {query.describe()}"
        )
        if single(form, "confirmed") != "yes":
            return d.render(
                request,
                "confirm.html",
                {
                    "action": action,
                    "count": count,
                    "what": what,
                    "query": query,
                    "ids": ids,
                    "scope": scope,
                    "next": back,
                },
            )
        # Never more than the operator confirmed (the count may have grown since).
        expected = bounded_int(form, "expected", 0, 10**12, count)
        done = 0
        if where is not None:
            async with d.app.admin.recording(
                action, by=self.actor(request), where=where, target=what
            ):
                done = await self._apply(action, where, cap=min(expected, count))
        verb = {"retry": "Retried", "cancel": "Cancelled", "delete": "Deleted"}[action]
        result = f"{verb} {done:,} of {count:,} job(s)"
        self.audit(request, f"bulk {action}", what, result)
        return d.redirect(request, back, result + ".")

    @staticmethod
    def _bulk_filter(action: str, query: ListQuery, ids: list[str] | None) -> JobFilter | None:
        """The jobs an action applies to: the selection or the filter, narrowed to the
        states the action can change (so the count in the confirmation is honest)."""
        base = make_filter(ids=ids) if ids is not None else query.to_filter()
        allowed = {
            "retry": RETRYABLE_BY_OPERATOR,
            "cancel": tuple(ACTIVE_STATES),
            "delete": tuple(TERMINAL_STATES),
        }[action]
        states = tuple(s for s in (base.states or allowed) if s in allowed)
        return replace(base, states=states) if states else None

    async def _apply(self, action: str, where: JobFilter, cap: int) -> int:
        """Apply in batches, never to more than `cap` jobs (what the operator confirmed):
        redriven jobs that die again at once are not redriven a second time."""
        admin, batch, done = self.d.app.admin, self.d.settings.bulk_batch, 0
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
        d = self.d
        form = await d.action_form(request)
        query = ListQuery.from_mapping(form).for_redrive()
        batch = bounded_int(form, "batch", 1, MAX_BATCH, d.settings.redrive_batch)
        moved = await d.app.admin.redrive(query.to_filter(), limit=batch, by=self.actor(request))
        result = f"Redrove {len(moved):,} job(s) (batch of {batch:,})"
        self.audit(request, "redrive", query.describe(), result)
        return d.redirect(
            request,
            d.url(request, "redrive_page", {**query.params(), "batch": str(batch)}),
            result + ".",
        )

    async def _on_one(
        self, request: Request, actions: tuple[str, ...], kind: str
    ) -> tuple[str, FormData, str] | Response:
        """An action on one named thing (a queue, a breaker): (the action, its form,
        allowed by action_form, and the name from `?<kind>=`), or a 404 for an action
        that does not exist."""
        action = request.path_params["action"]
        if action not in actions:
            return PlainTextResponse(f"unknown action {action[:40]!r}", status_code=404)
        form = await self.d.action_form(request)
        name = single(request.query_params, kind)
        if not name:
            raise BadRequest(f"which {kind}? pass its name: /{kind}s/{actions[0]}?{kind}=<name>")
        return action, form, name

    async def queue_action(self, request: Request) -> Response:
        d = self.d
        target = await self._on_one(request, ("pause", "resume"), "queue")
        if isinstance(target, Response):
            return target
        action, form, name = target
        if action == "pause":
            await d.app.admin.pause(name, by=self.actor(request))
        else:
            await d.app.admin.resume(name, by=self.actor(request))
        self.audit(request, action, f"queue {name}", "done")
        return d.redirect(
            request,
            d.back(request, form, d.url(request, "overview")),
            f"Queue {name} {'paused' if action == 'pause' else 'resumed'}.",
        )

    async def breaker_action(self, request: Request) -> Response:
        """Open a circuit breaker by hand (held open until closed) or close it."""
        d = self.d
        target = await self._on_one(request, ("open", "close"), "breaker")
        if isinstance(target, Response):
            return target
        action, form, name = target
        if name not in await d.app.admin.breakers():
            raise BadRequest(f"breaker {name[:40]!r} is not one of those listed on /breakers")
        state = await d.app.admin.set_breaker(name, open=action == "open", by=self.actor(request))
        self.audit(request, action, f"breaker {name}", state.state)
        return d.redirect(
            request,
            d.back(request, form, d.url(request, "breakers")),
            f"Breaker {name} is {state.state}.",
        )

    async def start_run(self, request: Request) -> Response:
        """Start a paced redrive run, driven by this dashboard process."""
        d = self.d
        form = await d.action_form(request)
        query = ListQuery.from_mapping(form).for_redrive()
        try:
            rate = parse_rate(single(form, "rate") or "")
            share = parse_share(single(form, "stop_if_failing") or "20%")
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        sample = bounded_int(form, "min_sample", 1, MAX_BATCH, 20)
        run = await Runs(d.app).start(
            query.to_filter(),
            rate,
            by=self.actor(request),
            stop_if_failing=share,
            min_sample=sample,
            driver=d.driver_id,
        )
        d.drive(run.id)
        self.audit(request, "redrive run", query.describe(), f"run {run.id} started")
        return d.redirect(
            request,
            d.url(request, "redrive_page", query.params()),
            f"Redrive run {run.id} started: {run.total:,} job(s) at {rate:g}/s.",
        )

    async def run_action(self, request: Request) -> Response:
        d = self.d
        action = request.path_params["action"]
        if action not in ("pause", "resume", "cancel"):
            return PlainTextResponse(f"unknown action {action[:40]!r}", status_code=404)
        form = await d.action_form(request)
        run_id = single(request.query_params, "id")
        if not run_id:
            raise BadRequest("which run? pass its id: /redrive/runs/pause?id=<run id>")
        runs, by = Runs(d.app), self.actor(request)
        try:
            if action == "pause":
                run = await runs.pause(run_id, by=by)
            elif action == "cancel":
                run = await runs.cancel(run_id, by=by)
            else:
                run = await runs.resume(run_id, d.driver_id, by=by)
                d.drive(run.id)
        except (LookupError, ValueError) as exc:
            return d.redirect(request, d.url(request, "redrive_page"), str(exc).strip("'\""))
        self.audit(request, f"{action} redrive run", f"run {run_id}", run.status.value)
        return d.redirect(
            request,
            d.back(request, form, d.url(request, "redrive_page")),
            f"Redrive run {run_id}: {run.status.value}.",
        )

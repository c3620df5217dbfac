"""FastAPI (and Starlette): open the Conveyor app with the web app, enqueue from
routes, mount the dashboard behind the web app's own login.

>>> jobs = Conveyor("postgresql://app@db/app")
>>> api = FastAPI(lifespan=conveyor_lifespan(jobs))
>>> @api.post("/signup")
... async def signup(user_id: int, conveyor: ConveyorApp) -> dict[str, str]:
...     job = await send_welcome.enqueue_async(user_id)
...     return {"job": job.id}
>>> mount_dashboard(api, jobs, auth=staff_user_name)   # /jobs

Async routes enqueue on the server's event loop (`await task.enqueue_async(...)`);
sync routes (FastAPI runs them in a thread pool) can call `task.enqueue(...)`.
The lifespan opens the backend (and migrates it) before the first request and
closes both at shutdown.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request
from starlette.applications import Starlette

from conveyor.app import Conveyor
from conveyor.model.errors import ConfigurationError
from conveyor.web import AuthHook, create_dashboard

__all__ = ["ConveyorApp", "conveyor_lifespan", "get_conveyor", "mount_dashboard"]

STATE_KEY = "conveyor"
Lifespan = Callable[[Any], AbstractAsyncContextManager[Mapping[str, Any] | None]]


def conveyor_lifespan(
    app: Conveyor, then: Lifespan | None = None
) -> Callable[[Starlette], AbstractAsyncContextManager[dict[str, Any]]]:
    """A lifespan that opens `app`'s backend at start-up and closes it at shutdown,
    and puts `app` in the request state for `get_conveyor`. `then` is the web app's
    own lifespan, run inside this one (its state is kept too)."""

    @contextlib.asynccontextmanager
    async def lifespan(web: Starlette) -> AsyncIterator[dict[str, Any]]:
        await app.backend()  # connect (and migrate) now: a bad URL fails the start-up
        state: dict[str, Any] = {STATE_KEY: app}
        try:
            if then is None:
                yield state
            else:
                async with then(web) as inner:
                    yield {**dict(inner or {}), **state}
        finally:
            await app.aclose()
            app.close()  # the sync facade that sync routes used, if any

    return lifespan


def get_conveyor(request: Request) -> Conveyor:
    """The dependency: the app `conveyor_lifespan` opened. Tests may swap it with
    `api.dependency_overrides[get_conveyor] = lambda: other_app`."""
    app = getattr(request.state, STATE_KEY, None)
    if not isinstance(app, Conveyor):
        raise ConfigurationError(
            "no Conveyor app in the request state: create the FastAPI app with "
            "FastAPI(lifespan=conveyor_lifespan(app))"
        )
    return app


ConveyorApp = Annotated[Conveyor, Depends(get_conveyor)]


def mount_dashboard(
    web: FastAPI | Starlette, app: Conveyor, *, auth: AuthHook, path: str = "/jobs", **options: Any
) -> None:
    """Serve the dashboard under `path`, for the users `auth` lets in: given the
    request, it returns the user's name (kept in the audit log) or None (401).
    `options` go to `create_dashboard` (read_only, secret, trusted_origins, ...)."""
    if not path.startswith("/") or path == "/":
        raise ConfigurationError(f"mount the dashboard under a path such as /jobs, not {path!r}")
    # The lifespan above closes the app; a mounted app's own lifespan does not run.
    dashboard = create_dashboard(app, auth=auth, close_backend_on_shutdown=False, **options)
    # Unnamed: the dashboard finds its pages by their own route names.
    web.mount(path.rstrip("/"), dashboard)

"""conveyor.contrib.fastapi with FastAPI's TestClient: the lifespan, the dependency,
the dashboard mounted behind the app's own auth."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.contrib.fastapi import ConveyorApp, conveyor_lifespan, get_conveyor, mount_dashboard
from conveyor.model.errors import BackendUnavailable
from conveyor.model.job import JobState


def make_api(conveyor_url: str) -> tuple[FastAPI, Conveyor]:
    jobs = Conveyor(conveyor_url)

    @jobs.task(name="send_welcome")
    def send_welcome(user_id: int) -> None: ...

    api = FastAPI(lifespan=conveyor_lifespan(jobs))

    @api.post("/signup/{user_id}")
    async def signup(user_id: int, conveyor: ConveyorApp) -> dict[str, str]:
        [job] = await conveyor.enqueue_many_async([send_welcome.message(user_id)])
        return {"job": job.id}

    @api.post("/sync-signup/{user_id}")
    def sync_signup(user_id: int) -> dict[str, str]:  # FastAPI runs it in a thread
        return {"job": send_welcome.enqueue(user_id).id}

    return api, jobs


def test_a_route_enqueues_through_the_dependency(conveyor_url: str) -> None:
    api, jobs = make_api(conveyor_url)
    with TestClient(api) as client:
        ids = [client.post(f"/signup/{n}").json()["job"] for n in (1, 2)]
        ids.append(client.post("/sync-signup/3").json()["job"])
    assert jobs.portal.loop is None  # the shutdown closed the sync facade too
    check = Conveyor(conveyor_url)
    try:
        stored = [check.jobs.get(i) for i in ids]
        assert [(j.task, j.args, j.state) for j in stored if j] == [
            ("send_welcome", [n], JobState.AVAILABLE) for n in (1, 2, 3)
        ]
    finally:
        check.close()


def test_the_lifespan_opens_the_backend_at_start_up() -> None:
    api = FastAPI(lifespan=conveyor_lifespan(Conveyor("postgresql://nobody@127.0.0.1:1/none")))
    with pytest.raises(BackendUnavailable):
        with TestClient(api):
            pass


def test_the_app_lifespan_runs_inside_and_keeps_its_state(conveyor_url: str) -> None:
    events: list[str] = []

    @contextlib.asynccontextmanager
    async def own(_: Any) -> AsyncIterator[dict[str, str]]:
        events.append("start")
        yield {"greeting": "hello"}
        events.append("stop")

    jobs = Conveyor(conveyor_url)
    api = FastAPI(lifespan=conveyor_lifespan(jobs, then=own))

    @api.get("/state")
    async def state(request: Request, conveyor: ConveyorApp) -> dict[str, Any]:
        return {"greeting": request.state.greeting, "same": conveyor is jobs}

    with TestClient(api) as client:
        assert client.get("/state").json() == {"greeting": "hello", "same": True}
    assert events == ["start", "stop"]


def test_tests_can_swap_the_app(conveyor_url: str, tmp_path: Any) -> None:
    api, _ = make_api(conveyor_url)
    other = Conveyor(f"sqlite:///{tmp_path / 'other.db'}")
    api.dependency_overrides[get_conveyor] = lambda: other
    try:
        with TestClient(api) as client:
            job_id = client.post("/signup/9").json()["job"]
        assert other.jobs.get(job_id) is not None
    finally:
        other.close()


def staff_only(request: Request) -> str | None:
    """The app's own auth: here a header; in an app, its session or token check."""
    user = request.headers.get("x-user", "")
    return user if user.startswith("staff-") else None


def test_the_mounted_dashboard_takes_the_apps_auth_and_keeps_its_csrf_checks(
    conveyor_url: str,
) -> None:
    api, jobs = make_api(conveyor_url)
    mount_dashboard(api, jobs, auth=staff_only, path="/ops/jobs")
    with TestClient(api) as client:
        job_id = client.post("/signup/5").json()["job"]
        assert client.get("/ops/jobs/").status_code == 401
        assert client.get("/ops/jobs/", headers={"x-user": "mallory"}).status_code == 401
        client.headers["x-user"] = "staff-ada"
        page = client.get("/ops/jobs/job", params={"id": job_id})
        assert page.status_code == 200 and job_id in page.text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token is not None
        action = f"/ops/jobs/job/cancel?id={job_id}"
        foreign = client.post(
            action, data={"csrf_token": token.group(1)}, headers={"origin": "https://evil.example"}
        )
        assert foreign.status_code == 403
        assert jobs.jobs.get(job_id).state is JobState.AVAILABLE  # type: ignore[union-attr]
        done = client.post(action, data={"csrf_token": token.group(1)}, follow_redirects=False)
        assert done.status_code == 303
        assert jobs.jobs.count(make_filter(states=[JobState.CANCELLED])) == 1


def test_the_dashboard_needs_a_path_of_its_own(conveyor_url: str) -> None:
    api, jobs = make_api(conveyor_url)
    with pytest.raises(Exception, match="under a path such as /jobs"):
        mount_dashboard(api, jobs, auth=staff_only, path="/")

"""FastAPI with Conveyor: the lifespan opens the backend, a route enqueues through the
dependency, the dashboard is mounted at /jobs behind the app's own auth.

    CONVEYOR_URL=sqlite:///jobs.db uvicorn examples.fastapi_app:api     # the web app
    CONVEYOR_URL=sqlite:///jobs.db conveyor worker examples.fastapi_app:jobs

    CONVEYOR_URL=sqlite:////tmp/fastapi.db python examples/fastapi_app.py   # a self-check
"""

from __future__ import annotations

import os
import subprocess
import sys

from fastapi import FastAPI, Request

from conveyor import Conveyor
from conveyor.contrib.fastapi import ConveyorApp, conveyor_lifespan, mount_dashboard

jobs = Conveyor()  # $CONVEYOR_URL


@jobs.task(name="send_welcome", queue="emails")
def send_welcome(user_id: int) -> str:
    return f"welcome mail sent to user {user_id}"


api = FastAPI(lifespan=conveyor_lifespan(jobs))


@api.post("/signup/{user_id}")
async def signup(user_id: int, conveyor: ConveyorApp) -> dict[str, str]:
    [job] = await conveyor.enqueue_many_async([send_welcome.message(user_id)])
    return {"job": job.id}


def staff_user(request: Request) -> str | None:
    """Stands for the app's own login check (a session, a token...): a user name or None."""
    token = request.headers.get("authorization", "")
    return "ops" if token == f"Bearer {os.environ.get('OPS_TOKEN', 'change-me-please')}" else None


mount_dashboard(api, jobs, auth=staff_user, path="/jobs")


def self_check() -> None:
    from fastapi.testclient import TestClient

    with TestClient(api) as client:
        job_id = client.post("/signup/42").json()["job"]
        print("dashboard without login:", client.get("/jobs/").status_code)
        ops = {"authorization": "Bearer change-me-please"}
        print("dashboard as ops:", client.get("/jobs/", headers=ops).status_code)
    # A worker process, as in production; --burst: run what is due, then exit.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "conveyor",
            "worker",
            "examples.fastapi_app:jobs",
            "--burst",
            "--log-level",
            "warning",
        ],
        check=True,
    )
    print(jobs.jobs.get(job_id).result_value)  # type: ignore[union-attr]
    jobs.close()


if __name__ == "__main__":
    self_check()

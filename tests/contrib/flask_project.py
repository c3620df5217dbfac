"""A small Flask app for tests/contrib/test_flask.py, in the app-factory style.
`jobs` is set by `make_jobs` (each test has its own backend URL)."""

from __future__ import annotations

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

from conveyor import Conveyor
from conveyor.contrib.flask import FlaskConveyor, current_conveyor

jobs: Conveyor


def make_jobs(url: str) -> Conveyor:
    global jobs
    jobs = Conveyor(url)

    @jobs.task(name="send_welcome")
    def send_welcome(user_id: int) -> str:
        return f"welcomed {user_id}"

    @jobs.task(name="parse_total")
    def parse_total(text: str) -> float:
        return float(text)

    return jobs


def create_app(jobs: Conveyor) -> Flask:
    web = Flask(__name__)
    FlaskConveyor(jobs).init_app(web)

    @web.post("/signup/<int:user_id>")
    def signup(user_id: int) -> ResponseReturnValue:
        job = current_conveyor().tasks["send_welcome"].enqueue(user_id)
        return jsonify(job=job.id)

    return web

"""Flask with Conveyor: the extension, a view that enqueues, `flask conveyor ...`.

export CONVEYOR_URL=sqlite:///jobs.db
flask --app examples.flask_app run                       # the web app
flask --app examples.flask_app conveyor worker -c 10     # a worker for it

CONVEYOR_URL=sqlite:////tmp/flask.db python examples/flask_app.py   # a self-check
"""

from __future__ import annotations

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue

from conveyor import Conveyor
from conveyor.contrib.flask import FlaskConveyor

jobs = Conveyor()  # $CONVEYOR_URL
conveyor = FlaskConveyor(jobs)


@jobs.task(name="send_welcome", queue="emails")
def send_welcome(user_id: int) -> str:
    return f"welcome mail sent to user {user_id}"


def create_app() -> Flask:
    web = Flask(__name__)
    conveyor.init_app(web)

    @web.post("/signup/<int:user_id>")
    def signup(user_id: int) -> ResponseReturnValue:
        return jsonify(job=send_welcome.enqueue(user_id).id)  # the sync API, in a view

    return web


def self_check() -> None:
    web = create_app()
    job_id = web.test_client().post("/signup/42").get_json()["job"]
    # `flask conveyor worker --burst`: run what is due, then exit.
    result = web.test_cli_runner().invoke(
        args=["conveyor", "worker", "--burst", "--log-level", "warning"]
    )
    print("flask conveyor worker --burst exited with", result.exit_code)
    print(jobs.jobs.get(job_id).result_value)  # type: ignore[union-attr]
    jobs.close()


if __name__ == "__main__":
    self_check()

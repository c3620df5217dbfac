"""A small app for the CLI tests, loaded the way users load theirs:
`conveyor worker example_app:app` from this folder, backend from $CONVEYOR_URL."""

from __future__ import annotations

import os
import time

from conveyor import Conveyor

app = Conveyor()  # the URL comes from $CONVEYOR_URL


@app.task(name="add")
def add(a: int, b: int) -> int:
    return a + b


@app.task(name="greet", queue="emails")
def greet(name: str, punctuation: str = "!") -> str:
    return f"hello {name}{punctuation}"


@app.task(name="parse_total")
def parse_total(text: str) -> float:
    return float(text)  # ValueError on bad input: a poison pill, dead at once


@app.task(name="wait_for_file")
def wait_for_file(path: str, limit: float = 60.0) -> str:
    """Hold a worker thread until `path` exists, so a test can stop a worker mid-job."""
    deadline = time.monotonic() + limit
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {limit}s")
        time.sleep(0.01)
    return "released"


@app.task(name="reports.build")
def build_report(name: str) -> str:
    return name


@app.task(name="exports.build")
def build_export(name: str) -> str:
    return name


@app.task(name="myapp.tasks.parse_amount")
def parse_amount(text: str) -> float:
    return float(text)

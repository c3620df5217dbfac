"""The app the acceptance tests run in real worker processes. Each handler
appends its events to the runs log (see tests/runs_log.py)."""

from __future__ import annotations

import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

from runs_log import record

from conveyor import Adaptive, Conveyor, Limits, RetryOptions, current_job
from conveyor.rules.rate_limits import Limit

app = Conveyor(os.environ.get("CONVEYOR_URL", "sqlite:///acceptance.db"))
# The rate limit test_flow_processes.py measures: 20 a second, 5 at once (a quarter
# second of tokens, so a worker descheduled that long loses none).
LIMITED_RATE, LIMITED_BURST = 20, 5


@app.task(name="work", max_attempts=5)
def work(seconds: float) -> str:
    record("start")
    time.sleep(seconds)
    record("finish")
    return f"attempt {current_job().attempt}"


@app.task(
    name="limited",
    queue="limited",
    limits=Limits(rate_limit=Limit(LIMITED_RATE, per=1.0, burst=LIMITED_BURST)),
)
def limited() -> None:
    record("start")


@app.task(name="hang_first", max_attempts=5)
def hang_first(seconds: float) -> str:
    """Hangs for `seconds` on its first attempt only: the worker that runs it first
    is the one a test kills."""
    record("start")
    if current_job().attempt == 1:
        time.sleep(seconds)
    record("finish")
    return f"attempt {current_job().attempt}"


@app.task(
    name="per_user",
    max_attempts=5,
    limits=Limits(concurrency_key="user:{user}", concurrency_limit=2),
)
def per_user(user: int, seconds: float) -> None:
    """At most 2 running per user, across every worker (docs/flow-control.md)."""
    record("start")
    time.sleep(seconds)
    record("finish")


@app.task(name="capped", max_attempts=5, limits=Limits(max_running=3))
def capped(seconds: float) -> None:
    record("start")
    time.sleep(seconds)
    record("finish")


@app.task(
    name="hang_keyed",
    max_attempts=5,
    limits=Limits(concurrency_key="user:{user}", concurrency_limit=1),
)
def hang_keyed(user: int, seconds: float) -> None:
    """One at a time per user; hangs for `seconds` on its first attempt only."""
    record("start")
    if current_job().attempt == 1:
        time.sleep(seconds)
    record("finish")


if os.environ.get("PERIODIC_EVERY"):
    # Only for tests/acceptance/test_scheduler_processes.py: the other acceptance
    # tests count jobs and must not see scheduled ones.
    @app.periodic(
        every=int(os.environ["PERIODIC_EVERY"]),
        name="tick",
        misfire="all",
        max_catch_up=100,
        overlap="allow",
    )
    @app.task(name="tick")
    def tick() -> None:
        record("tick")


@app.task(name="chord_member", max_attempts=1)
def chord_member(chord: str, value: int) -> int:
    """Both members of a chord return at the same instant: each waits until the other
    started (so they run at once, on two workers), then until the same clock tick."""
    from runs_log import read

    record(f"member-{chord}")
    path = os.environ["RUNS_LOG"]
    deadline = time.monotonic() + 30
    while len(starts := [e.at for e in read(Path(path)) if e.kind == f"member-{chord}"]) < 2:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the other member of chord {chord} never started")
        time.sleep(0.002)
    time.sleep(max(0.0, max(starts) + 0.1 - time.time()))  # the same instant for both
    return value


@app.task(name="chord_callback", max_attempts=1)
def chord_callback(results: list[int], chord: str) -> list[int]:
    record(f"callback-{chord}")
    return results


@app.task(name="kept_briefly", result_ttl=1.0)
def kept_briefly(value: str) -> str:
    """Its result is kept one second (result_ttl, docs/workflows.md)."""
    return value


# The breaker test_breaker_processes.py trips: a fake downstream (its URL in
# $DOWNSTREAM_URL) that answers 503 for a while. Times scaled down: a 2 s cooldown.
app.breaker("downstream", failures=3, window=60, cooldown=2.0)


@app.task(
    name="call_downstream",
    queue="downstream",
    max_attempts=100,
    limits=Limits(breaker="downstream"),
    retry=RetryOptions(backoff_base=0.05, backoff_cap=0.2),
)
def call_downstream() -> None:
    """One request per attempt, naming the attempt and when it was claimed; an HTTP
    error (an OSError: transient) counts against the breaker."""
    job = current_job()
    query = urllib.parse.urlencode(
        {"job": job.id, "attempt": job.attempt, "claimed": repr(job.job.started_at)}
    )
    with urllib.request.urlopen(f"{os.environ['DOWNSTREAM_URL']}?{query}", timeout=10):
        pass


# test_adaptive_processes.py: calls to a downstream of fixed capacity (its address in
# $DOWNSTREAM_URL), which answers 429 past it; urllib's HTTPError carries the status.
@app.task(
    name="adaptive_call",
    max_attempts=1000,
    retry=RetryOptions(backoff_base=0.05, backoff_cap=0.2),
    limits=Limits(adaptive=Adaptive(min=1, max=40, start=6, window=1.0)),
)
def adaptive_call() -> None:
    with urllib.request.urlopen(os.environ["DOWNSTREAM_URL"], timeout=30) as response:
        response.read()

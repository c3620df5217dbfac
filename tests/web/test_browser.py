"""The dashboard in a real headless Chromium (Selenium + the system chromedriver),
served by uvicorn, with a real worker running the retried job.

Saves screenshots of the main pages to $CONVEYOR_SCREENSHOTS when it is set
(`CONVEYOR_SCREENSHOTS=docs/screenshots` refreshes the committed ones), else to
the test's temporary folder, so a test run never changes the checkout. Needs
/usr/bin/chromium and /usr/bin/chromedriver (Debian: apt-get install chromium
chromium-driver); skips locally without them and fails in CI (CONVEYOR_REQUIRE_SERVICES=1).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_fixtures import kill, make_app

from conveyor import Conveyor
from conveyor.admin.api import make_filter
from conveyor.backends.params import RecordWrite
from conveyor.observe.minute_stats import BUCKETS, STATS_NAMESPACE, minute_of
from conveyor.web import create_dashboard
from conveyor.worker import Worker, WorkerConfig

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def deadline_poll(check, timeout: float = 20.0, interval: float = 0.1, what: str = "") -> None:  # type: ignore[no-untyped-def]
    """Poll `check` until true; an element that vanished because the page is being
    replaced (a click that navigates) counts as "not yet"."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    end = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except (StaleElementReferenceException, NoSuchElementException, IndexError):
            pass
        if time.monotonic() > end:
            raise AssertionError(f"not true within {timeout}s: {what}")
        time.sleep(interval)


class ServerThread:
    """uvicorn on a free loopback port, in a thread."""

    def __init__(self, asgi: object) -> None:
        import uvicorn

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(asgi, log_level="warning", lifespan="on"))  # type: ignore[arg-type]
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline_poll(lambda: self.server.started, what="uvicorn started")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(15)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class WorkerThread:
    """A real Worker on its own event loop, in a thread."""

    def __init__(self, app: Conveyor, config: WorkerConfig) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.worker = Worker(app, config)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            try:
                await self.worker.run()
            finally:
                await self.app.aclose()

        self.loop.run_until_complete(main())

    def __enter__(self) -> WorkerThread:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.worker.stop)
        self.thread.join(30)
        self.loop.close()


def seed_history(app: Conveyor) -> None:
    """An hour of per-minute records, as workers write them, so the charts in the
    screenshots have a shape (the jobs of this test only fill the last minute)."""
    now = minute_of(app.clock())

    def latency(count: int, around: int) -> dict[str, object]:
        buckets = [0] * (len(BUCKETS) + 1)
        buckets[around] = count - count // 10
        buckets[min(around + 3, len(BUCKETS))] = count // 10
        return {"sum": count * BUCKETS[around] * 0.7, "count": count, "buckets": buckets}

    async def go() -> None:
        backend = await app.backend()
        for i in range(1, 60):
            start = now - 60 * i
            done = 40 + (i * 7) % 25 + (30 if 20 < i < 28 else 0)
            failed = (i * 3) % 5 + (9 if 20 < i < 28 else 0)
            record = {
                "minute": start,
                "worker": "history",
                "queues": {
                    "mail": {
                        "counts": {
                            "completed": done,
                            "failed": failed,
                            "retried": failed - 1 if failed else 0,
                            "dead": 1 if failed else 0,
                            "cancelled": 0,
                        },
                        "wait": latency(done + failed, 4 if 20 < i < 28 else 2),
                        "run": latency(done + failed, 5),
                    }
                },
            }
            await backend.put_record(
                RecordWrite(
                    namespace=STATS_NAMESPACE,
                    key=f"{start:012d}:history",
                    value=json.dumps(record),
                    ttl=3900,
                )
            )
        await app.aclose()

    asyncio.run(go())


def seed_jobs(app: Conveyor) -> dict[str, list[str]]:
    send, build = app.tasks["emails.send"], app.tasks["reports.build"]
    ping = app.tasks["webhooks.ping"]

    async def go() -> dict[str, list[str]]:
        key = [
            (await send.enqueue_async(f"user{i}@example.org", template="welcome")).id
            for i in range(3)
        ]
        await kill(app, "mail", "KeyError", "'first_name'")
        smtp = [(await send.enqueue_async("bounce@example.org")).id]
        await kill(app, "mail", "SMTPRecipientsRefused", "550 mailbox unavailable")
        hooks = [(await ping.enqueue_async(f"https://hooks.example.org/{i}")).id for i in range(2)]
        await kill(app, "webhooks", "TimeoutError", "no answer within 10s")
        reports = [(await build.options(delay=3600).enqueue_async(i)).id for i in range(4)]
        await app.aclose()
        return {"key": key, "smtp": smtp, "hooks": hooks, "reports": reports}

    return asyncio.run(go())


@pytest.fixture
def chrome() -> Iterator[object]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        reason = (
            "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
        )
        if os.environ.get("CONVEYOR_REQUIRE_SERVICES") == "1":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="conveyor-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1440,1000",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shots_folder(tmp_path: Path) -> Path:
    """$CONVEYOR_SCREENSHOTS, else the test's own temporary folder (pytest keeps the last
    few runs' and deletes older ones; a folder of our own in /tmp was never deleted)."""
    return Path(os.environ.get("CONVEYOR_SCREENSHOTS") or tmp_path / "screenshots")


def shot(driver: object, folder: Path, name: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    # Full-page height, so the screenshot shows the whole page.
    height = driver.execute_script("return document.documentElement.scrollHeight")  # type: ignore[attr-defined]
    driver.set_window_size(1440, max(700, min(int(height) + 40, 2400)))  # type: ignore[attr-defined]
    driver.save_screenshot(str(folder / f"{name}.png"))  # type: ignore[attr-defined]
    driver.set_window_size(1440, 1000)  # type: ignore[attr-defined]


def test_operator_fixes_a_bad_day_from_the_browser(tmp_path: Path, chrome: object) -> None:
    from selenium.webdriver.common.by import By

    driver = chrome
    find = driver.find_element  # type: ignore[attr-defined]
    find_all = driver.find_elements  # type: ignore[attr-defined]
    app = make_app(tmp_path)
    shots = shots_folder(tmp_path)

    @app.task(name="webhooks.ping", queue="webhooks")
    def ping(url: str) -> None: ...

    ids = seed_jobs(app)
    seed_history(app)
    config = WorkerConfig(
        queues=("mail", "webhooks"), concurrency=4, poll_interval=0.1, stats_interval=0.2
    )
    with (
        ServerThread(create_dashboard(app, poll_seconds=1.0, title="Conveyor")) as server,
        WorkerThread(app, config),
    ):
        # --- the overview: queues, health, dead letters, charts --------------------------
        driver.get(server.url + "/")  # type: ignore[attr-defined]
        deadline_poll(
            lambda: "1 worker" in find(By.CSS_SELECTOR, ".cards").text,
            what="the live worker on the overview",
        )
        queues = [
            row.find_element(By.CSS_SELECTOR, "td a").text
            for row in find_all(By.CSS_SELECTOR, "table.queues tbody tr")
        ]
        assert queues == ["mail", "reports", "webhooks"]
        dead_card = find_all(By.CSS_SELECTOR, ".card")[3]
        assert dead_card.find_element(By.CSS_SELECTOR, ".v").text == "6"
        assert len(find_all(By.CSS_SELECTOR, "svg.chart")) == 3
        assert len(find_all(By.CSS_SELECTOR, "svg.chart rect.s-ok")) >= 59
        # Live refresh: a new job shows up without a reload...
        driver.execute_script(  # type: ignore[attr-defined]
            """
            window.polls = {asked: 0, swapped: 0};
            document.addEventListener('htmx:beforeRequest', () => window.polls.asked++);
            document.addEventListener('htmx:afterSwap', () => window.polls.swapped++);
        """
        )
        waiting = lambda: find_all(By.CSS_SELECTOR, ".card .v")[0].text  # noqa: E731
        assert waiting() == "0"
        app.tasks["reports.build"].enqueue(99)
        deadline_poll(lambda: waiting() == "1", what="the overview refreshed by itself")
        # ...and pausing it stops the swaps while the polls keep being skipped.
        toggle = find(By.ID, "live-toggle")
        toggle.click()
        assert toggle.get_attribute("aria-pressed") == "true"
        assert toggle.text == "Resume live refresh"
        # A poll sent just before the click may still land: snapshot after a skipped one.
        asked = driver.execute_script("return window.polls.asked")  # type: ignore[attr-defined]
        deadline_poll(
            lambda: driver.execute_script("return window.polls.asked") > asked,  # type: ignore[attr-defined]
            what="a poll skipped",
        )
        polls = driver.execute_script("return window.polls")  # type: ignore[attr-defined]
        app.tasks["reports.build"].enqueue(100)
        deadline_poll(
            lambda: (
                driver.execute_script("return window.polls.asked")  # type: ignore[attr-defined]
                >= polls["asked"] + 2
            ),
            what="two polls while paused",
        )
        assert driver.execute_script("return window.polls.swapped") == polls["swapped"]  # type: ignore[attr-defined]
        assert waiting() == "1"
        toggle.click()
        assert toggle.get_attribute("aria-pressed") == "false"
        deadline_poll(lambda: waiting() == "2", what="refresh resumed")
        shot(driver, shots, "overview")

        # --- the dead-letter list, filtered by error type and by argument text ---------------
        find(By.LINK_TEXT, "Dead letters").click()
        deadline_poll(lambda: "6 matching" in find(By.ID, "match-count").text, what="6 dead")
        field = find(By.NAME, "error_type")
        field.clear()
        field.send_keys("KeyError")
        find(By.ID, "apply-filter").click()
        deadline_poll(
            lambda: "3 matching" in find(By.ID, "match-count").text, what="3 KeyError dead letters"
        )
        listed = {box.get_attribute("value") for box in find_all(By.NAME, "ids")}
        assert listed == set(ids["key"])
        search = find(By.ID, "filter-q")
        search.send_keys("user1@")
        find(By.ID, "apply-filter").click()
        deadline_poll(
            lambda: "1 matching" in find(By.ID, "match-count").text, what="one match for user1@"
        )
        assert [b.get_attribute("value") for b in find_all(By.NAME, "ids")] == [ids["key"][1]]
        search = find(By.ID, "filter-q")
        search.clear()
        find(By.ID, "apply-filter").click()
        deadline_poll(lambda: "3 matching" in find(By.ID, "match-count").text, what="3 again")
        shot(driver, shots, "dead-letters")

        # --- one job: details, then retry it and watch the worker run it --------------------
        target = ids["key"][1]
        find(By.CSS_SELECTOR, f'a[href="/job?id={target}"]').click()
        deadline_poll(lambda: find(By.ID, "job-state").text == "dead", what="the job page")
        assert "user1@example.org" in find(By.ID, "job-args").text
        shot(driver, shots, "job-detail")
        find(By.ID, "action-retry").click()
        deadline_poll(
            lambda: (
                f"Job {target}: sent back to its queue." in find(By.CSS_SELECTOR, ".flash").text
            ),
            what="the retry notice",
        )

        def completed() -> bool:
            driver.refresh()  # type: ignore[attr-defined]
            return bool(find(By.ID, "job-state").text == "completed")

        deadline_poll(completed, interval=0.3, what="the retried job completed")
        assert "attempt 1 started" in find(By.CSS_SELECTOR, ".timeline").text
        shot(driver, shots, "job-completed")

        # --- bulk: select the rest and retry them, after a confirmation that counts ---------
        driver.get(server.url + "/jobs?state=dead&error_type=KeyError")  # type: ignore[attr-defined]
        find(By.CSS_SELECTOR, "input[data-select-all]").click()
        assert all(box.is_selected() for box in find_all(By.NAME, "ids"))
        find(By.CSS_SELECTOR, '.bulk-selected button[value="retry"]').click()
        deadline_poll(
            lambda: find(By.ID, "confirm-question").text == "Retry 2 jobs (2 selected)?",
            what="a confirmation that counts",
        )
        shot(driver, shots, "confirm-bulk-retry")
        find(By.ID, "confirm-button").click()
        deadline_poll(
            lambda: "Retried 2 of 2 job(s)." in find(By.CSS_SELECTOR, ".flash").text,
            what="the bulk retry notice",
        )
        for job_id in ids["key"]:
            deadline_poll(  # polls to the end before the loop moves on
                lambda: app.jobs.get(job_id).state.value == "completed",  # type: ignore[union-attr]  # noqa: B023
                what=f"{job_id} completed",
            )

        # --- redrive page: dry-run preview with a batch size -------------------------------
        driver.get(server.url + "/redrive?queue=webhooks&batch=1")  # type: ignore[attr-defined]
        summary = find(By.ID, "redrive-summary").text
        assert summary == "2 jobs match; the next batch moves 1."
        shot(driver, shots, "redrive")

        # --- workers page ------------------------------------------------------------------
        find(By.LINK_TEXT, "Workers").click()
        deadline_poll(
            lambda: "1 live" in find(By.CSS_SELECTOR, ".titlebar .count").text,
            what="one live worker",
        )
        shot(driver, shots, "workers")

        # --- back on the overview: the retried jobs are completed, 3 dead letters left ------
        driver.get(server.url + "/")  # type: ignore[attr-defined]

        def mail_completed() -> str:
            row = find(By.CSS_SELECTOR, "table.queues tbody tr")  # mail sorts first
            return str(row.find_elements(By.CSS_SELECTOR, "td")[8].text)

        deadline_poll(lambda: mail_completed() == "3", what="3 completed in mail", interval=0.3)
        assert find_all(By.CSS_SELECTOR, ".card .v")[3].text == "3"  # 6 dead - 3 retried
    app.close()


class Recorded:
    """The dashboard, noting the status of every response it sends (method, path, status)."""

    def __init__(self, asgi: Any) -> None:
        self.asgi = asgi
        self.responses: list[tuple[str, str, int]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start":
                self.responses.append((scope["method"], scope["path"], message["status"]))
            await send(message)

        await self.asgi(scope, receive, noting)


ATTACK_PAGE = """<!doctype html>
<html><body><h1>Nothing to see</h1>
<form id="attack" method="post" action="{action}">
  <input name="csrf_token" value="{token}">
  <input name="action" value="delete"><input name="scope" value="filter">
  <input name="state" value="dead"><input name="confirmed" value="yes">
  <input name="expected" value="{expected}">
</form>
<script>
  document.cookie = "{cookie}; path=/";
  document.getElementById("attack").submit();
</script>
</body></html>"""


class AttackerSite:
    """Another web server on this host (another port), serving a page that plants a
    cookie for the host and auto-submits a bulk delete to the dashboard."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        site = self
        self.page = ""

        class Page(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = site.page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> AttackerSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(15)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/"


def session_and_token(base: str) -> tuple[str, str]:
    """What an attacker's own process on this host can get from a dashboard without
    authentication: a session cookie and the token signed for it."""
    import re
    import urllib.request

    with urllib.request.urlopen(base + "/", timeout=10) as response:
        cookies = response.headers.get_all("Set-Cookie") or []
        page = response.read().decode()
    [session] = [
        c.split(";")[0].split("=", 1)[1] for c in cookies if c.startswith("conveyor_session=")
    ]
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match is not None
    return session, match.group(1)


def test_a_page_on_another_localhost_port_cannot_act(tmp_path: Path, chrome: object) -> None:
    from selenium.webdriver.common.by import By

    driver = chrome
    app = make_app(tmp_path)
    send = app.tasks["emails.send"]

    async def dead_letters() -> None:
        await app.enqueue_many_async([send.message(f"user{i}@example.org") for i in range(65)])
        await kill(app, "mail", "KeyError", "'template'")
        await app.aclose()

    asyncio.run(dead_letters())
    dead = make_filter(states=["dead"])
    assert app.jobs.count(dead) == 65
    dashboard = Recorded(create_dashboard(app))
    with ServerThread(dashboard) as server, AttackerSite() as attacker:
        # A fresh browser: no cookie of the dashboard yet (an HttpOnly one would keep
        # the page's script from overwriting it).
        session, token = session_and_token(server.url)
        attacks = [
            ("conveyor_csrf=x1", "x1"),  # double-submit: plant, then send it
            (f"conveyor_session={session}", token),
        ]  # a real pair, got by the attacker
        for cookie, sent in attacks:
            attacker.page = ATTACK_PAGE.format(
                action=server.url + "/jobs/bulk", token=sent, expected=65, cookie=cookie
            )
            before = len(dashboard.responses)
            driver.get(attacker.url)  # type: ignore[attr-defined]
            deadline_poll(  # polls to the end before the loop moves on
                lambda: any(r[:2] == ("POST", "/jobs/bulk") for r in dashboard.responses[before:]),  # noqa: B023
                what="the attack page posted to the dashboard",
            )
            assert [r for r in dashboard.responses[before:] if r[0] == "POST"] == [
                ("POST", "/jobs/bulk", 403)
            ]
            deadline_poll(
                lambda: "cross-origin" in driver.find_element(By.TAG_NAME, "body").text,  # type: ignore[attr-defined]
                what="the refusal shown",
            )
            name, value = cookie.split("=")
            assert {"name": name, "value": value, "domain": "127.0.0.1"}.items() <= next(
                c
                for c in driver.get_cookies()  # type: ignore[attr-defined]
                if c["name"] == name
            ).items()
            assert app.jobs.count(dead) == 65
        # The operator's own page, in the same browser (cookie planted and all), still works.
        driver.get(server.url + "/jobs?state=dead")  # type: ignore[attr-defined]
        driver.find_element(By.CSS_SELECTOR, '.bulk-all button[value="delete"]').click()  # type: ignore[attr-defined]
        deadline_poll(
            lambda: (
                driver.find_element(By.ID, "confirm-question").text  # type: ignore[attr-defined]
                == "Delete 65 jobs (every job matching state=dead)?"
            ),
            what="the confirmation",
        )
        driver.find_element(By.ID, "confirm-button").click()  # type: ignore[attr-defined]
        deadline_poll(
            lambda: (
                "Deleted 65 of 65 job(s)." in driver.find_element(By.CSS_SELECTOR, ".flash").text  # type: ignore[attr-defined]
            ),
            what="the operator's bulk delete",
        )
        assert app.jobs.count(dead) == 0
    app.close()

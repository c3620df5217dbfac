"""conveyor.contrib.django under Django's own test runner and test client. Run by
tests/contrib/test_django.py with a settings module it writes (Conveyor on SQLite or
PostgreSQL; Django on SQLite, or on PostgreSQL for the transactional mode)."""

from __future__ import annotations

import re
import threading
import unittest

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.db.backends.signals import connection_created
from django.test import Client, TransactionTestCase

from conveyor.admin.api import make_filter
from conveyor.contrib.django import DjangoConveyor, app, get_app
from conveyor.model.job import JobState

from .models import Order
from .tasks import parse_total, send_receipt, use_the_database

TRANSACTIONAL = bool(settings.CONVEYOR.get("transactional"))


def tearDownModule() -> None:
    get_app().close()  # its connections go before the test database is dropped


def stored(job_id: str) -> JobState | None:
    job = app.jobs.get(job_id)
    return None if job is None else job.state


class Discovery(unittest.TestCase):
    def test_the_app_comes_from_settings_and_finds_each_apps_tasks(self) -> None:
        self.assertIsInstance(app, DjangoConveyor)
        self.assertIs(app, get_app())
        self.assertEqual(app.url, settings.CONVEYOR["url"])
        self.assertEqual(
            sorted(app.tasks),
            ["shop.tasks.parse_total", "shop.tasks.send_receipt", "shop.tasks.use_the_database"],
        )


@unittest.skipIf(TRANSACTIONAL, "the default mode: enqueue after the commit")
class OnCommit(TransactionTestCase):
    def test_inside_atomic_the_job_is_stored_only_after_the_commit(self) -> None:
        with transaction.atomic():
            handle = send_receipt.enqueue(1)
            self.assertIsNone(stored(handle.id))
        self.assertIs(stored(handle.id), JobState.AVAILABLE)
        self.assertEqual(app.jobs.get(handle.id).args, [1])  # type: ignore[union-attr]

    def test_on_rollback_the_job_is_never_stored(self) -> None:
        with self.assertRaises(RuntimeError):
            with transaction.atomic():
                handle = send_receipt.enqueue(2)
                raise RuntimeError("rolled back")
        with transaction.atomic():
            later = send_receipt.enqueue(3)
        self.assertIsNone(stored(handle.id))
        self.assertIs(stored(later.id), JobState.AVAILABLE)

    def test_outside_atomic_the_job_is_stored_at_once(self) -> None:
        handle = send_receipt.enqueue(4)
        self.assertIs(stored(handle.id), JobState.AVAILABLE)

    def test_a_view_enqueues_with_its_order_and_not_without_it(self) -> None:
        receipts = make_filter(tasks=["shop.tasks.send_receipt"])
        before = app.jobs.count(receipts)
        client = Client()
        made = client.post("/orders/", {"total": 5}).json()
        with self.assertRaises(ValueError):
            client.post("/orders/", {"total": -1})
        self.assertEqual(list(Order.objects.values_list("id", flat=True)), [made["order"]])
        self.assertEqual(app.jobs.count(receipts) - before, 1)
        self.assertEqual(app.jobs.get(made["job"]).args, [made["order"]])  # type: ignore[union-attr]


@unittest.skipUnless(TRANSACTIONAL, "transactional: the job goes in Django's transaction")
class Transactional(TransactionTestCase):
    def _seen_by_django(self, job_id: str) -> int:
        schema = re.search(r"schema=(\w+)", app.url).group(1)  # type: ignore[union-attr]
        with connection.cursor() as cursor:
            cursor.execute(f'SELECT count(*) FROM "{schema}".jobs WHERE id = %s', [job_id])
            return int(cursor.fetchone()[0])

    def test_the_job_is_in_djangos_transaction_and_commits_with_it(self) -> None:
        with transaction.atomic():
            order = Order.objects.create(total=7)
            handle = send_receipt.enqueue(order.id)
            self.assertEqual(self._seen_by_django(handle.id), 1)  # written, on this connection
            self.assertIsNone(stored(handle.id))  # not committed: others do not see it
        self.assertIs(stored(handle.id), JobState.AVAILABLE)

    def test_a_rollback_takes_the_job_with_it(self) -> None:
        with self.assertRaises(RuntimeError):
            with transaction.atomic():
                Order.objects.create(total=8)
                handle = send_receipt.enqueue(8)
                self.assertEqual(self._seen_by_django(handle.id), 1)
                raise RuntimeError("rolled back")
        self.assertEqual(self._seen_by_django(handle.id), 0)
        self.assertIsNone(stored(handle.id))
        self.assertEqual(Order.objects.count(), 0)


class Dashboard(TransactionTestCase):
    def setUp(self) -> None:
        User.objects.create_user("ada", password="pw", is_staff=True)
        User.objects.create_user("bob", password="pw")
        self.job_id = send_receipt.enqueue(9).id

    def test_anonymous_users_go_to_the_login_page(self) -> None:
        response = Client().get("/ops/jobs/")
        self.assertEqual(response.status_code, 302)
        self.assertEqual(response["Location"], "/accounts/login/?next=/ops/jobs/")  # LOGIN_URL

    def test_users_who_are_not_staff_are_refused(self) -> None:
        client = Client()
        client.force_login(User.objects.get(username="bob"))
        self.assertEqual(client.get("/ops/jobs/").status_code, 403)
        self.assertEqual(client.get(f"/ops/jobs/job?id={self.job_id}").status_code, 403)

    def test_staff_see_it_and_act_through_its_own_csrf_checks(self) -> None:
        client = Client(enforce_csrf_checks=True)  # Django's CSRF on: the view is exempt
        client.force_login(User.objects.get(username="ada"))
        overview = client.get("/ops/jobs/")
        self.assertEqual(overview.status_code, 200)
        self.assertIn('href="/ops/jobs/jobs?state=dead"', overview.content.decode())
        page = client.get("/ops/jobs/job", {"id": self.job_id})
        self.assertEqual(page.status_code, 200)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.content.decode())
        assert token is not None
        action = f"/ops/jobs/job/cancel?id={self.job_id}"
        self.assertEqual(client.post(action, {}).status_code, 403)  # no token
        self.assertEqual(
            client.post(
                action, {"csrf_token": token.group(1)}, headers={"origin": "https://evil.example"}
            ).status_code,
            403,
        )
        self.assertIs(stored(self.job_id), JobState.AVAILABLE)
        done = client.post(
            action, {"csrf_token": token.group(1)}, headers={"origin": "http://testserver"}
        )
        self.assertEqual(done.status_code, 303)
        self.assertEqual(done["Location"], f"/ops/jobs/job?id={self.job_id}")
        self.assertIs(stored(self.job_id), JobState.CANCELLED)


class Commands(TransactionTestCase):
    def test_manage_py_conveyor_worker_burst_runs_the_jobs(self) -> None:
        handle = send_receipt.enqueue(10)
        call_command("conveyor", "worker", "--burst", "--no-scheduler")
        self.assertEqual(app.jobs.get(handle.id).result_value, "receipt for order 10")  # type: ignore[union-attr]

    def test_a_dead_job_is_exit_code_4(self) -> None:
        parse_total.enqueue("twelve")
        with self.assertRaises(CommandError) as raised:
            call_command("conveyor", "worker", "--burst")
        self.assertEqual(raised.exception.returncode, 4)

    def test_each_sync_job_gets_a_fresh_django_connection(self) -> None:
        # CONN_MAX_AGE is 0: as after a request, the connection goes when the job ends.
        # One thread runs both jobs (-c 1): without that it would keep its first one.
        opened: list[str] = []

        def count(sender: object, connection: object, **_: object) -> None:
            if threading.current_thread().name.startswith("conveyor-job"):
                opened.append(threading.current_thread().name)

        connection_created.connect(count)
        try:
            use_the_database.enqueue()
            use_the_database.enqueue()
            call_command("conveyor", "worker", "--burst", "-c", "1")
        finally:
            connection_created.disconnect(count)
        self.assertEqual(len(opened), 2, opened)
        self.assertEqual(len(set(opened)), 1, opened)  # one thread, two connections

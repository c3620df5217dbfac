"""`python manage.py test`: a view enqueues on commit; `manage.py conveyor worker
--burst` runs the job; the dashboard is for staff only."""

from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, TransactionTestCase

from conveyor.contrib.django import app

from .models import Order


class ReceiptTests(TransactionTestCase):
    def test_an_order_sends_its_receipt_once_a_worker_runs(self) -> None:
        made = Client().post("/orders/", {"email": "ada@example.org"}).json()
        self.assertEqual(app.jobs.get(made["job"]).state.value, "available")
        call_command("conveyor", "worker", "--burst", "--log-level", "warning")
        self.assertEqual(app.jobs.get(made["job"]).result_value, "receipt sent to ada@example.org")
        self.assertTrue(Order.objects.get(id=made["order"]).receipt_sent)

    def test_the_dashboard_is_for_staff(self) -> None:
        client = Client()
        client.force_login(User.objects.create_user("bob"))
        self.assertEqual(client.get("/ops/jobs/").status_code, 403)
        client.force_login(User.objects.create_user("ada", is_staff=True))
        self.assertEqual(client.get("/ops/jobs/").status_code, 200)

    @classmethod
    def tearDownClass(cls) -> None:
        app.close()
        super().tearDownClass()

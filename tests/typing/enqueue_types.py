"""Checked by mypy in tests/unit/test_typing.py; never imported."""

from typing import assert_type

from conveyor import Conveyor
from conveyor.handle import JobHandle

app = Conveyor("sqlite:///typing.db")


@app.task(queue="emails", max_attempts=5)
def send_welcome(user_id: int, *, template: str = "welcome") -> str:
    return template


@app.task
async def fetch(url: str) -> bytes:
    return b""


assert_type(send_welcome.enqueue(42), JobHandle[str])
assert_type(send_welcome.options(priority=5).enqueue(42, template="x"), JobHandle[str])
assert_type(fetch.enqueue(""), JobHandle[bytes])
send_welcome.enqueue("x")  # E: wrong argument type
send_welcome.enqueue(1, templat="x")  # E: unknown keyword
fetch.enqueue()  # E: missing argument


@app.periodic(cron="0 9 * * MON-FRI", tz="Europe/Madrid", args=("daily",))
@app.task(queue="reports")
def send_report(kind: str) -> int:
    return 0


@app.periodic(every=300)
def sync_accounts() -> None: ...


assert_type(send_report.enqueue("adhoc"), JobHandle[int])  # periodic keeps the Task's type
assert_type(sync_accounts.enqueue(), JobHandle[None])
send_report.enqueue(3)  # E: wrong argument type

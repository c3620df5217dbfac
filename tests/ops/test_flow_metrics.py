"""`/metrics` for flow control (docs/flow-control.md, Operations): per-key gauges held
to the top N keys plus one series for the rest, and the jobs shed by full queues."""

from __future__ import annotations

from conveyor import Conveyor, Limits
from conveyor.backends.claiming import QueuePlan
from conveyor.ops.queue_state import queue_state_text


def samples(text: bytes, prefix: str) -> dict[str, float]:
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.decode().splitlines()
        if line.startswith(prefix)
    }


async def test_per_key_gauges_name_the_top_keys_and_sum_the_rest(app: Conveyor) -> None:
    @app.task(name="sync_user", queue="accounts", limits=Limits(concurrency_key="user:{user_id}"))
    def sync_user(user_id: int) -> None: ...

    for user_id in (1, 1, 1, 2, 2, 3, 4):
        await sync_user.enqueue_async(user_id)
    backend = await app.backend()
    claimed = await backend.fetch_jobs(QueuePlan(["accounts"]).request(10, "w1", 30.0))
    assert len(claimed) == 4  # one slot per user
    text = await queue_state_text(app, top_keys=2)
    assert samples(text, "conveyor_concurrency_key") == {
        'conveyor_concurrency_key_running_jobs{key="user:1"}': 1.0,  # ties: by key
        'conveyor_concurrency_key_running_jobs{key="user:2"}': 1.0,
        "conveyor_concurrency_key_running_other_jobs": 2.0,  # user:3 and user:4
        'conveyor_concurrency_key_held_jobs{key="user:1"}': 2.0,
        'conveyor_concurrency_key_held_jobs{key="user:2"}': 1.0,
        "conveyor_concurrency_key_held_other_jobs": 0.0,
        "conveyor_concurrency_keys": 4.0,
    }
    # The default keeps 20 keys: here every key, nothing left for the other series.
    default = samples(await queue_state_text(app), "conveyor_concurrency_key_running")
    assert len(default) == 5 and default["conveyor_concurrency_key_running_other_jobs"] == 0.0
    none = samples(await queue_state_text(app, top_keys=0), "conveyor_concurrency_key_running")
    assert none == {"conveyor_concurrency_key_running_other_jobs": 4.0}


async def test_jobs_a_full_queue_shed_are_a_counter(app: Conveyor) -> None:
    app.queue("mail", max_waiting=2, on_full="shed_oldest")

    @app.task(name="send", queue="mail")
    def send(n: int) -> None: ...

    @app.task(name="other", queue="reports")
    def other() -> None: ...

    await app.enqueue_many_async([send.message(n) for n in range(5)])
    await send.enqueue_async(5)
    cancelled = await other.enqueue_async()
    await app.admin.cancel(cancelled.id)  # cancelled by an operator: not shed
    shed = samples(await queue_state_text(app), "conveyor_queue_shed_jobs")
    assert shed == {
        'conveyor_queue_shed_jobs_total{queue="mail"}': 4.0,
        'conveyor_queue_shed_jobs_total{queue="reports"}': 0.0,
    }
    # Deleting the shed jobs (as pruning does) leaves the counter as it was.
    from conveyor.admin.api import make_filter

    assert len(await app.admin.delete(make_filter(states=["cancelled"], queues=["mail"]))) == 4
    shed = samples(await queue_state_text(app), "conveyor_queue_shed_jobs_total")
    assert shed == {
        'conveyor_queue_shed_jobs_total{queue="mail"}': 4.0,
        'conveyor_queue_shed_jobs_total{queue="reports"}': 0.0,
    }

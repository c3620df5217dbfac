"""A complete Conveyor program in one file: declare tasks, enqueue, run a worker.

python examples/quickstart.py /tmp/quickstart.db
"""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

from conveyor import Conveyor, RetryOptions, current_job
from conveyor.worker import Worker, WorkerConfig

app = Conveyor(f"sqlite:///{sys.argv[1] if len(sys.argv) > 1 else 'quickstart.db'}")


@app.task(queue="emails", max_attempts=5, timeout=timedelta(seconds=30))
def send_welcome(user_id: int, *, template: str = "welcome") -> str:
    return f"sent {template} mail to user {user_id}"


@app.task(retry_on=(ConnectionError,), retry=RetryOptions(backoff_base=0.05))
async def fetch_avatar(user_id: int) -> str:
    if current_job().attempt == 1:
        raise ConnectionError("avatar service timed out")  # transient: retried
    return f"avatar-{user_id}.png"


async def main() -> None:
    welcome = await send_welcome.options(job_id="welcome:42").enqueue_async(42)
    again = await send_welcome.options(job_id="welcome:42").enqueue_async(42)  # deduplicated
    avatar = await fetch_avatar.enqueue_async(42)
    worker = Worker(app, WorkerConfig(queues=("emails", "default"), poll_interval=0.1))
    running = asyncio.create_task(worker.run())
    print(await welcome.result_async(timeout=10), "| same job:", welcome.id == again.id)
    print(await avatar.result_async(timeout=10), "| attempts:", avatar.job.attempt)
    worker.stop()
    await running
    await app.aclose()


if __name__ == "__main__":
    asyncio.run(main())

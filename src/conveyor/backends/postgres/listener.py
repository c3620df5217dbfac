"""Wake-ups through LISTEN/NOTIFY.

Producers `pg_notify` the schema's channel in the transaction that inserts jobs,
so the hint arrives at commit and never for a rolled-back insert. One connection
per backend listens and sets an event; idle workers wait on it with their poll
interval as the timeout. Notifications are hints: a lost one (listener
reconnecting, server restart) costs at most one poll interval, never a job.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg

log = logging.getLogger("conveyor.postgres")


class Listener:
    def __init__(self, conninfo: str, listen_sql: str, redacted: str) -> None:
        self.conninfo = conninfo
        self.listen_sql = listen_sql
        self.redacted = redacted
        self.event = asyncio.Event()
        self.connected = asyncio.Event()  # for tests and benchmarks: LISTEN is in place
        self.connects = 0  # LISTEN sessions started so far (reconnects show here)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="conveyor-pg-listener")

    async def wait(self, timeout: float) -> None:
        self.start()
        try:
            await asyncio.wait_for(self.event.wait(), timeout)
        except TimeoutError:
            pass
        # Cleared after waking, not before waiting: a hint that arrived while the
        # caller was busy claiming still wakes its next wait at once.
        self.event.clear()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        failures = 0
        while True:
            conn: Any = None
            try:
                conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
                await conn.execute(self.listen_sql)
                self.connects += 1
                self.connected.set()
                if failures:
                    log.info("wake-up listener reconnected to %s", self.redacted)
                failures = 0
                self.event.set()  # whatever was notified while we were away: look now
                async for _ in conn.notifies():
                    self.event.set()
                raise ConnectionError("the listening connection closed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.connected.clear()
                failures += 1
                delay = min(0.1 * 2**failures, 5.0)
                if failures == 1:
                    log.warning(
                        "wake-up listener lost %s (%s); polling until it is back",
                        self.redacted,
                        exc,
                    )
                await asyncio.sleep(delay)
            finally:
                if conn is not None:
                    await conn.close()

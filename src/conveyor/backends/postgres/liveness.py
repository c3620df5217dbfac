"""A worker's liveness on PostgreSQL: a session-level advisory lock.

The worker holds `pg_advisory_lock(key1, key2)` on a connection of its own. When
its process dies, the kernel closes that socket, the server ends the session and
the lock is gone: other workers see it missing from `pg_locks` within
milliseconds. The keys are random (two positive int4, 62 bits) and announced in
the token, so no hash of the worker id can collide with another worker's; taking
a key someone holds fails and a new one is drawn. Rescuers only read `pg_locks`:
they never take a worker's lock, so a worker taking its own lock again after a
blip never finds it held by a rescuer.

Token: `pg-advisory:<server start epoch>:<key1>:<key2>`. After a server restart
every session ended, live workers' too: a token from before it is not judged
(its worker takes a new lock and announces it; till then, its lease covers it).

Behind a pooler in transaction mode (PgBouncer), a session lock stays with a
server connection and never drops: workers there fall back to their leases.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from conveyor.backends.liveness import SignalHolder
from conveyor.backends.postgres.state import PostgresState

SIGNAL = "advisory lock"
_PREFIX = "pg-advisory"
_KEEPALIVE_EVERY = 30.0  # seconds between statements on an idle liveness connection
_TRIES = 3  # keys drawn before giving up (each clash is a 2**-62 event or an old session)


@dataclass(frozen=True, slots=True)
class LockToken:
    epoch: str
    key1: int
    key2: int

    def __str__(self) -> str:
        return f"{_PREFIX}:{self.epoch}:{self.key1}:{self.key2}"

    @staticmethod
    def parse(token: str) -> LockToken | None:
        prefix, _, rest = token.partition(":")
        epoch, _, keys = rest.partition(":")
        key1, _, key2 = keys.partition(":")
        if prefix != _PREFIX or not epoch or not key1.isdigit() or not key2.isdigit():
            return None
        return LockToken(epoch, int(key1), int(key2))


def _random_key() -> int:
    return 1 + secrets.randbelow(2**31 - 1)  # positive int4: pg_locks shows it as is


class AdvisoryLockHolder(SignalHolder):
    def __init__(self, conninfo: str, queries: Mapping[str, str], worker_id: str) -> None:
        super().__init__(SIGNAL, worker_id)
        if "application_name" not in conninfo_to_dict(conninfo):  # the user's name wins
            conninfo = make_conninfo(conninfo, application_name="conveyor-liveness")
        self._conninfo = conninfo
        self._q = queries
        self._keys = (_random_key(), _random_key())
        self._conn: psycopg.AsyncConnection[Any] | None = None

    async def _take(self) -> str:
        conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        self._conn = conn
        for _ in range(_TRIES):
            key1, key2 = self._keys  # the same keys again after a blip, while they are free
            cur = await conn.execute(self._q["take_liveness_lock"], {"key1": key1, "key2": key2})
            row = await cur.fetchone()
            assert row is not None
            taken, epoch = row
            if taken:
                return str(LockToken(str(epoch), key1, key2))
            # Held: our own previous session that the server has not yet seen end,
            # or another holder's equal keys. Draw new ones; the new token is announced.
            self._keys = (_random_key(), _random_key())
        raise RuntimeError(f"every advisory lock key tried was held ({_TRIES} tries)")

    async def _watch(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            # Reading the socket is what notices the server ending the session at
            # once; no notification ever comes (nothing LISTENs here).
            async for _ in conn.notifies(timeout=_KEEPALIVE_EVERY):
                pass
            await conn.execute(self._q["keep_liveness_session"])

    async def _close(self) -> None:
        # Closing ends the session, which releases the lock: nothing else to undo.
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


class PostgresLiveness:
    """WorkerLiveness: each worker holds an advisory lock; rescuers read pg_locks."""

    liveness_signal = SIGNAL

    def __init__(self, state: PostgresState) -> None:
        self._state = state

    async def hold_liveness(self, worker_id: str) -> AdvisoryLockHolder:
        config = self._state.config
        holder = AdvisoryLockHolder(config.conninfo, self._state.queries, worker_id)
        await holder.start(config.timeout)
        return holder

    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        tokens, params = gone_params(candidates)
        if not tokens:
            return set()
        [(epoch, gone)] = await self._state.fetch("liveness_locks_gone", params)
        return dead_from_row(tokens, epoch, gone)


def gone_params(candidates: Mapping[str, str]) -> tuple[dict[str, LockToken], dict[str, Any]]:
    """The candidates with a token of ours, and the query parameters for them."""
    tokens = {
        worker_id: parsed
        for worker_id, token in candidates.items()
        if (parsed := LockToken.parse(token)) is not None
    }
    params = {
        "keys1": [t.key1 for t in tokens.values()],
        "keys2": [t.key2 for t in tokens.values()],
    }
    return tokens, params


def dead_from_row(tokens: dict[str, LockToken], epoch: str, gone: list[int]) -> set[str]:
    """The workers whose lock nobody holds, among those dated by this server's run."""
    ids = list(tokens)
    return {ids[i - 1] for i in gone if tokens[ids[i - 1]].epoch == epoch}

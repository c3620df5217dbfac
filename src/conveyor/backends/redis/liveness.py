"""A worker's liveness on Redis: a named connection of its own.

The worker keeps one connection named `conveyor-worker:<id>` (CLIENT SETNAME),
blocking nothing: it waits on the socket, which is what notices a closed
connection at once, and sends a PING now and then so that no idle timeout ends
it. When the process dies the kernel closes the socket and the server drops the
client: it is gone from `CLIENT LIST`.

Token: `redis-client:<run_id>:<client id>`. Client ids are never reused while
the server runs; its `run_id` changes with every restart (and failover), so a
token from before one is not judged (its worker reconnects, gets a new id and
announces it). Rescuers ask for the candidates' ids only (`CLIENT LIST ID`,
Redis 6.2+; older servers list every client) and check the name too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio.connection import AbstractConnection as AsyncConnection
from redis.exceptions import ResponseError

from conveyor.backends.liveness import SignalHolder
from conveyor.backends.redis.connection import RedisConnection
from conveyor.backends.redis.errors import translated

SIGNAL = "Redis connection"
_PREFIX = "redis-client"
_PING_EVERY = 30.0  # seconds of silence before the connection sends a PING


def client_name(worker_id: str) -> str:
    """The connection's name: CLIENT SETNAME takes no spaces nor control characters."""
    return "conveyor-worker:" + "".join(c if "!" <= c <= "~" else "_" for c in worker_id)


@dataclass(frozen=True, slots=True)
class ClientToken:
    run_id: str
    client_id: int

    def __str__(self) -> str:
        return f"{_PREFIX}:{self.run_id}:{self.client_id}"

    @staticmethod
    def parse(token: str) -> ClientToken | None:
        prefix, _, rest = token.partition(":")
        run_id, _, client_id = rest.partition(":")
        if prefix != _PREFIX or not run_id or not client_id.isdigit():
            return None
        return ClientToken(run_id, int(client_id))


class NamedConnectionHolder(SignalHolder):
    def __init__(self, client: Any, worker_id: str) -> None:
        super().__init__(SIGNAL, worker_id)
        self._pool = client.connection_pool
        self._conn: AsyncConnection | None = None

    async def _take(self) -> str:
        # The pool's kind of connection (URL, TLS, credentials, keepalive), under
        # the worker's name; redis-py names it again on every connect.
        kwargs = {
            **self._pool.connection_kwargs,
            "client_name": client_name(self.worker_id),
            "health_check_interval": 0,
        }
        conn: Any = self._pool.connection_class(**kwargs)  # redis-py leaves connect() untyped
        self._conn = conn
        await conn.connect()
        await conn.send_command("CLIENT", "ID")
        client_id = int(await conn.read_response())
        await conn.send_command("INFO", "server")
        info = await conn.read_response()
        run_id = _run_id(info)
        return str(ClientToken(run_id, client_id))

    async def _watch(self) -> None:
        conn = self._conn
        assert conn is not None
        while True:
            # Nothing is asked, so nothing comes but the PONGs: a read returns None
            # after a silent while (then ping), or raises when the connection closes.
            if await conn.read_response(timeout=_PING_EVERY) is None:
                await conn.send_command("PING")

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.disconnect()


def _run_id(info: Any) -> str:
    if isinstance(info, dict):  # parsed by redis-py
        return str(info["run_id"])
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line.partition(":")[2].strip()
    raise RuntimeError("INFO server gave no run_id")


class RedisWorkerLiveness:
    """WorkerLiveness for RedisBackend: a named connection per worker."""

    liveness_signal = SIGNAL

    def __init__(self, connection: RedisConnection) -> None:
        self.connection = connection

    async def hold_liveness(self, worker_id: str) -> NamedConnectionHolder:
        holder = NamedConnectionHolder(self.connection.client, worker_id)
        await holder.start(timeout=10.0)
        return holder

    @translated
    async def dead_workers(self, candidates: Mapping[str, str]) -> set[str]:
        tokens = {
            worker_id: parsed
            for worker_id, token in candidates.items()
            if (parsed := ClientToken.parse(token)) is not None
        }
        if not tokens:
            return set()
        client = self.connection.client
        ids = sorted({t.client_id for t in tokens.values()})
        async with client.pipeline(transaction=False) as pipe:
            pipe.info("server")
            pipe.client_list(client_id=ids)
            try:
                info, clients = await pipe.execute()
            except ResponseError:  # before Redis 6.2: no CLIENT LIST ID
                info, clients = await client.info("server"), await client.client_list()
        run_id = _run_id(info)
        alive = {(int(c["id"]), c.get("name", "")) for c in clients}
        return {
            worker_id
            for worker_id, token in tokens.items()
            if token.run_id == run_id and (token.client_id, client_name(worker_id)) not in alive
        }

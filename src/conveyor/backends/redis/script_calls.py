"""Calling the Lua scripts: EVALSHA, with SCRIPT LOAD only when the server does not
know a script (e.g. after a restart), several calls in one round trip, and a counting
script over an index a page at a time.

Every script gets the key prefix (`Keys.base`) as its first argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from conveyor.backends.redis.script_sources import SCRIPT_NAMES, script_source

# (script name, KEYS, ARGV after the prefix)
ScriptCall = tuple[str, Sequence[str], Sequence[str | int]]


class Scripts:
    """The scripts of `script_sources.SCRIPT_NAMES`, registered on one asyncio client."""

    def __init__(self, client: Any, base: str) -> None:
        self._client = client
        self._base = base
        self._registered: dict[str, AsyncScript] = {
            name: client.register_script(script_source(name)) for name in SCRIPT_NAMES
        }

    def sha(self, name: str) -> str:
        return self._registered[name].sha

    async def call(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        # EVALSHA directly; SCRIPT LOAD only when the server does not know the script.
        script = self._registered[name]
        try:
            return await self._client.evalsha(script.sha, len(keys), *keys, self._base, *args)
        except NoScriptError:
            script.sha = await self._client.script_load(script.script)
            return await self._client.evalsha(script.sha, len(keys), *keys, self._base, *args)

    async def call_in_one_trip(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Several script calls in one pipeline (one round trip). redis-py's own
        script pipelining asks SCRIPT EXISTS first, a second round trip every time;
        here a call the server does not know is simply sent again after loading."""
        async with self._client.pipeline(transaction=False) as pipe:
            for name, keys, args in calls:
                pipe.evalsha(self.sha(name), len(keys), *keys, self._base, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                replies[i] = await self.call(*calls[i])
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    async def call_in_pages(self, name: str, index: str, page: int, *args: str) -> list[list[Any]]:
        """The replies of counting script `name` ({members read, ...}) over `index`,
        called `page` members at a time until a page comes back short: each call holds
        the server a bounded time."""
        start, replies = 0, []
        while True:
            reply = await self.call(name, [index], [start, page, *args])
            replies.append(reply)
            start += int(reply[0])
            if int(reply[0]) < page:
                return replies

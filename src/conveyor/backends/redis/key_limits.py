"""A concurrency key's set limit on Redis (KeyLimits, conveyor.adaptive): a string
beside the key's slots, read by the rebalance in every script that moves a keyed job
(_lib.lua), written by scripts/set_key_limit.lua together with a rebalance."""

from __future__ import annotations

from typing import Any

from .errors import translated
from .keys import Keys
from .script_calls import Scripts


class RedisKeyLimits:
    """Mixed into RedisBackend, whose client and scripts it uses."""

    keys: Keys

    @property
    def client(self) -> Any:
        raise NotImplementedError

    @property
    def scripts(self) -> Scripts:
        raise NotImplementedError

    @translated
    async def set_key_limit(self, concurrency_key: str, limit: int | None) -> None:
        await self.scripts.call("set_key_limit", [self.keys.key_limit(concurrency_key)],
                                [concurrency_key, "" if limit is None else str(limit)])

    @translated
    async def key_limit(self, concurrency_key: str) -> int | None:
        value = await self.client.get(self.keys.key_limit(concurrency_key))
        return None if value is None else int(value)

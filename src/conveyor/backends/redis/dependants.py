"""Workflows on Redis, read side: a job's `dependants` field (written by
enqueue_dependants.lua, read by the settle scripts; see _lib.lua)."""

from __future__ import annotations

import json
from typing import Any

from .errors import translated
from .keys import Keys


class DependantReads:
    """The Inspector's `dependants_of`, for RedisBackend (its client and keys)."""

    client: Any
    keys: Keys

    @translated
    async def dependants_of(self, job_id: str) -> list[str]:
        raw = await self.client.hget(self.keys.job(job_id), "dependants")
        try:
            ids = json.loads(raw) if raw else []
        except ValueError:  # a damaged list shows as none
            return []
        return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []

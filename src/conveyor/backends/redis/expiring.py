"""Clearing expired results on Redis (result_ttl, conveyor.rules.results): the complete
script files a job whose result expires in `{p}:result_expiries` (id by expiry);
expire_results.lua takes the due entries from there and clears their results."""

from __future__ import annotations

from conveyor.backends.params import ResultSweep
from conveyor.backends.redis.codec import float_arg
from conveyor.backends.redis.errors import translated
from conveyor.backends.redis.keys import Keys
from conveyor.backends.redis.script_calls import Scripts


class ResultExpiry:
    """Mixed into RedisBackend, whose scripts it uses."""

    url: str
    keys: Keys

    @property
    def scripts(self) -> Scripts:
        raise NotImplementedError

    @translated
    async def expire_results(self, result_sweep: ResultSweep) -> list[str]:
        now, limit = result_sweep.now, result_sweep.limit
        cleared: list[str] = []
        while len(cleared) < limit:
            want = limit - len(cleared)
            taken, *ids = await self.scripts.call(
                "expire_results", [self.keys.result_expiries], [float_arg(now), want]
            )
            cleared += [str(i) for i in ids]
            if int(taken) < want:  # no more due (entries of gone jobs are taken too)
                break
        return cleared

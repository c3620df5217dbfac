"""Reads of the rate limit lanes (keys.py): a queue's available jobs that carry a rate
limit bucket wait in a lane of their bucket, not in the queue's available index, so
listing, counting and the flow loads read the lanes too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conveyor.backends.redis.keys import Keys


async def lane_keys(client: Any, keys: Keys, queues: Sequence[str]) -> list[str]:
    """The rate limit lanes of `queues`: their available jobs with a bucket."""
    async with client.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.smembers(keys.lanes(queue))
        lanes = await pipe.execute()
    return [
        keys.lane(queue, bucket)
        for queue, buckets in zip(queues, lanes, strict=True)
        for bucket in sorted(buckets)
    ]


async def lane_sizes(client: Any, keys: Keys, queues: Sequence[str]) -> dict[str, int]:
    """Each queue's available jobs in its rate limit lanes (the throttled ones)."""
    out: dict[str, int] = {}
    for (queue, _), n in (await lane_sizes_by_bucket(client, keys, queues)).items():
        out[queue] = out.get(queue, 0) + n
    return out


async def lane_sizes_by_bucket(
    client: Any, keys: Keys, queues: Sequence[str]
) -> dict[tuple[str, str], int]:
    """The available jobs of each rate limit lane of `queues`, by (queue, bucket)."""
    async with client.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.smembers(keys.lanes(queue))
        lanes = await pipe.execute()
    keyed = [(q, b) for q, buckets in zip(queues, lanes, strict=True) for b in sorted(buckets)]
    async with client.pipeline(transaction=False) as pipe:
        for queue, bucket in keyed:
            pipe.zcard(keys.lane(queue, bucket))
        sizes = await pipe.execute() if keyed else []
    return dict(zip(keyed, sizes, strict=True))

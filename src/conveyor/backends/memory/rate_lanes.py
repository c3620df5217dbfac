"""Rate limits in the memory store (docs/flow-control.md): an available job with a
bucket is filed in its queue's lane for that bucket, `(queue, rate_key)` of
`MemoryStore.available`; the jobs with none are lane `(queue, None)`. A claim reads
the first entries of each lane, a bucket's only as far as its whole tokens go
(conveyor.backends.claiming.ClaimBuckets), so a throttled backlog is never looked at by the
claims of other jobs."""

from __future__ import annotations

from collections.abc import Mapping

from conveyor.backends.claiming import ClaimBuckets
from conveyor.backends.memory.ordered_ids import Lanes
from conveyor.backends.params import ClaimRequest


def first_in_lanes(available: Lanes, queue: str, n: int, buckets: ClaimBuckets) -> list[str]:
    """The ids of the first `n` jobs of `queue` in claim order that the buckets let
    through; the buckets are spent for them."""
    lanes = []
    for key in (None, *buckets.limits):
        lane = available.get((queue, key))
        if lane:
            want = n if key is None else min(n, buckets.allowed(key))
            lanes += [(lane[i], i, key) for i in lane.first(want)]
    return buckets.choose(n, lanes)


def next_token_at(
    available: Lanes, paused: Mapping[str, bool], request: ClaimRequest, buckets: ClaimBuckets
) -> float | None:
    """When a bucket that holds back a waiting job of the claim's queues has a token."""
    held_back = {
        key
        for key in buckets.limits
        for q in request.queues
        if available.get((q.name, key)) and not paused.get(q.name)
    }
    return buckets.next_token_at(held_back)

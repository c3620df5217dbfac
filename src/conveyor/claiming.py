"""Which queues a worker claims from, and how much of each: the one place that turns
a worker's queue list into the quotas of a `ClaimRequest`.

Two ways to serve queues:

* strict order (`-q critical,default,bulk`): an earlier queue is drained before a
  later one gets anything; every queue's quota is the whole claim.
* weights (`-q critical=6,default=3,bulk=1`): each claim is shared out by weight,
  with the fractions carried from claim to claim, so that even claims of one job
  follow the weights over time (6 of every 10 from `critical` while all three have
  work). A queue that has fewer jobs than its quota leaves the rest to the others
  (the backend's second pass), so no slot idles while any queue has work.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import TypeVar

from .backends.base import ClaimRequest, QueueQuota

T = TypeVar("T")


class QueuePlan:
    """Quotas for a worker's claims.

    >>> plan = QueuePlan(["critical", "default", "bulk"], weights=[6, 3, 1])
    >>> plan.request(10, "w1", 10.0).queues
    (QueueQuota(name='critical', quota=6), QueueQuota(name='default', quota=3), ...)
    """

    def __init__(self, queues: Sequence[str], weights: Sequence[float] | None = None) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        if len(set(queues)) != len(queues):
            raise ValueError(f"a queue is listed twice: {list(queues)}")
        if weights is not None:
            if len(weights) != len(queues):
                raise ValueError("give one weight per queue, or none")
            if any(not math.isfinite(w) or w <= 0 for w in weights):
                raise ValueError(f"queue weights must be positive numbers, got {list(weights)}")
        self.queues = tuple(queues)
        self.weights = None if weights is None else tuple(float(w) for w in weights)
        # Shares owed to each queue but not yet granted (fractions of a job).
        self._owed = [0.0] * len(self.queues)

    def __repr__(self) -> str:
        if self.weights is None:
            return f"QueuePlan({','.join(self.queues)})"
        return "QueuePlan(" + ",".join(f"{q}={w:g}" for q, w in zip(self.queues, self.weights)) + ")"

    def request(self, limit: int, worker_id: str, lease_seconds: float) -> ClaimRequest:
        return ClaimRequest(queues=self.quotas(limit), limit=limit, worker_id=worker_id,
                            lease_seconds=lease_seconds)

    def quotas(self, limit: int) -> tuple[QueueQuota, ...]:
        if self.weights is None:
            return tuple(QueueQuota(name, limit) for name in self.queues)
        total = sum(self.weights)
        owed = [o + limit * w / total for o, w in zip(self._owed, self.weights)]
        granted = [math.floor(o) for o in owed]
        # Whole jobs left over go to the queues owed the largest fractions.
        for i in sorted(range(len(owed)), key=lambda i: granted[i] - owed[i])[: limit - sum(granted)]:
            granted[i] += 1
        self._owed = [o - g for o, g in zip(owed, granted)]
        # Largest quota first: the second pass (spare capacity) favours heavier queues.
        order = sorted(range(len(self.queues)), key=lambda i: (-granted[i], -self.weights_at(i), i))
        return tuple(QueueQuota(self.queues[i], granted[i]) for i in order)

    def weights_at(self, i: int) -> float:
        return 1.0 if self.weights is None else self.weights[i]


def parse_queues(spec: str | Sequence[str]) -> QueuePlan:
    """`critical,default` (strict order) or `critical=6,default=3` (weights).

    >>> parse_queues("critical=6,default=3,bulk=1").weights
    (6.0, 3.0, 1.0)
    """
    parts = [p.strip() for p in (spec.split(",") if isinstance(spec, str) else spec)]
    parts = [p for p in parts if p]
    if not parts:
        raise ValueError("no queue named: give e.g. -q default or -q critical=6,default=3")
    names, weights = [], []
    for part in parts:
        name, sep, weight = part.partition("=")
        names.append(name.strip())
        if sep:
            try:
                weights.append(float(weight))
            except ValueError:
                raise ValueError(f"queue weight {weight!r} of {name!r} is not a number") from None
    if weights and len(weights) != len(names):
        raise ValueError(f"give every queue a weight or none: {','.join(parts)}")
    return QueuePlan(names, weights or None)


def claim_steps(request: ClaimRequest) -> Generator[tuple[str, int], int, None]:
    """The two passes of a `ClaimRequest` as steps, for backends that claim one queue
    at a time: each step yields (queue, n), "claim up to n jobs from this queue in
    claim order", and is sent back how many it got. First each queue up to its quota;
    then, while short of the limit, each queue that gave its whole quota (so may
    have more) takes what is left."""
    claimed = 0
    more: list[str] = []
    for entry in request.queues:
        want = min(entry.quota, request.limit - claimed)
        if want <= 0:
            if entry.quota <= 0:
                more.append(entry.name)  # asked nothing yet: may take spare capacity
            continue
        got = yield entry.name, want
        claimed += got
        if got == want:
            more.append(entry.name)
    for name in more:
        want = request.limit - claimed
        if want <= 0:
            return
        claimed += yield name, want


def claim_in_passes(request: ClaimRequest, take: Callable[[str, int], Sequence[T]]) -> list[T]:
    """Run `claim_steps` with `take(queue, n)`, a claim from one queue."""
    claimed: list[T] = []
    steps = claim_steps(request)
    try:
        queue, n = next(steps)
        while True:
            got = take(queue, n)
            claimed.extend(got)
            queue, n = steps.send(len(got))
    except StopIteration:
        return claimed


async def claim_in_passes_async(
    request: ClaimRequest, take: Callable[[str, int], Awaitable[Sequence[T]]]
) -> list[T]:
    """`claim_in_passes` for a `take` that awaits (a database round trip)."""
    claimed: list[T] = []
    steps = claim_steps(request)
    try:
        queue, n = next(steps)
        while True:
            got = await take(queue, n)
            claimed.extend(got)
            queue, n = steps.send(len(got))
    except StopIteration:
        return claimed


def strict_claim(queues: Sequence[str], limit: int, worker_id: str,
                 lease_seconds: float) -> ClaimRequest:
    """A request that serves `queues` in strict order (earlier queues first).

    >>> jobs = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30.0))
    """
    return QueuePlan(queues).request(limit, worker_id, lease_seconds)

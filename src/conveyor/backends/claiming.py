"""Which queues a worker claims from, and how much of each: the one place that turns
a worker's queue list into the quotas of a `ClaimRequest`.

Two ways to serve queues:

* strict order (`-q critical,default,bulk`): an earlier queue is drained before a
  later one gets anything; every queue's quota is the whole claim.
* weights (`-q critical=6,default=3,bulk=1`): the queues share the worker by weight.
  A plan that knows the worker's slots and what runs in them (the worker's own
  plan) gives each freed slot to the queue furthest below its share of the slots
  (`slots * weight / total`), so what runs follows the weights even when one
  queue's jobs take far longer than another's. A plan without that knowledge
  shares each claim out by weight, with the fractions carried from claim to claim,
  so that even claims of one job follow the weights over time (6 of every 10 from
  `critical` while all three have work).

  Either way a queue that has fewer jobs than its quota leaves the rest to the
  others (the backend's second pass, heaviest queue first), so no slot idles while
  a queue has work, with one exception that keeps a slow backlog from holding up
  the other queues (head-of-line blocking): a queue may borrow idle slots only up
  to `slots - (queues - 1)` of them (never fewer than its own share), so each other
  queue always finds a slot free or already its own, and its next job starts at
  once instead of after the borrower's slow jobs end.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from conveyor.backends.params import ClaimRequest, QueueQuota
from conveyor.model.validation import RUN_AT_MAX
from conveyor.rules.rate_limits import TOKEN_SLACK, RateLimit, next_token_at, refill

T = TypeVar("T")


def claim_rank(priority: int, run_at: float, aging: float | None) -> tuple[int, float]:
    """What a waiting job is claimed by within its queue: the highest first element,
    then the lowest second (then insertion order). Without aging that is its priority
    and run_at. With aging (seconds of waiting worth one level) a job ranks with
    priority 0 at `run_at - priority * aging`: ordering by that ascending is ordering
    by `priority + waited / aging` descending at any moment, so the key is fixed when
    the job starts waiting and the backends index it (docs/flow-control.md). Clamped
    to the range of a run_at. The backends' claim SQL and Lua say the same."""
    if aging is None:
        return priority, run_at
    return 0, max(0.0, min(RUN_AT_MAX, run_at - priority * aging))


class QueuePlan:
    """Quotas for a worker's claims.

    >>> plan = QueuePlan(["critical", "default", "bulk"], weights=[6, 3, 1])
    >>> plan.request(10, "w1", 10.0).queues
    (QueueQuota(name='critical', quota=6, ceiling=None), ...)
    >>> plan = QueuePlan(["critical", "bulk"], weights=[9, 1], slots=10)
    >>> plan.quotas(2, running={"critical": 8})  # bulk is 1 below its share
    (QueueQuota(name='critical', quota=1, ceiling=1), QueueQuota(name='bulk', quota=1, ceiling=9))
    """

    def __init__(
        self,
        queues: Sequence[str],
        weights: Sequence[float] | None = None,
        slots: int | None = None,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        if len(set(queues)) != len(queues):
            raise ValueError(f"a queue is listed twice: {list(queues)}")
        if weights is not None:
            if len(weights) != len(queues):
                raise ValueError("give one weight per queue, or none")
            if any(not math.isfinite(w) or w <= 0 for w in weights):
                raise ValueError(f"queue weights must be positive numbers, got {list(weights)}")
        if slots is not None and slots < 1:
            raise ValueError("slots must be at least 1")
        self.queues = tuple(queues)
        self.weights = None if weights is None else tuple(float(w) for w in weights)
        self.slots = slots
        # Shares owed to each queue but not yet granted (fractions of a job).
        self._owed = [0.0] * len(self.queues)

    def __repr__(self) -> str:
        return f"QueuePlan({self.spec})"

    @property
    def spec(self) -> str:
        """The plan as `-q` spells it: `a,b` or `a=6,b=3`."""
        if self.weights is None:
            return ",".join(self.queues)
        return ",".join(f"{q}={w:g}" for q, w in zip(self.queues, self.weights, strict=True))

    def request(
        self,
        limit: int,
        worker_id: str,
        lease_seconds: float,
        running: Mapping[str, int] | None = None,
        rate_limits: tuple[RateLimit, ...] = (),
    ) -> ClaimRequest:
        return ClaimRequest(
            queues=self.quotas(limit, running),
            limit=limit,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            rate_limits=rate_limits,
        )

    def quotas(
        self, limit: int, running: Mapping[str, int] | None = None
    ) -> tuple[QueueQuota, ...]:
        """The quotas of a claim of up to `limit` jobs. `running`: the worker's running
        jobs by queue; with weights and `slots`, the claim shares slots, not claims."""
        if self.weights is None:
            return tuple(QueueQuota(name, limit) for name in self.queues)
        ceilings: list[int | None]
        if running is None or self.slots is None:
            granted, ceilings = self._claim_shares(limit), [None] * len(self.queues)
        else:
            granted, ceilings = self._slot_shares(limit, running, self.slots)
        # Largest quota first: the second pass (spare capacity) favours heavier queues.
        order = sorted(range(len(self.queues)), key=lambda i: (-granted[i], -self.weights_at(i), i))
        return tuple(QueueQuota(self.queues[i], granted[i], ceilings[i]) for i in order)

    def _claim_shares(self, limit: int) -> list[int]:
        assert self.weights is not None
        total = sum(self.weights)
        owed = [o + limit * w / total for o, w in zip(self._owed, self.weights, strict=True)]
        granted = [math.floor(o) for o in owed]
        # Whole jobs left over go to the queues owed the largest fractions.
        for i in sorted(range(len(owed)), key=lambda i: granted[i] - owed[i])[
            : limit - sum(granted)
        ]:
            granted[i] += 1
        self._owed = [o - g for o, g in zip(owed, granted, strict=True)]
        return granted

    def _slot_shares(
        self, limit: int, running: Mapping[str, int], slots: int
    ) -> tuple[list[int], list[int | None]]:
        """Each of `limit` free slots to the queue furthest below its share of the
        worker's slots; ceilings keep one slot per other queue out of a borrower's reach."""
        assert self.weights is not None
        total = sum(self.weights)
        shares = [slots * w / total for w in self.weights]
        held = [running.get(name, 0) for name in self.queues]
        granted = [0] * len(self.queues)
        # A heap of (-room below its share, -weight, index): its top is the queue the
        # slot goes to, as max() over all queues for each slot chose (a weighted
        # worker's every claim built its quotas that way, too slowly: docs/performance.md).
        heap = [
            (-(share - h), -w, i)
            for i, (share, h, w) in enumerate(zip(shares, held, self.weights, strict=True))
        ]
        heapq.heapify(heap)
        for _ in range(limit):
            _, minus_weight, i = heap[0]
            granted[i] += 1
            heapq.heapreplace(heap, (-(shares[i] - held[i] - granted[i]), minus_weight, i))
        reach = slots - (len(self.queues) - 1)
        ceilings = [
            max(0, max(math.ceil(share), reach) - h) for share, h in zip(shares, held, strict=True)
        ]
        return [min(g, c) for g, c in zip(granted, ceilings, strict=True)], list(ceilings)

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
    have more) takes what is left, never more than its ceiling over both passes."""
    claimed = 0
    more: list[tuple[QueueQuota, int]] = []  # (queue, jobs it gave in the first pass)
    for entry in request.queues:
        want = min(entry.quota, request.limit - claimed, _room(entry, 0))
        if want <= 0:
            if entry.quota <= 0:
                more.append((entry, 0))  # asked nothing yet: may take spare capacity
            continue
        got = yield entry.name, want
        claimed += got
        if got == want:
            more.append((entry, got))
    for entry, gave in more:
        want = min(request.limit - claimed, _room(entry, gave))
        if request.limit - claimed <= 0:
            return
        if want > 0:
            claimed += yield entry.name, want


def _room(entry: QueueQuota, gave: int) -> int:
    """How many more jobs the claim may take from the queue of `entry`."""
    return (1 << 62) if entry.ceiling is None else entry.ceiling - gave


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


def strict_claim(
    queues: Sequence[str], limit: int, worker_id: str, lease_seconds: float
) -> ClaimRequest:
    """A request that serves `queues` in strict order (earlier queues first).

    >>> jobs = await backend.fetch_jobs(strict_claim(["default"], 10, "w1", 30.0))
    """
    return QueuePlan(queues).request(limit, worker_id, lease_seconds)


class ClaimBuckets:
    """The rate limit buckets of one claim (conveyor.rules.rate_limits): their tokens at
    `now` from what was stored (`stored`: key -> (tokens, updated_at); a bucket never
    stored starts full), what the claim spends, and what to store back. The memory
    and SQLite backends claim through it; PostgreSQL's claim_jobs and Redis's
    claim.lua do the same arithmetic."""

    def __init__(
        self, limits: Sequence[RateLimit], stored: Mapping[str, tuple[float, float]], now: float
    ) -> None:
        self.now = now
        self.limits = {limit.key: limit for limit in limits}
        # A bucket's time never goes back: a claimer that read the clock before another
        # but spends after it must not count that stretch of time twice.
        self.as_of = {
            key: max(now, stored[key][1]) if key in stored else now for key in self.limits
        }
        self.tokens = {
            limit.key: (
                refill(*stored[limit.key], now, limit)
                if limit.key in stored
                else float(limit.burst)
            )
            for limit in limits
        }
        self.spent: set[str] = set()

    def allowed(self, key: str) -> int:
        """How many more jobs of bucket `key` this claim may take."""
        return max(0, math.floor(self.tokens[key] + TOKEN_SLACK))

    def spend(self, key: str) -> None:
        """One job of bucket `key` claimed."""
        self.tokens[key] = max(0.0, self.tokens[key] - 1)
        self.spent.add(key)

    def choose(self, n: int, lanes: Iterable[tuple[Any, T, str | None]]) -> list[T]:
        """The first `n` of one queue's lanes (claim order, job, bucket or None): the
        free lane's first n and each bucket's first `allowed` merged in claim order;
        the buckets are spent for the jobs chosen, never past their whole tokens."""
        chosen: list[T] = []
        for _, job, key in sorted(lanes, key=lambda lane: lane[0]):
            if len(chosen) >= n:
                break
            if key is not None:
                if self.allowed(key) < 1:
                    continue
                self.spend(key)
            chosen.append(job)
        return chosen

    def next_token_at(self, held_back: Iterable[str]) -> float | None:
        """The earliest time one of `held_back` (buckets with waiting jobs) has a token."""
        due = [
            next_token_at(self.tokens[key], self.as_of[key], self.limits[key])
            for key in held_back
            if self.allowed(key) < 1
        ]
        return min(due, default=None)

    def stored(self) -> dict[str, tuple[float, float]]:
        """What to store back: the buckets this claim spent. One it did not spend needs
        no write: refilling from its older stored state gives the same tokens later."""
        return {key: (self.tokens[key], self.as_of[key]) for key in self.spent}

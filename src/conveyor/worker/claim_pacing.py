"""When a worker claims: a busy one when its claim is worth the round trip, an idle one
after a wake-up or its poll interval (`idle_wait`).

A claim costs a round trip to the server however few jobs it asks for. A worker
that claims as soon as one slot frees up, while its other jobs still run, pays
that round trip for a handful of jobs: over a 5 ms link a worker at `-c 200` with
sync handlers alternated claims of 190 and 10 jobs, each one a round trip
(benchmarks/delayed_link.py). So while jobs run and fewer slots are free than a
claim may take (`fetch_batch`, at most the worker's concurrency), the worker waits
for more to free up, but never longer than its last claim took: a freed slot then
waits at most one claim's time more than before, which on loopback is a
millisecond or two. An idle worker (nothing running) claims at once, so the
pickup latency does not change.
"""

from __future__ import annotations


class ClaimPacer:
    def __init__(self, slots: int, batch: int) -> None:
        self.full = max(1, min(slots, batch))  # free slots for a claim of the most it takes
        self.last_claim = 0.0  # seconds the last claim took
        self._wait_until: float | None = None

    def wait_before_claiming(self, free: int, running: int, now: float) -> float | None:
        """Seconds to wait for more free slots before claiming (`now` and the answer
        on the event loop's clock), or None: claim now."""
        if running == 0 or free >= self.full:
            self._wait_until = None
            return None
        if self._wait_until is None:
            self._wait_until = now + self.last_claim
        left = self._wait_until - now
        if left <= 0:
            self._wait_until = None
            return None
        return left

    def claimed(self, seconds: float) -> None:
        self.last_claim = seconds


TOKEN_WAIT_MIN = 0.005  # seconds: the shortest wait for a rate limit's next token


def idle_wait(next_token_at: float | None, poll_interval: float, now: float) -> float:
    """How long to wait for a wake-up after a short claim: the poll interval, or
    less when a rate limit held jobs back and its next token is due sooner (then
    the claim that follows gets it; the worker does not poll in between). Never
    under TOKEN_WAIT_MIN: at high rates a claim takes the tokens of that time."""
    if next_token_at is None:
        return poll_interval
    return min(poll_interval, max(TOKEN_WAIT_MIN, next_token_at - now))

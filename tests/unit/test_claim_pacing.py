"""A busy worker waits for a full claim's worth of free slots, at most as long as its
last claim took; an idle one claims at once (worker/claim_pacing.py)."""

from __future__ import annotations

import pytest

from conveyor.worker.claim_pacing import ClaimPacer


def test_an_idle_worker_or_a_full_claims_worth_of_free_slots_claims_at_once() -> None:
    pacer = ClaimPacer(slots=200, batch=500)
    pacer.claimed(0.010)
    assert pacer.full == 200  # at most the concurrency
    assert pacer.wait_before_claiming(free=3, running=0, now=1.0) is None
    assert pacer.wait_before_claiming(free=200, running=0, now=1.0) is None
    assert ClaimPacer(slots=200, batch=50).wait_before_claiming(free=50, running=150,
                                                                now=1.0) is None


def test_a_busy_worker_waits_at_most_its_last_claims_time_from_the_first_free_slot() -> None:
    pacer = ClaimPacer(slots=200, batch=200)
    pacer.claimed(0.010)
    assert pacer.wait_before_claiming(free=10, running=190, now=5.000) == pytest.approx(0.010)
    assert pacer.wait_before_claiming(free=40, running=160, now=5.004) == pytest.approx(0.006)
    assert pacer.wait_before_claiming(free=60, running=140, now=5.010) is None  # time is up
    # The next wait starts afresh, from the claim's own time.
    pacer.claimed(0.002)
    assert pacer.wait_before_claiming(free=1, running=199, now=6.000) == pytest.approx(0.002)
    assert pacer.wait_before_claiming(free=200, running=0, now=6.001) is None
    assert pacer.wait_before_claiming(free=1, running=199, now=7.000) == pytest.approx(0.002)


def test_before_any_claim_there_is_nothing_to_wait_for() -> None:
    pacer = ClaimPacer(slots=10, batch=200)
    assert pacer.wait_before_claiming(free=1, running=9, now=0.0) is None

"""QueuePlan: the one place a worker's queue list becomes the quotas of its claims."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.backends.claiming import QueuePlan, claim_in_passes, parse_queues
from conveyor.backends.params import ClaimRequest, QueueQuota


def test_strict_order_gives_every_queue_the_whole_claim() -> None:
    plan = parse_queues("critical,default,bulk")
    assert plan.weights is None
    assert plan.quotas(7) == (
        QueueQuota("critical", 7),
        QueueQuota("default", 7),
        QueueQuota("bulk", 7),
    )


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 200])
def test_weighted_quotas_follow_the_weights_exactly_over_many_claims(limit: int) -> None:
    plan = parse_queues("critical=6,default=3,bulk=1")
    granted: Counter[str] = Counter()
    for _ in range(1000):
        quotas = plan.quotas(limit)
        assert sum(q.quota for q in quotas) == limit
        granted.update({q.name: q.quota for q in quotas})
    total = 1000 * limit
    assert granted == {"critical": total * 6 // 10, "default": total * 3 // 10, "bulk": total // 10}


def test_claims_of_one_rotate_smoothly() -> None:
    plan = QueuePlan(["a", "b"], weights=[1, 1])
    firsts = [next(q.name for q in plan.quotas(1) if q.quota) for _ in range(6)]
    assert firsts == ["a", "b", "a", "b", "a", "b"]


def test_the_two_passes() -> None:
    stock = {"a": 0, "b": 10, "c": 1}
    asked: list[tuple[str, int]] = []

    def take(queue: str, n: int) -> list[str]:
        asked.append((queue, n))
        got = min(n, stock[queue])
        stock[queue] -= got
        return [queue] * got

    request = ClaimRequest((QueueQuota("a", 3), QueueQuota("b", 2), QueueQuota("c", 1)), 6, "w", 1)
    assert claim_in_passes(request, take) == ["b", "b", "c", "b", "b", "b"]
    # a came up short, so it is not asked again; b and c gave their whole quotas, and b
    # fills the claim in the second pass before c's turn comes.
    assert asked == [("a", 3), ("b", 2), ("c", 1), ("b", 3)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no queue"),
        ("a,a", "listed twice"),
        ("a=1,b", "every queue a weight or none"),
        ("a=x", "not a number"),
        ("a=0", "positive"),
        ("a=-1,b=2", "positive"),
        ("a=inf", "positive"),
    ],
)
def test_bad_queue_specs_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_queues(spec)


def test_a_worker_plan_shares_its_slots_by_weight() -> None:
    plan = QueuePlan(["critical", "default", "bulk"], weights=[6, 3, 1], slots=10)
    first = {q.name: q.quota for q in plan.quotas(10, running={})}
    assert first == {"critical": 6, "default": 3, "bulk": 1}
    # A freed slot goes back to the queue furthest below its share of the slots,
    # whatever the claims so far: here bulk's slow jobs hold its one slot, so a slot
    # freed by critical goes to critical.
    refill = {
        q.name: q.quota for q in plan.quotas(1, running={"critical": 5, "default": 3, "bulk": 1})
    }
    assert refill == {"critical": 1, "default": 0, "bulk": 0}


def test_a_borrower_never_takes_the_slot_kept_for_each_other_queue() -> None:
    plan = QueuePlan(["critical", "default", "bulk"], weights=[6, 3, 1], slots=10)
    stock = {"critical": 0, "default": 0, "bulk": 1000}  # only bulk has work

    def take(queue: str, n: int) -> list[str]:
        got = min(n, stock[queue])
        stock[queue] -= got
        return [queue] * got

    claimed = claim_in_passes(plan.request(10, "w", 1, running={}), take)
    assert claimed == ["bulk"] * 8  # one slot each stays free for critical and default
    # With 8 bulk jobs running, a claim of the 2 free slots takes no more bulk.
    assert claim_in_passes(plan.request(2, "w", 1, running={"bulk": 8}), take) == []
    stock["critical"] = 5
    assert claim_in_passes(plan.request(2, "w", 1, running={"bulk": 8}), take) == ["critical"] * 2


def test_a_queue_may_always_fill_its_own_share() -> None:
    # Two slots, three queues: no slot can be kept for every other queue, and each
    # queue may still use at least its own share (rounded up).
    plan = QueuePlan(["a", "b", "c"], weights=[2, 1, 1], slots=2)
    assert {q.name: q.ceiling for q in plan.quotas(2, running={})} == {"a": 1, "b": 1, "c": 1}


def test_ceilings_bound_both_passes() -> None:
    asked: list[tuple[str, int]] = []

    def take(queue: str, n: int) -> list[str]:
        asked.append((queue, n))
        return [queue] * n  # every queue has plenty

    request = ClaimRequest(
        (QueueQuota("a", 2, ceiling=3), QueueQuota("b", 0, ceiling=1)), 6, "w", 1
    )
    assert claim_in_passes(request, take) == ["a", "a", "a", "b"]
    assert asked == [("a", 2), ("a", 1), ("b", 1)]


def test_the_plan_spells_itself_as_the_command_line_does() -> None:
    assert parse_queues("critical=6, default=3,bulk=1.5").spec == "critical=6,default=3,bulk=1.5"
    assert parse_queues(["a", "b"]).spec == "a,b"


@settings(max_examples=300, deadline=None)
@given(
    weights=st.lists(
        st.sampled_from([1.0, 2.0, 3.0, 0.5, 6.0, 1 / 3, 7.25, 1e-3, 1e6]), min_size=1, max_size=6
    ),
    slots=st.integers(1, 300),
    data=st.data(),
)
def test_each_free_slot_goes_to_the_queue_furthest_below_its_share(
    weights: list[float], slots: int, data: st.DataObject
) -> None:
    """The slot shares, against the rule written out one slot at a time: the queue
    furthest below its share of the slots, then the heavier, then the earlier."""
    names = [f"q{i}" for i in range(len(weights))]
    plan = QueuePlan(names, weights, slots=slots)
    running = {name: data.draw(st.integers(0, slots)) for name in names}
    limit = data.draw(st.integers(0, slots))
    shares = [slots * w / sum(weights) for w in weights]
    granted = [0] * len(names)
    for _ in range(limit):
        i = max(
            range(len(names)),
            key=lambda i: (shares[i] - running[names[i]] - granted[i], weights[i], -i),
        )
        granted[i] += 1
    quotas = {q.name: q for q in plan.quotas(limit, running)}
    assert [quotas[name].quota for name in names] == [
        min(g, quotas[name].ceiling or 0) for g, name in zip(granted, names, strict=True)
    ]


@pytest.mark.parametrize(
    ("weights", "running", "first"),
    [
        ([1, 3], {"q0": 0, "q1": 2}, "q1"),  # both one slot below their share: the heavier
        ([2, 2], {"q0": 1, "q1": 1}, "q0"),  # and with equal weights, the earlier
    ],
)
def test_a_slot_between_queues_equally_far_below_their_shares(
    weights: list[float], running: dict[str, int], first: str
) -> None:
    plan = QueuePlan(["q0", "q1"], weights, slots=4)
    assert {q.name: q.quota for q in plan.quotas(1, running)}[first] == 1

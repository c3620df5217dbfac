"""The fairness rule in Python (conveyor.rules.fairness): what memory and SQLite assign, and
what PostgreSQL's batch reservation is handed out by."""

from __future__ import annotations

import pytest

from conveyor.model.errors import InvalidJob
from conveyor.model.job import NewJob
from conveyor.model.validation import check_job
from conveyor.rules.fairness import VtimeAssigner, as_vtime, next_vtime, spread, vtime_step


def job(key: str | None, queue: str = "q", weight: float | None = None) -> NewJob:
    return NewJob(
        id="j", task="t", queue=queue, payload="{}", fairness_key=key, fairness_weight=weight
    )


def test_a_step_is_a_thousand_units_over_the_weight() -> None:
    assert [vtime_step(w) for w in (None, 1.0, 3.0, 0.5, 1000.0, 0.01)] == [
        1000,
        1000,
        333,
        2000,
        1,
        100000,
    ]


def test_a_key_starts_at_the_queue_present_and_never_before_its_last() -> None:
    assert next_vtime(0, 5000, 1000) == 6000  # idle key: no credit for unused turns
    assert next_vtime(9000, 5000, 1000) == 10000  # a backlog: after its last job


def test_the_assigner_reads_each_row_once_and_collects_the_new_last() -> None:
    reads: list[object] = []
    assigner = VtimeAssigner(
        # Ignored for mypy: append() in a lambda for its effect
        lambda q, k: reads.append((q, k)) or 4000,  # type: ignore[func-returns-value]
        lambda q: reads.append(q) or 1000,  # type: ignore[func-returns-value]
    )
    got = [assigner.assign(j) for j in (job("a"), job(None), job("a"), job("b", weight=2.0))]
    assert got == [5000, None, 6000, 4500]
    assert reads == [("q", "a"), "q", ("q", "b")]
    assert assigner.last == {("q", "a"): 6000, ("q", "b"): 4500}


def test_spread_hands_a_reserved_batch_out_in_order() -> None:
    jobs = [job("a"), job(None), job("b"), job("a", weight=2.0), job("a", queue="r")]
    # The store reserved a's 1000 + 500 ending at 7500, b's 1000 at 3000, r/a's at 1000.
    assert spread(jobs, {("q", "a"): 7500, ("q", "b"): 3000, ("r", "a"): 1000}) == [
        7000,
        0,
        3000,
        7500,
        1000,
    ]


def test_a_stored_vtime_that_is_not_a_whole_number_counts_as_0() -> None:
    assert [as_vtime(v) for v in (12, "12", 1.5, None, -1, 2**60)] == [12, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("weight", [0, 0.001, 1001, float("nan"), True, "2"])
def test_a_weight_out_of_range_is_refused(weight: object) -> None:
    with pytest.raises(InvalidJob, match="fairness_weight"):
        check_job(job("a", weight=weight))  # type: ignore[arg-type]


def test_a_whole_weight_is_taken_as_a_float_and_a_bad_key_refused() -> None:
    assert check_job(job("a", weight=2)).fairness_weight == 2.0  # type: ignore[arg-type]
    with pytest.raises(InvalidJob, match="fairness_key"):
        check_job(job("bad\x00key"))

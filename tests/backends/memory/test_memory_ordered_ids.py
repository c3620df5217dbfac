"""The memory store's ordered index (backends/memory/ordered_ids.py) against a plain model:
whatever the sequence of filings, re-filings and removals, `first` and `up_to` give
what sorting the live entries gives, and leave them in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from conveyor.backends.memory.ordered_ids import OrderedIds

ids = st.sampled_from([f"j{n}" for n in range(12)])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("set"), ids, st.integers(0, 5)),
        st.tuples(st.just("pop"), ids, st.just(0)),
        st.tuples(st.just("first"), ids, st.integers(0, 14)),
        st.tuples(st.just("up_to"), ids, st.integers(-1, 6)),
    ),
    max_size=200,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_reads_match_sorting_the_live_entries(script: list[tuple[str, str, int]]) -> None:
    index: OrderedIds[float] = OrderedIds()
    model: dict[str, float] = {}
    for verb, job_id, n in script:
        in_order = [i for o, i in sorted((o, i) for i, o in model.items())]
        if verb == "set":
            index[job_id] = model[job_id] = float(n)
        elif verb == "pop":
            assert index.pop(job_id, None) == model.pop(job_id, None)
        elif verb == "first":
            assert index.first(n) == in_order[:n]
        else:
            assert index.up_to(float(n)) == [i for i in in_order if model[i] <= n]
        assert dict(index) == model


def test_entries_of_removed_ids_do_not_pile_up() -> None:
    index: OrderedIds[float] = OrderedIds()
    for n in range(10_000):
        index[f"j{n}"] = float(n)
        index.pop(f"j{n}")
    index["last"] = 1.0
    assert index.first(5) == ["last"]
    assert len(index._heap) <= 2 * len(index) + 65

"""The bounds an adaptive task is held to against a downstream of fixed capacity
(docs/downstreams.md): after the warm-up, throughput within 20 % of the capacity and
fewer than 5 % of the calls refused. Shared by the in-process test on every backend
and the real-process one."""

from __future__ import annotations

from collections.abc import Sequence


def assert_near_capacity(
    served: Sequence[float],
    refused: Sequence[float],
    begin: float,
    seconds: float,
    calls_per_second: float,
) -> None:
    """`served` and `refused`: when each call was answered (monotonic seconds); the
    window measured is `seconds` from `begin`."""
    end = begin + seconds
    ok = sum(begin <= t < end for t in served)
    no = sum(begin <= t < end for t in refused)
    capacity = calls_per_second * seconds
    assert ok >= 0.8 * capacity, (ok, capacity, no)
    assert no < 0.05 * (ok + no), (ok, no)

"""A worker process's collector: paused while it starts, then raised thresholds and the
start's objects frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from conveyor.worker.pool.process_start import MIDDLE_THRESHOLD, YOUNG_THRESHOLD, starting


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_raises_the_thresholds_and_freezes_what_exists(restored_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    with starting():
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_threshold() == (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, 10)
    assert gc.get_freeze_count() > 0


def test_keeps_higher_thresholds_the_app_set(restored_gc: None) -> None:
    gc.set_threshold(50_000, 100, 20)
    with starting():
        pass
    assert gc.get_threshold() == (50_000, 100, 20)

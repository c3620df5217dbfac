"""examples/train_model.py: a run resumed from any epoch's checkpoint (through JSON,
as the backend stores it) ends with exactly the weights of an uninterrupted run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def train_model(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(EXAMPLES))
    try:
        # Ignored for mypy: examples/ is on sys.path here
        import train_model as module  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


@pytest.mark.parametrize("stop_at", [1, 5, 9])
def test_resume_from_checkpoint_matches_a_straight_run(train_model, stop_at: int) -> None:  # type: ignore[no-untyped-def]
    straight = train_model.train(10)
    checkpoints: list[str] = []
    train_model.train(stop_at, after_epoch=lambda s: checkpoints.append(json.dumps(s)))
    resumed = train_model.train(10, json.loads(checkpoints[-1]))
    assert resumed == straight and len(checkpoints) == stop_at
    assert straight["loss"] < train_model.train(1)["loss"] / 10  # it does learn

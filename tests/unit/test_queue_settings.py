"""Per-queue settings (conveyor.queues): checked when declared, applied at enqueue."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.errors import ConfigurationError, InvalidJob
from conveyor.job import NewJob
from conveyor.validation import check_job


def test_aging_is_declared_per_queue_and_stored_in_each_job(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    assert app.queue("bulk", aging=timedelta(minutes=1)).aging == 60.0

    @app.task(queue="bulk")
    def export(n: int) -> None: ...

    assert app.queues.apply([export.message(1)])[0].aging == 60.0
    own = NewJob(id="x", task="t", queue="bulk", payload="{}", aging=5.0)
    assert app.queues.apply([own]) == [own]  # a job's own aging wins
    app.queue("bulk")  # declared again without aging: none from now on
    assert app.queues.apply([export.message(1)])[0].aging is None


@pytest.mark.parametrize("aging", [0, -1, float("nan"), float("inf"), "1m", 1e11])
def test_a_bad_aging_is_refused_when_declared(tmp_path: Path, aging: object) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match="queue 'bulk': aging"):
        app.queue("bulk", aging=aging)  # type: ignore[arg-type]


def test_a_job_built_by_hand_with_a_bad_aging_is_refused() -> None:
    with pytest.raises(InvalidJob, match="aging"):
        check_job(NewJob(id="x", task="t", queue="q", payload="{}", aging=-3.0))

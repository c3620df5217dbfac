"""Per-queue settings (conveyor.rules.queues): checked when declared, applied at enqueue."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.model.errors import ConfigurationError, InvalidJob
from conveyor.model.job import NewJob
from conveyor.model.validation import check_job


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


def test_a_bound_goes_with_each_job_of_its_queue(tmp_path: Path) -> None:
    from conveyor.model.job import QueueBound

    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    app.queue("a", max_waiting=5)
    app.queue("b", max_waiting=7, on_full="shed_oldest")
    app.queue("c", max_waiting=9, on_full="block", block_timeout=timedelta(seconds=2))
    jobs = app.queues.apply([NewJob(id=q, task="t", queue=q, payload="{}") for q in "abcd"])
    assert [job.bound for job in jobs] == [
        QueueBound(5),
        QueueBound(7, shed_oldest=True),
        QueueBound(9),
        None,
    ]
    assert app.queues.get("c").block_timeout == 2.0
    assert app.queues.blocks(jobs[2:3]) and not app.queues.blocks(jobs[:2])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_waiting": 0}, "max_waiting"),
        ({"max_waiting": 2.5}, "max_waiting"),
        ({"max_waiting": True}, "max_waiting"),
        ({"on_full": "drop"}, "on_full"),
        ({"block_timeout": -1}, "block_timeout"),
    ],
)
def test_bad_bounds_are_refused_when_declared(
    tmp_path: Path, options: dict[str, object], message: str
) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match=f"queue 'q': {message}"):
        app.queue("q", **options)  # type: ignore[arg-type]

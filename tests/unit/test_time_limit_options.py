"""Task options for time limits: `timeout=` is the soft limit; the hard one must be longer."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.model.errors import (
    ConfigurationError,
    HardTimeLimitExceeded,
    JobTimeout,
    SoftTimeLimitExceeded,
)


def test_limit_options_are_checked(tmp_path: Path) -> None:
    app = Conveyor(f"sqlite:///{tmp_path / 'jobs.db'}")
    with pytest.raises(ConfigurationError, match="must be longer"):
        app.task(name="a", timeout=5, hard_time_limit=5)(lambda: None)
    with pytest.raises(TypeError, match="soft_time_limit.*it is timeout= now"):
        app.task(name="b", soft_time_limit=2)(lambda: None)  # type: ignore[call-overload]
    task = app.task(name="c", timeout=2, hard_time_limit=3)(lambda: None)
    assert (task.defaults.timeout, task.defaults.hard_time_limit) == (2.0, 3.0)
    assert issubclass(SoftTimeLimitExceeded, Exception)
    assert issubclass(HardTimeLimitExceeded, Exception)
    assert issubclass(SoftTimeLimitExceeded, JobTimeout) and issubclass(
        HardTimeLimitExceeded, JobTimeout
    )
    with pytest.raises(ConfigurationError, match="positive"):
        app.task(name="d", hard_time_limit=0)(lambda: None)

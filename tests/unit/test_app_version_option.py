"""The application's version: given to the app or by $CONVEYOR_APP_VERSION, kept in
each failed attempt's record, and read from records written before it existed."""

from __future__ import annotations

from pathlib import Path

import pytest

from conveyor import Conveyor
from conveyor.model.errors import ConfigurationError
from conveyor.model.job import AttemptError


def test_version_given_wins_over_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    monkeypatch.delenv("CONVEYOR_APP_VERSION", raising=False)
    assert Conveyor(url).version == ""
    monkeypatch.setenv("CONVEYOR_APP_VERSION", "2026.03.1+g1a2b3c")
    assert Conveyor(url).version == "2026.03.1+g1a2b3c"
    assert Conveyor(url, version="1.4.2").version == "1.4.2"


def test_a_version_that_cannot_be_stored_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    with pytest.raises(ConfigurationError, match="version=.*control characters"):
        Conveyor(url, version="1.4\n2")
    monkeypatch.setenv("CONVEYOR_APP_VERSION", "v" * 300)
    with pytest.raises(ConfigurationError, match=r"\$CONVEYOR_APP_VERSION.*255"):
        Conveyor(url)


def test_error_records_keep_the_app_version_and_old_ones_read_without_it() -> None:
    error = AttemptError(
        attempt=2, at=1.0, type="KeyError", message="'sku'", version="0.1.0", app_version="1.4.2"
    )
    assert AttemptError.from_dict(error.to_dict()) == error
    old = {
        "attempt": 1,
        "at": 1.0,
        "type": "KeyError",
        "message": "'sku'",
        "traceback": "",
        "worker_id": "w1",
        "host": "h1",
        "version": "0.1.0",
    }
    assert AttemptError.from_dict(old).app_version == ""

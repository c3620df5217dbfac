"""Several processes or threads opening a brand-new SQLite file at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from conveyor.backends.sqlite.connection import SqliteConnection


def test_concurrent_first_opens_of_a_new_file_all_succeed(tmp_path: Path) -> None:
    # Switching a new file to WAL is not covered by SQLite's busy handler; before the
    # retry in _use_wal, about one round in six failed with "database is locked".
    failures: list[BaseException] = []
    for round_ in range(40):
        path = str(tmp_path / f"fresh-{round_}.db")

        def open_and_migrate(path: str = path) -> None:
            try:
                connection = SqliteConnection(path, time.time)
                connection.migrate()
                connection.close()
            except BaseException as exc:
                failures.append(exc)

        threads = [threading.Thread(target=open_and_migrate) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert failures == []

"""SQLite: the claim walks the claim index in claim order, without sorting, whatever
mix of jobs with and without priority aging a queue holds (migration 4 and the
claim_order fragment of queries.sql must say the same, word for word)."""

from __future__ import annotations

from pathlib import Path

from conveyor.backends.sqlite.store import Q, SqliteStore
from conveyor.job import NewJob


def test_the_claim_reads_its_index_in_order(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "jobs.db"), lambda: 1000.0)
    store.migrate()
    store.enqueue_jobs([NewJob(id=f"j{n}", task="t", queue="q", payload="{}", priority=n % 3,
                               aging=60.0 if n % 2 else None) for n in range(200)])
    store.conn.execute("ANALYZE")
    plan = [row[-1] for row in store.conn.execute(
        "EXPLAIN QUERY PLAN " + Q["claim_jobs"],
        {"queue": "q", "limit": 10, "now": 1000.0, "lease_expires_at": 1030.0,
         "worker_id": "w"})]
    assert any("USING INDEX conveyor_jobs_claim" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan  # no sort of the queue
    store.close()

-- Priority aging (docs/flow-control.md): a job enqueued to a queue with aging A keeps
-- A (seconds of waiting worth one priority level). Its claim order is then a static
-- key, run_at - priority * A ascending (the same order as priority + wait / A
-- descending, at any moment), so aging needs no scan: the claim index orders by it.
-- Jobs without aging keep priority DESC, run_at; an aging job ranks with priority 0.
-- The key is clamped to 1970..5138 as a run_at is (Redis writes it as 17 digits of
-- microseconds). The two expressions are those of the claim_order fragment of
-- queries.sql, word for word: tests/backends/sqlite/test_sqlite_claim_plan.py checks
-- that the claim walks this index without sorting.
ALTER TABLE conveyor_jobs ADD COLUMN aging REAL
    CHECK (aging > 0 AND aging <= 10000000000);  -- validation.DURATION_MAX

DROP INDEX conveyor_jobs_claim;

CREATE INDEX conveyor_jobs_claim ON conveyor_jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available';

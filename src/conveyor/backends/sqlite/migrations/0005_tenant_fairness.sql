-- Tenant fairness (docs/flow-control.md, conveyor.rules.fairness): a job with a fairness key
-- gets a virtual time at enqueue, max(its key's last, the queue's) + 1000 / weight, and
-- the claim orders each priority level by it. Jobs without a key keep 0, so they rank
-- first in their level, in the order they had before, and pay nothing (the column's
-- default; no insert of theirs names it). The claim index's expressions are those of
-- the claim_order fragment of queries.sql, word for word:
-- tests/backends/sqlite/test_sqlite_claim_plan.py checks that the claim walks it.
ALTER TABLE conveyor_jobs ADD COLUMN fair_vtime INTEGER NOT NULL DEFAULT 0;

-- The vtime of each (queue, key)'s last enqueued job. A row at or below its queue's
-- vtime says nothing more than no row: such rows may be deleted at any time.
CREATE TABLE conveyor_fair_keys (
    queue TEXT NOT NULL,
    key TEXT NOT NULL,
    last_vtime INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- The vtime each queue's claims reached (the largest they claimed).
CREATE TABLE conveyor_fair_queues (
    queue TEXT PRIMARY KEY,
    vtime INTEGER NOT NULL
) WITHOUT ROWID;

DROP INDEX conveyor_jobs_claim;

CREATE INDEX conveyor_jobs_claim ON conveyor_jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available';

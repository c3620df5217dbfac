-- Tenant fairness (docs/flow-control.md, conveyor.rules.fairness): a job with a fairness key
-- gets a virtual time at enqueue, max(its key's last, the queue's) + 1000 / weight, and
-- the claim orders each priority level by it. Jobs without a key keep 0, so they rank
-- first in their level, in the order they had before, and pay nothing (the column's
-- default: adding it rewrites no row). The claim index's expressions are those of the
-- claim_order fragment of queries.sql, word for word: tests/backends/postgres/
-- test_pg_plans.py checks that the claim walks this index without sorting.
ALTER TABLE jobs ADD COLUMN fair_vtime bigint NOT NULL DEFAULT 0;

-- The vtime of each (queue, key)'s last enqueued job (assign_fair_vtimes). A row at or
-- below its queue's vtime says nothing more than no row: such rows may be deleted.
CREATE TABLE fair_keys (
    queue text NOT NULL,
    key text NOT NULL,
    last_vtime bigint NOT NULL,
    PRIMARY KEY (queue, key)
);

-- The vtime each queue's claims reached: the largest they claimed (claim_jobs).
CREATE TABLE fair_queues (
    queue text PRIMARY KEY,
    vtime bigint NOT NULL
);

DROP INDEX jobs_claim;

CREATE INDEX jobs_claim ON jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available';

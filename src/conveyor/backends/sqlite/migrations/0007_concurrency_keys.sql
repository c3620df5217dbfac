-- Per-key concurrency (docs/flow-control.md, conveyor.rules.concurrency): at most
-- concurrency_limit running jobs per concurrency_key. A key's slots are held by its
-- running jobs and by its available jobs that are not parked; every other available
-- job of the key is parked: out of the claim index, so a claim never walks a blocked
-- key's backlog. The claim itself is unchanged but for "AND parked = 0": a claimed
-- job keeps the slot it held. The trigger below does the rest, inside the write that
-- moves a keyed job (SQLite has one writer, so the count it reads is exact).
ALTER TABLE conveyor_jobs ADD COLUMN concurrency_key TEXT;
ALTER TABLE conveyor_jobs ADD COLUMN concurrency_limit INTEGER
    CHECK (concurrency_limit >= 1);
ALTER TABLE conveyor_jobs ADD COLUMN parked INTEGER NOT NULL DEFAULT 0;

DROP INDEX conveyor_jobs_claim;

CREATE INDEX conveyor_jobs_claim ON conveyor_jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND parked = 0;

-- A key's parked jobs in claim order (priority, run_at, insertion: the claim_order
-- fragment's expressions but the fairness vtime), the next to unpark first.
CREATE INDEX conveyor_jobs_parked ON conveyor_jobs (
    concurrency_key,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND parked = 1;

-- The jobs holding a key's slots: counting them reads at most the limit's entries.
-- Jobs without a key are not in it (so they pay nothing for it).
CREATE INDEX conveyor_jobs_key_holders ON conveyor_jobs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND state IN ('running', 'available') AND parked = 0;

-- The one rebalance of a key: a row written here (by the triggers below) unparks the
-- key's next parked jobs, in claim order, while fewer jobs hold a slot than the next
-- one's limit; the table stays empty.
CREATE TABLE conveyor_key_moves (concurrency_key TEXT NOT NULL);

CREATE TRIGGER conveyor_key_rebalance AFTER INSERT ON conveyor_key_moves
BEGIN
    UPDATE conveyor_jobs SET parked = 0
    WHERE seq IN (
        SELECT seq FROM conveyor_jobs
        WHERE concurrency_key = NEW.concurrency_key AND state = 'available' AND parked = 1
        ORDER BY (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
                 (CASE WHEN aging IS NULL THEN run_at
                       ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
                 seq
        LIMIT max(0, coalesce((
            SELECT concurrency_limit FROM conveyor_jobs
            WHERE concurrency_key = NEW.concurrency_key AND state = 'available' AND parked = 1
            ORDER BY (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
                     (CASE WHEN aging IS NULL THEN run_at
                           ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
                     seq
            LIMIT 1), 0) - (
            SELECT count(*) FROM conveyor_jobs
            WHERE concurrency_key = NEW.concurrency_key
              AND state IN ('running', 'available') AND parked = 0)));
    DELETE FROM conveyor_key_moves;
END;

-- A keyed job entering available is parked; then, as after any other move of a keyed
-- job but the claim (which keeps its slot), its key is rebalanced.
CREATE TRIGGER conveyor_jobs_key_moved AFTER UPDATE OF state ON conveyor_jobs
WHEN NEW.concurrency_key IS NOT NULL AND NEW.state IS NOT OLD.state
     AND NOT (OLD.state = 'available' AND NEW.state = 'running')
BEGIN
    UPDATE conveyor_jobs SET parked = 1 WHERE seq = NEW.seq AND NEW.state = 'available';
    INSERT INTO conveyor_key_moves VALUES (NEW.concurrency_key);
END;

CREATE TRIGGER conveyor_jobs_key_enqueued AFTER INSERT ON conveyor_jobs
WHEN NEW.concurrency_key IS NOT NULL AND NEW.state = 'available'
BEGIN
    UPDATE conveyor_jobs SET parked = 1 WHERE seq = NEW.seq;
    INSERT INTO conveyor_key_moves VALUES (NEW.concurrency_key);
END;

-- A deleted job that held a slot (a raw delete: the verbs delete finished jobs only).
CREATE TRIGGER conveyor_jobs_key_deleted AFTER DELETE ON conveyor_jobs
WHEN OLD.concurrency_key IS NOT NULL AND OLD.state IN ('running', 'available')
BEGIN
    INSERT INTO conveyor_key_moves VALUES (OLD.concurrency_key);
END;

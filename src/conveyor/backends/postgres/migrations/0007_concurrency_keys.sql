-- Per-key concurrency (docs/flow-control.md, conveyor.rules.concurrency): at most
-- concurrency_limit running jobs per concurrency_key. A key's slots are held by its
-- running jobs and by its available jobs that are not parked; every other available
-- job of the key is parked: out of the claim index, so a claim never walks a blocked
-- key's backlog. The claim itself is unchanged but for "AND NOT parked": a claimed
-- job keeps the slot it held. The triggers below do the rest, inside the statement
-- that moves a keyed job; jobs without a key never fire them (WHEN clauses).
ALTER TABLE jobs ADD COLUMN concurrency_key text;
ALTER TABLE jobs ADD COLUMN concurrency_limit integer CHECK (concurrency_limit >= 1);
ALTER TABLE jobs ADD COLUMN parked boolean NOT NULL DEFAULT false;

DROP INDEX jobs_claim;

CREATE INDEX jobs_claim ON jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND NOT parked;

-- A key's parked jobs in claim order (priority, run_at, insertion: the claim_order
-- fragment's expressions but the fairness vtime), the next to unpark first.
CREATE INDEX jobs_parked ON jobs (
    concurrency_key,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND parked;

-- The jobs holding a key's slots: counting them reads at most the limit's entries.
-- Jobs without a key are not in it (so they pay nothing for it).
CREATE INDEX jobs_key_holders ON jobs (concurrency_key)
    WHERE concurrency_key IS NOT NULL AND state IN ('running', 'available') AND NOT parked;

-- A keyed job entering available (inserted so, or moved there from another state) is
-- parked; the rebalance below unparks it when its key has room.
CREATE FUNCTION park_keyed_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR OLD.state IS DISTINCT FROM 'available' THEN
        NEW.parked := true;
    END IF;
    RETURN NEW;
END $$;

-- The rebalance of a key, after any move of a keyed job but the claim (which keeps
-- its slot): unpark the key's next parked jobs, in claim order, while fewer jobs hold
-- a slot than the next one's limit. Counting inside the moving statement would not
-- be safe against a concurrent mover of the same key (each statement's snapshot is
-- taken at its start), so every rebalance first takes one transaction-level lock per
-- schema, then counts in statements of its own: a volatile function's statements
-- each take a new snapshot under READ COMMITTED, and so see every rebalance that
-- committed before the lock was granted. One lock for every key, not one per key:
-- a batch settling jobs of several keys fires its rows' triggers in no set order,
-- and per-key locks taken in that order could deadlock two batches. Parked rows
-- another transaction holds locked (it is moving them) are skipped: its own
-- rebalance follows. search_path is the migration's, so the trigger finds the
-- tables from a caller's own connection too (transactional enqueue).
CREATE FUNCTION rebalance_key() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    k text := CASE WHEN TG_OP = 'DELETE' THEN OLD.concurrency_key ELSE NEW.concurrency_key END;
    head_limit integer;
    holding bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtextextended('conveyor:slots:' || current_schema(), 0));
    SELECT concurrency_limit INTO head_limit FROM jobs
    WHERE concurrency_key = k AND state = 'available' AND parked
    ORDER BY (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
             (CASE WHEN aging IS NULL THEN run_at
                   ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
             seq
    LIMIT 1;
    IF head_limit IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO holding FROM jobs
    WHERE concurrency_key = k AND state IN ('running', 'available') AND NOT parked;
    IF holding < head_limit THEN
        UPDATE jobs SET parked = false
        WHERE seq = ANY (ARRAY(
            SELECT seq FROM jobs
            WHERE concurrency_key = k AND state = 'available' AND parked
            ORDER BY (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
                     (CASE WHEN aging IS NULL THEN run_at
                           ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
                     seq
            LIMIT head_limit - holding
            FOR UPDATE SKIP LOCKED));
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_key_parked BEFORE INSERT OR UPDATE OF state ON jobs
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL AND NEW.state = 'available')
EXECUTE FUNCTION park_keyed_job();

CREATE TRIGGER jobs_key_enqueued AFTER INSERT ON jobs
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL AND NEW.state = 'available')
EXECUTE FUNCTION rebalance_key();

CREATE TRIGGER jobs_key_moved AFTER UPDATE OF state ON jobs
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state
      AND NOT (OLD.state = 'available' AND NEW.state = 'running'))
EXECUTE FUNCTION rebalance_key();

CREATE TRIGGER jobs_key_deleted AFTER DELETE ON jobs
FOR EACH ROW
WHEN (OLD.concurrency_key IS NOT NULL AND OLD.state IN ('running', 'available'))
EXECUTE FUNCTION rebalance_key();

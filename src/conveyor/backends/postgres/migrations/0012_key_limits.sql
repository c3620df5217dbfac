-- Adaptive concurrency (conveyor.rules.adaptive, docs/downstreams.md): a concurrency key's
-- limit set by its task's controller, in place of the concurrency_limit its jobs were
-- enqueued with. The rebalance reads it first; a key without a row keeps its head
-- job's own limit. Writing a row rebalances the key at once (the trigger at the end,
-- which runs the one rebalance, under its lock: the row has the column it reads), so a
-- raised limit unparks the key's next jobs in the same transaction; a lowered one
-- takes no slot back and gives none until fewer than the limit hold one.
CREATE TABLE key_limits (
    concurrency_key text PRIMARY KEY,
    key_limit integer NOT NULL CHECK (key_limit >= 1)
);

-- Migration 7's rebalance, with the key's set limit ahead of its head job's.
CREATE OR REPLACE FUNCTION rebalance_key() RETURNS trigger LANGUAGE plpgsql
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
    SELECT coalesce((SELECT key_limit FROM key_limits WHERE concurrency_key = k), head_limit)
    INTO head_limit;
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

CREATE TRIGGER key_limits_changed AFTER INSERT OR UPDATE OR DELETE ON key_limits
FOR EACH ROW
EXECUTE FUNCTION rebalance_key();

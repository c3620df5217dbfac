-- Adaptive concurrency (conveyor.rules.adaptive, docs/downstreams.md): a concurrency key's
-- limit set by its task's controller, in place of the concurrency_limit its jobs were
-- enqueued with. The rebalance reads it first; a key without a row keeps its head
-- job's own limit. Writing a row rebalances the key at once (the trigger at the end),
-- so a raised limit unparks the key's next jobs in the same transaction; a lowered
-- one takes no slot back and gives none until fewer than the limit hold one.
CREATE TABLE conveyor_key_limits (
    concurrency_key TEXT PRIMARY KEY,
    key_limit INTEGER NOT NULL CHECK (key_limit >= 1)
) WITHOUT ROWID;

DROP TRIGGER conveyor_key_rebalance;

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
            SELECT key_limit FROM conveyor_key_limits
            WHERE concurrency_key = NEW.concurrency_key), (
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

CREATE TRIGGER conveyor_key_limit_set AFTER INSERT ON conveyor_key_limits
BEGIN
    INSERT INTO conveyor_key_moves VALUES (NEW.concurrency_key);
END;

CREATE TRIGGER conveyor_key_limit_changed AFTER UPDATE ON conveyor_key_limits
BEGIN
    INSERT INTO conveyor_key_moves VALUES (NEW.concurrency_key);
END;

CREATE TRIGGER conveyor_key_limit_dropped AFTER DELETE ON conveyor_key_limits
BEGIN
    INSERT INTO conveyor_key_moves VALUES (OLD.concurrency_key);
END;

-- Global rate limits (docs/flow-control.md): a job may name the token bucket its claim
-- spends from (rate_key). A limited job is indexed apart from the others, so that a
-- throttled bucket's backlog is never walked by the claims of other jobs of its queue:
-- conveyor_jobs_claim now holds the available jobs with no bucket (every job as
-- before: the same claim order, the same cost), conveyor_jobs_rate_claim those with
-- one, by bucket. Each available job that is not parked (per-key concurrency) is in exactly one of the two.
ALTER TABLE conveyor_jobs ADD COLUMN rate_key TEXT;

DROP INDEX conveyor_jobs_claim;

CREATE INDEX conveyor_jobs_claim ON conveyor_jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND parked = 0 AND rate_key IS NULL;

CREATE INDEX conveyor_jobs_rate_claim ON conveyor_jobs (
    queue,
    rate_key,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND parked = 0 AND rate_key IS NOT NULL;

-- One token bucket per limit: its tokens as of updated_at. The rate and burst are the
-- claiming worker's declaration, written back by each claim (for operators' eyes).
CREATE TABLE conveyor_rate_buckets (
    name       TEXT PRIMARY KEY,
    tokens     REAL NOT NULL,
    updated_at REAL NOT NULL,
    rate       REAL NOT NULL,
    burst      INTEGER NOT NULL
);

-- Global rate limits (docs/flow-control.md): a job may name the token bucket its claim
-- spends from (rate_key). A limited job is indexed apart from the others, so that a
-- throttled bucket's backlog is never walked by the claims of other jobs of its queue:
-- jobs_claim now holds the available jobs with no bucket (every job as before: the
-- same claim order, the same cost), jobs_rate_claim those with one, by bucket. Each
-- available job that is not parked (per-key concurrency) is in exactly one of the two. The expressions are those of the
-- claim_order fragment of queries.sql, word for word.
ALTER TABLE jobs ADD COLUMN rate_key text;

DROP INDEX jobs_claim;

CREATE INDEX jobs_claim ON jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND NOT parked AND rate_key IS NULL;

CREATE INDEX jobs_rate_claim ON jobs (
    queue,
    rate_key,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available' AND NOT parked AND rate_key IS NOT NULL;

-- One token bucket per limit: its tokens as of updated_at. A claim locks the rows of
-- its buckets (only those), spends them and writes them back; the rate and burst are
-- the claiming worker's declaration, kept for operators' eyes.
CREATE TABLE rate_buckets (
    name       text PRIMARY KEY,
    tokens     double precision NOT NULL,
    updated_at double precision NOT NULL,
    rate       double precision NOT NULL,
    burst      integer NOT NULL
);

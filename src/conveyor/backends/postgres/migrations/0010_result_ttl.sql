-- Results kept for a while (result_ttl, docs/workflows.md#results): a job that
-- completed with a result_ttl stores when its result expires. The prune loop
-- (expire_results) clears the results past it by this partial index, which holds
-- only the results still there to expire: clearing one takes it out, so the loop
-- never walks the completed jobs kept without a TTL, nor those already cleared.
ALTER TABLE jobs ADD COLUMN result_expires_at float8;

CREATE INDEX jobs_result_expiry ON jobs (result_expires_at)
    WHERE result_expires_at IS NOT NULL AND result IS NOT NULL;

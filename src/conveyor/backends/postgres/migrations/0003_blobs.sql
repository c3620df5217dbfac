-- Arguments and results too big for a job row (the claim-check, conveyor.payloads.claim_check):
-- one row per blob, keyed as conveyor.backends.blobs.blob_key says, with its job's id and the
-- time it was written (application clock) for deleting with the job and the orphan sweep.
CREATE TABLE blobs (
    key        text PRIMARY KEY,
    job_id     text NOT NULL,
    created_at double precision NOT NULL,
    data       bytea NOT NULL
);
CREATE INDEX blobs_job_id ON blobs (job_id);
CREATE INDEX blobs_created_at ON blobs (created_at);

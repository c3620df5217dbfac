-- Conveyor schema for PostgreSQL, version 1.
-- Runs with search_path set to the configured schema (migrate() does SET LOCAL).
-- Times are UTC epoch seconds (double precision), taken from the application's
-- clock and passed as parameters: SQL now() never decides a job's fate, so a
-- test clock (and every worker host) sees one timeline.

CREATE TABLE jobs (
    seq              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- insertion order, for FIFO
    id               text    NOT NULL UNIQUE,
    queue            text    NOT NULL,
    task             text    NOT NULL,
    payload          text    NOT NULL,  -- JSON text exactly as the producer wrote it
    state            text    NOT NULL CHECK (state IN
                        ('scheduled', 'available', 'running', 'retryable', 'completed', 'cancelled', 'dead')),
    priority         integer NOT NULL DEFAULT 0,
    attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer NOT NULL CHECK (max_attempts >= 1),
    run_at           double precision NOT NULL,
    created_at       double precision NOT NULL,
    started_at       double precision,
    finished_at      double precision,
    lease_token      bigint  NOT NULL DEFAULT 0,  -- fencing token: +1 on every claim
    lease_expires_at double precision,
    worker_id        text,
    unique_key       text,
    unique_for       double precision,
    result           text,
    errors           jsonb   NOT NULL DEFAULT '[]'::jsonb,
    checkpoint       text,
    progress         text,
    cancel_requested boolean NOT NULL DEFAULT false,
    timeout          double precision,
    meta             jsonb   NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT jobs_lease_iff_running CHECK ((state = 'running') = (lease_expires_at IS NOT NULL))
);

-- Claim: one queue's available jobs in claim order. Partial, so its size is the
-- number of claimable jobs, whatever the number of waiting, finished or dead ones.
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, seq) WHERE state = 'available';
-- Staging of delayed and retryable jobs that became due.
CREATE INDEX jobs_due ON jobs (run_at) WHERE state IN ('scheduled', 'retryable');
-- Rescue of expired leases.
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';
-- Dedup by unique_key (race safety comes from an advisory lock on the key, see queries.sql).
CREATE INDEX jobs_unique_key ON jobs (unique_key, seq) WHERE unique_key IS NOT NULL;
-- Listing and stats by state; pruning by finish time.
CREATE INDEX jobs_state ON jobs (state, queue, seq);
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE queues (
    name   text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false
);

-- The state machine of conveyor/model/lifecycle.py, enforced in storage: guarded updates
-- make the normal paths safe, this trigger makes every other path (a bug, a manual
-- UPDATE) fail loudly. Keep in step with lifecycle.ALLOWED
-- (tests/backends/postgres/test_pg_schema.py compares the two).
CREATE FUNCTION check_job_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state || '>' || NEW.state) NOT IN (
        'available>cancelled', 'available>running', 'cancelled>available', 'dead>available',
        'retryable>available', 'retryable>cancelled', 'running>available', 'running>cancelled',
        'running>completed', 'running>dead', 'running>retryable', 'running>scheduled',
        'scheduled>available', 'scheduled>cancelled')
    THEN
        RAISE EXCEPTION 'conveyor: illegal job state transition % -> % (job %)',
            OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'check_violation', HINT = 'see conveyor/model/lifecycle.py';
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER jobs_state_guard
BEFORE UPDATE OF state ON jobs
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION check_job_transition();

-- Version 3: `seq` becomes a plain rowid alias (no AUTOINCREMENT).
--
-- With AUTOINCREMENT, once any row has held the largest rowid every later INSERT
-- fails with SQLITE_FULL ("database or disk is full"): one damaged `seq` stopped all
-- enqueues. A plain rowid takes max(seq)+1, as before for FIFO, and after the
-- largest one a free value. It also saves the sqlite_sequence write of every INSERT.
-- SQLite cannot drop AUTOINCREMENT in place, so the table is rebuilt, with its
-- indexes and state guard (this file holds the guard's current text).

CREATE TABLE conveyor_jobs_v3 (
    seq              INTEGER PRIMARY KEY,  -- insertion order, for FIFO
    id               TEXT    NOT NULL UNIQUE,
    queue            TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN
                        ('scheduled', 'available', 'running', 'retryable', 'completed', 'cancelled', 'dead')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
    run_at           REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    lease_token      INTEGER NOT NULL DEFAULT 0,  -- fencing token: +1 on every claim
    lease_expires_at REAL,
    worker_id        TEXT,
    unique_key       TEXT,
    unique_for       REAL,
    result           TEXT,
    errors           TEXT    NOT NULL DEFAULT '[]',
    checkpoint       TEXT,
    progress         TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    timeout          REAL,
    meta             TEXT    NOT NULL DEFAULT '{}',
    CHECK ((state = 'running') = (lease_expires_at IS NOT NULL))
);

INSERT INTO conveyor_jobs_v3 (
    seq, id, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
    started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
    result, errors, checkpoint, progress, cancel_requested, timeout, meta)
SELECT
    seq, id, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
    started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
    result, errors, checkpoint, progress, cancel_requested, timeout, meta
FROM conveyor_jobs;

DROP TABLE conveyor_jobs;
ALTER TABLE conveyor_jobs_v3 RENAME TO conveyor_jobs;

-- Claim: walk one queue's available jobs in claim order; cost does not grow with finished jobs.
CREATE INDEX conveyor_jobs_claim ON conveyor_jobs (queue, priority DESC, run_at, seq)
    WHERE state = 'available';
-- Staging of delayed and retryable jobs that became due.
CREATE INDEX conveyor_jobs_due ON conveyor_jobs (run_at) WHERE state IN ('scheduled', 'retryable');
-- Rescue of expired leases.
CREATE INDEX conveyor_jobs_lease ON conveyor_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX conveyor_jobs_unique ON conveyor_jobs (unique_key) WHERE unique_key IS NOT NULL;
-- Listing, stats and pruning by state.
CREATE INDEX conveyor_jobs_state ON conveyor_jobs (state, queue, seq);
CREATE INDEX conveyor_jobs_finished ON conveyor_jobs (finished_at) WHERE finished_at IS NOT NULL;

-- The state machine of conveyor/model/lifecycle.py, enforced in storage. Keep the two in step
-- (tests/unit/test_lifecycle.py compares the newest migration that defines it).
CREATE TRIGGER conveyor_jobs_state_guard
BEFORE UPDATE OF state ON conveyor_jobs
WHEN OLD.state <> NEW.state AND (OLD.state || '>' || NEW.state) NOT IN (
    'available>cancelled', 'available>running', 'cancelled>available', 'dead>available',
    'retryable>available', 'retryable>cancelled', 'running>available', 'running>cancelled',
    'running>completed', 'running>dead', 'running>retryable', 'running>scheduled',
    'scheduled>available', 'scheduled>cancelled')
BEGIN
    SELECT RAISE(ABORT, 'conveyor: illegal job state transition');
END;

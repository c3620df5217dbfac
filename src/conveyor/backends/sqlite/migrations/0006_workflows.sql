-- Version 6: workflows (docs/workflows.md). A job enqueued with depends_on waits in the
-- new state 'blocked' with the count of its parents that have not ended
-- (pending_parents), its parents (parents: what a redrive of one counts again) and
-- whether a failed parent lets it run (allow_failure); each such parent lists it in
-- `dependants` (a JSON array of ids, NULL for none: the settle path
-- of every other job checks only that). The state CHECK names the new state, so the
-- table is rebuilt as in version 3, with its indexes and state guard (this file holds
-- the guard's current text).

CREATE TABLE conveyor_jobs_v6 (
    seq              INTEGER PRIMARY KEY,  -- insertion order, for FIFO
    id               TEXT    NOT NULL UNIQUE,
    queue            TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN
                        ('blocked', 'scheduled', 'available', 'running', 'retryable', 'completed',
                         'cancelled', 'dead')),
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
    aging            REAL    CHECK (aging > 0 AND aging <= 10000000000),  -- validation.DURATION_MAX
    fair_vtime       INTEGER NOT NULL DEFAULT 0,  -- tenant fairness (version 5)
    dependants       TEXT,     -- JSON array of the ids of jobs blocked on this one
    parents          TEXT,     -- JSON array of the ids this one waits on (resumed by redrive)
    pending_parents  INTEGER,  -- blocked: parents not ended yet
    allow_failure    INTEGER NOT NULL DEFAULT 0,
    CHECK ((state = 'running') = (lease_expires_at IS NOT NULL))
);

INSERT INTO conveyor_jobs_v6 (
    seq, id, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
    started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
    result, errors, checkpoint, progress, cancel_requested, timeout, meta, aging, fair_vtime)
SELECT
    seq, id, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
    started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
    result, errors, checkpoint, progress, cancel_requested, timeout, meta, aging, fair_vtime
FROM conveyor_jobs;

DROP TABLE conveyor_jobs;
ALTER TABLE conveyor_jobs_v6 RENAME TO conveyor_jobs;

-- The indexes of versions 3 to 5, unchanged.
CREATE INDEX conveyor_jobs_claim ON conveyor_jobs (
    queue,
    (CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
    fair_vtime,
    (CASE WHEN aging IS NULL THEN run_at
          ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
    seq)
    WHERE state = 'available';
CREATE INDEX conveyor_jobs_due ON conveyor_jobs (run_at) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX conveyor_jobs_lease ON conveyor_jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX conveyor_jobs_unique ON conveyor_jobs (unique_key) WHERE unique_key IS NOT NULL;
CREATE INDEX conveyor_jobs_state ON conveyor_jobs (state, queue, seq);
CREATE INDEX conveyor_jobs_finished ON conveyor_jobs (finished_at) WHERE finished_at IS NOT NULL;

-- The state machine of conveyor/model/lifecycle.py, enforced in storage. Keep the two in step
-- (tests/unit/test_lifecycle.py compares the newest migration that defines it).
CREATE TRIGGER conveyor_jobs_state_guard
BEFORE UPDATE OF state ON conveyor_jobs
WHEN OLD.state <> NEW.state AND (OLD.state || '>' || NEW.state) NOT IN (
    'available>cancelled', 'available>running', 'blocked>available', 'blocked>cancelled',
    'cancelled>available', 'cancelled>blocked', 'dead>available', 'retryable>available',
    'retryable>cancelled',
    'running>available', 'running>cancelled', 'running>completed', 'running>dead',
    'running>retryable', 'running>scheduled', 'scheduled>available', 'scheduled>cancelled')
BEGIN
    SELECT RAISE(ABORT, 'conveyor: illegal job state transition');
END;

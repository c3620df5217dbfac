-- Queries of the SQLite backend. Named parameters; times are UTC epoch seconds.
-- Every write about a running job is guarded by its lease token (fencing).

-- fragment: job_columns
-- Every query that returns jobs selects these, in conveyor.backends.codec.COLUMNS order.
id, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
result, errors, checkpoint, progress, cancel_requested, timeout, meta, aging, concurrency_key,
concurrency_limit, rate_key, result_expires_at

-- fragment: claim_order
-- Claim order: priority (higher first), then the fairness vtime (0 without a key),
-- then run_at, then insertion; a job with aging ranks with priority 0 at
-- run_at - priority * aging, clamped as a run_at is. Word for word the expressions of
-- the conveyor_jobs_claim index (migrations 5 and 6, and 7, which adds its parked predicate)
-- and of migration 8's conveyor_jobs_claim and conveyor_jobs_rate_claim.
(CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
fair_vtime,
(CASE WHEN aging IS NULL THEN run_at
      ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END),
seq

-- fragment: job_filter
-- The admin filter (JobFilter) shared by listing, counting and redrive: an absent
-- filter is a NULL parameter, so one static statement serves every combination.
(:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
AND (:tasks IS NULL OR task IN (SELECT value FROM json_each(:tasks)))
AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))
-- :error_type comes ASCII-lowered (base.ascii_lower); SQLite's lower() folds ASCII only.
-- (CASE: a history that is not valid JSON has no last error; it never fails the query)
AND (:error_type IS NULL
     OR lower(CASE WHEN json_valid(errors) THEN json_extract(errors, '$[#-1].type') END)
        = :error_type)
AND (:args_contains IS NULL OR instr(payload, :args_contains) > 0)

-- name: get_job
SELECT {job_columns} FROM conveyor_jobs WHERE id = :id

-- name: insert_job
-- Positional parameters, in the order of the columns (enqueue.py's _row): the one
-- statement of every enqueue, and binding 18 values by name cost a third more.
INSERT INTO conveyor_jobs (id, queue, task, payload, state, priority, max_attempts, run_at,
                           created_at, unique_key, unique_for, timeout, meta, aging, fair_vtime,
                           concurrency_key, concurrency_limit, rate_key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO NOTHING

-- name: find_duplicate_by_id
SELECT {job_columns} FROM conveyor_jobs
WHERE id = :id
  AND (state IN ('blocked', 'scheduled', 'available', 'running', 'retryable')
       OR (state = 'completed' AND finished_at + unique_for > :now))

-- name: find_duplicate_by_unique_key
SELECT {job_columns} FROM conveyor_jobs
WHERE unique_key = :unique_key
  AND (state IN ('blocked', 'scheduled', 'available', 'running', 'retryable')
       OR (state = 'completed' AND finished_at + unique_for > :now))
ORDER BY seq DESC LIMIT 1

-- name: delete_finished_job
-- A deterministic id names one job at a time: once its dedup window is over, the
-- finished record makes way for the new job.
DELETE FROM conveyor_jobs WHERE id = :id AND state IN ('completed', 'cancelled', 'dead')

-- name: count_waiting
-- A bounded queue's depth (conveyor.rules.backpressure): its waiting jobs, read from the
-- state index; enqueue counts it once per bounded queue of a batch.
SELECT count(*) FROM conveyor_jobs
WHERE state IN ('scheduled', 'available', 'retryable') AND queue = :queue

-- name: shed_oldest_waiting
-- shed_oldest: cancel a full queue's :n oldest waiting jobs (by insertion), recording
-- why in their history. Each state's oldest first, from the state index, so the cost
-- follows :n, not the queue's depth.
UPDATE conveyor_jobs
SET state = 'cancelled', finished_at = :now,
    errors = CASE WHEN NOT json_valid(errors) THEN json_array(json(:error))
                  WHEN json_type(errors) = 'array' THEN json_insert(errors, '$[#]', json(:error))
                  ELSE json_array(json(:error)) END
WHERE seq IN (SELECT seq FROM (
    SELECT seq FROM (SELECT seq FROM conveyor_jobs WHERE state = 'scheduled' AND queue = :queue
                     ORDER BY seq LIMIT :n)
    UNION ALL
    SELECT seq FROM (SELECT seq FROM conveyor_jobs WHERE state = 'available' AND queue = :queue
                     ORDER BY seq LIMIT :n)
    UNION ALL
    SELECT seq FROM (SELECT seq FROM conveyor_jobs WHERE state = 'retryable' AND queue = :queue
                     ORDER BY seq LIMIT :n))
  ORDER BY seq LIMIT :n)
RETURNING id, dependants IS NOT NULL

-- name: stage_due_jobs
UPDATE conveyor_jobs SET state = 'available'
WHERE state IN ('scheduled', 'retryable') AND run_at <= :now

-- name: paused_queues
SELECT name FROM conveyor_queues WHERE paused = 1

-- name: claim_jobs
UPDATE conveyor_jobs
-- A claim hands out a readable attempt and fencing token even when the stored ones
-- are not numbers (CAST: text in an INTEGER column reads as 0) or are at the top of
-- their range (they start again at 1 instead of overflowing into a REAL), and a value
-- that does not sort as a number (a text priority) sorts, it does not fail: one bad
-- row never fails the claim of the others. The bounds are those of PostgreSQL's.
SET {claim_set}
-- parked = 0: a job of a concurrency key that has no slot for it is parked (migration 7).
WHERE seq IN (SELECT seq FROM conveyor_jobs
              WHERE state = 'available' AND parked = 0 AND queue = :queue AND rate_key IS NULL
              ORDER BY {claim_order} LIMIT :limit)
RETURNING seq, {job_columns}, fair_vtime

-- fragment: claim_set
state = 'running',
    attempt = CASE WHEN CAST(attempt AS INTEGER) BETWEEN 0 AND 999999999
                   THEN CAST(attempt AS INTEGER) + 1 ELSE 1 END,
    lease_token = CASE WHEN CAST(lease_token AS INTEGER) BETWEEN 0 AND 4611686018427387903
                       THEN CAST(lease_token AS INTEGER) + 1 ELSE 1 END,
    lease_expires_at = :lease_expires_at, worker_id = :worker_id, started_at = :now

-- name: claim_rated_jobs
-- claim_jobs for a worker that declares rate limits (docs/flow-control.md), still one
-- statement per queue: the queue's first jobs with no bucket and each bucket's first
-- jobs as far as its whole tokens go (store.py puts one rate_lane per bucket in place
-- of the marker), each the first entries of its index, then the first of all those
-- in claim order. store.py spends each bucket for the rows that come back.
UPDATE conveyor_jobs
SET {claim_set}
WHERE seq IN (SELECT seq FROM (
    SELECT * FROM (SELECT seq, {claim_keys} FROM conveyor_jobs
                   WHERE state = 'available' AND parked = 0 AND queue = :queue
                     AND rate_key IS NULL
                   ORDER BY {claim_order} LIMIT :limit)
    /* rate lanes */)
  ORDER BY k1 DESC, fv, k2, seq LIMIT :limit)
RETURNING seq, {job_columns}, fair_vtime

-- name: rate_lane
-- One bucket's lane in claim_rated_jobs; store.py writes the bucket's number for #.
UNION ALL SELECT * FROM (SELECT seq, {claim_keys} FROM conveyor_jobs
                         WHERE state = 'available' AND parked = 0 AND queue = :queue
                           AND rate_key = :rate_key_#
                         ORDER BY {claim_order} LIMIT :allowed_#)

-- fragment: claim_keys
(CASE WHEN aging IS NULL THEN priority ELSE 0 END) AS k1,
fair_vtime AS fv,
(CASE WHEN aging IS NULL THEN run_at
      ELSE max(0.0, min(99999999999.0, run_at - priority * aging)) END) AS k2

-- name: rate_buckets
SELECT name, tokens, updated_at FROM conveyor_rate_buckets
WHERE name IN (SELECT value FROM json_each(:names))

-- name: store_rate_bucket
INSERT INTO conveyor_rate_buckets (name, tokens, updated_at, rate, burst)
VALUES (:name, :tokens, :now, :rate, :burst)
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at,
                                 rate = excluded.rate, burst = excluded.burst

-- name: hold_rate_bucket
-- Backend.hold_rate_bucket: tokens as of a time that may be ahead. A bucket no claim
-- made yet gets rate and burst 0 until its first claim declares them.
INSERT INTO conveyor_rate_buckets (name, tokens, updated_at, rate, burst)
VALUES (:name, :tokens, :until, 0, 0)
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at

-- name: rate_held_back
-- Does a bucket hold back a job of these queues? (one index entry)
SELECT 1 FROM conveyor_jobs
WHERE state = 'available' AND parked = 0 AND rate_key = :rate_key
  AND queue IN (SELECT value FROM json_each(:queues)) LIMIT 1

-- name: advance_fair_queue
-- The queue's vtime moves up to the largest its claim took (conveyor.rules.fairness).
INSERT INTO conveyor_fair_queues (queue, vtime) VALUES (:queue, :vtime)
ON CONFLICT (queue) DO UPDATE SET vtime = max(vtime, excluded.vtime)

-- name: fair_queue_vtime
SELECT vtime FROM conveyor_fair_queues WHERE queue = :queue

-- name: fair_key_vtime
SELECT last_vtime FROM conveyor_fair_keys WHERE queue = :queue AND key = :key

-- name: set_fair_key_vtime
INSERT INTO conveyor_fair_keys (queue, key, last_vtime) VALUES (:queue, :key, :vtime)
ON CONFLICT (queue, key) DO UPDATE SET last_vtime = excluded.last_vtime

-- The fence of the writes below compares the token as a number: a stored token that
-- is not one reads as 0, which no claim hands out, so only the rescuer (which reads
-- it the same way, see find_leases) can end that attempt.

-- name: complete_job
-- A result kept result_ttl seconds (conveyor.rules.results) stores its expiry; NULL ttl: none.
UPDATE conveyor_jobs
SET state = 'completed', result = :result, finished_at = :now, lease_expires_at = NULL,
    result_expires_at = CASE WHEN :result IS NOT NULL THEN :now + :result_ttl END
WHERE id = :id AND CAST(lease_token AS INTEGER) = :token AND state = 'running'
RETURNING dependants IS NOT NULL

-- name: complete_jobs
-- complete_job for a batch: :batch is a JSON array of [id, lease token, result, result_ttl].
-- RETURNING gives the ids it completed (a stale one is missing) and whether each has
-- dependants. `+state` keeps the planner from driving the join by the state index
-- (every running job, times the batch): the batch drives it, one id lookup each.
UPDATE conveyor_jobs
SET state = 'completed', result = b.value ->> 2, finished_at = :now, lease_expires_at = NULL,
    result_expires_at = CASE WHEN b.value ->> 2 IS NOT NULL THEN :now + (b.value ->> 3) END
FROM json_each(:batch) AS b
WHERE conveyor_jobs.id = b.value ->> 0 AND CAST(lease_token AS INTEGER) = b.value ->> 1
  AND +state = 'running'
RETURNING id, dependants IS NOT NULL

-- name: fail_job
-- Retry (retryable, run_at) or dead-letter (dead, finished_at): appends the attempt's
-- error. A history that is not a JSON array (a corrupt one: the error being written
-- is then a CorruptJob naming it) starts again from this error, so the write never fails.
UPDATE conveyor_jobs
SET state = :state, run_at = coalesce(:run_at, run_at), lease_expires_at = NULL,
    finished_at = CASE WHEN :state IN ('dead', 'cancelled') THEN :now END,
    errors = CASE WHEN :error IS NULL THEN errors
                  WHEN NOT json_valid(errors) THEN json_array(json(:error))
                  WHEN json_type(errors) = 'array' THEN json_insert(errors, '$[#]', json(:error))
                  ELSE json_array(json(:error)) END
WHERE id = :id AND CAST(lease_token AS INTEGER) = :token AND state = 'running'
RETURNING dependants IS NOT NULL

-- name: return_job
-- Snooze or release: back to waiting without using the attempt.
UPDATE conveyor_jobs
SET state = :state, run_at = coalesce(:run_at, run_at), lease_expires_at = NULL,
    attempt = max(CAST(attempt AS INTEGER) - 1, 0)
WHERE id = :id AND CAST(lease_token AS INTEGER) = :token AND state = 'running'
RETURNING dependants IS NOT NULL

-- name: heartbeat_job
UPDATE conveyor_jobs SET lease_expires_at = :lease_expires_at
WHERE id = :id AND CAST(lease_token AS INTEGER) = :token AND state = 'running'
RETURNING cancel_requested

-- name: checkpoint_job
UPDATE conveyor_jobs
SET checkpoint = coalesce(:checkpoint, checkpoint), progress = coalesce(:progress, progress)
WHERE id = :id AND CAST(lease_token AS INTEGER) = :token AND state = 'running'

-- name: give_readable_id
-- A job whose stored id is not valid text (bytes a direct write left there) cannot be
-- named by any verb; the claim and the rescuer rename it to its readable form, so it
-- can be settled (the codec still reports the bad id of the row it decoded).
UPDATE conveyor_jobs SET id = :id WHERE seq = :seq

-- name: find_leases
-- Running jobs whose lease expired, or held by workers known to be dead (a JSON
-- array of ids); the rescuer settles them, fenced by their tokens. A stored expiry
-- that is not a number counts as expired, and the numbers come back as numbers
-- (a corrupt token reads as 0, as the fence of the writes reads it).
SELECT seq, id, CAST(lease_token AS INTEGER), CAST(worker_id AS TEXT), CAST(attempt AS INTEGER),
       CAST(max_attempts AS INTEGER), CAST(lease_expires_at AS REAL)
FROM conveyor_jobs
WHERE state = 'running'
  AND ((:expired_before IS NOT NULL
        AND (lease_expires_at < :expired_before
             OR typeof(lease_expires_at) NOT IN ('integer', 'real')))
       OR worker_id IN (SELECT value FROM json_each(:worker_ids)))
LIMIT :limit

-- name: prune_jobs
DELETE FROM conveyor_jobs
WHERE seq IN (SELECT seq FROM conveyor_jobs
              WHERE finished_at IS NOT NULL
                AND ((state IN ('completed', 'cancelled') AND finished_at < :completed_before
                      AND (unique_for IS NULL OR finished_at + unique_for < :now))
                     OR (state = 'dead' AND finished_at < :dead_before))
              LIMIT :limit)

-- name: expire_results
-- Results past their expiry, by the conveyor_jobs_result_expiry index (migration 9),
-- which clearing a result takes the row out of; the job and its expiry stay.
UPDATE conveyor_jobs SET result = NULL
WHERE seq IN (SELECT seq FROM conveyor_jobs
              WHERE result_expires_at IS NOT NULL AND result IS NOT NULL
                AND result_expires_at <= :now
              ORDER BY result_expires_at LIMIT :limit)
RETURNING id

-- name: cancel_waiting_job
UPDATE conveyor_jobs SET state = 'cancelled', finished_at = :now
WHERE id = :id AND state IN ('scheduled', 'available', 'retryable')
RETURNING dependants IS NOT NULL

-- name: cancel_not_started_job
-- An operator's cancel of one job that has not started: waiting, or blocked on its
-- parents (a workflow member); its dependants are released after (conveyor.rules.dependencies).
UPDATE conveyor_jobs SET state = 'cancelled', finished_at = :now
WHERE id = :id AND state IN ('blocked', 'scheduled', 'available', 'retryable')
RETURNING dependants IS NOT NULL

-- name: request_cancel_running_job
UPDATE conveyor_jobs SET cancel_requested = 1 WHERE id = :id AND state = 'running'

-- name: redrive_job
UPDATE conveyor_jobs
SET state = 'available', attempt = 0, run_at = :now, finished_at = NULL, cancel_requested = 0
WHERE id = :id AND state IN ('dead', 'cancelled')
RETURNING dependants IS NOT NULL

-- name: delete_job
DELETE FROM conveyor_jobs WHERE id = :id AND state IN ('completed', 'cancelled', 'dead')

-- name: count_by_queue_and_state
SELECT queue, state, count(*) FROM conveyor_jobs GROUP BY queue, state

-- name: oldest_available_by_queue
SELECT queue, min(run_at) FROM conveyor_jobs WHERE state = 'available' GROUP BY queue

-- name: throttled_by_queue
-- Available jobs with a rate limit bucket, from conveyor_jobs_rate_claim.
SELECT queue, count(*) FROM conveyor_jobs
WHERE state = 'available' AND parked = 0 AND rate_key IS NOT NULL GROUP BY queue

-- name: parked_by_queue
-- Available jobs parked behind their concurrency key, from conveyor_jobs_parked.
SELECT queue, count(*) FROM conveyor_jobs WHERE state = 'available' AND parked = 1 GROUP BY queue

-- name: key_loads
-- Running and held (parked) jobs by concurrency key, of one queue or of every queue
-- (:queue NULL): for operators (flow_loads). Each half reads one partial index: the
-- running jobs from the key's slot holders (the restated state as in running_of_key),
-- the held ones from the parked index.
SELECT concurrency_key, count(*), 0 FROM conveyor_jobs
WHERE concurrency_key IS NOT NULL AND state IN ('running', 'available') AND parked = 0
  AND state = 'running' AND (:queue IS NULL OR queue = :queue)
GROUP BY concurrency_key
UNION ALL
SELECT concurrency_key, 0, count(*) FROM conveyor_jobs
WHERE state = 'available' AND parked = 1 AND (:queue IS NULL OR queue = :queue)
GROUP BY concurrency_key

-- name: throttled_by_bucket
-- Available jobs waiting for a rate limit bucket's tokens, by bucket (flow_loads).
SELECT rate_key, count(*) FROM conveyor_jobs
WHERE state = 'available' AND parked = 0 AND rate_key IS NOT NULL
  AND (:queue IS NULL OR queue = :queue)
GROUP BY rate_key

-- name: queue_paused
SELECT paused FROM conveyor_queues WHERE name = :queue

-- name: all_queue_flags
SELECT name, paused FROM conveyor_queues

-- name: count_shed
-- The jobs a full queue just shed, added to its counter (migration 10).
INSERT INTO conveyor_queues (name, paused, shed) VALUES (:queue, 0, :n)
ON CONFLICT (name) DO UPDATE SET shed = shed + excluded.shed

-- name: shed_by_queue
SELECT name, shed FROM conveyor_queues WHERE shed > 0

-- name: set_queue_paused
INSERT INTO conveyor_queues (name, paused) VALUES (:queue, :paused)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused

-- name: force_state
-- Test hook for the conformance suite: proves the storage guard rejects illegal transitions.
UPDATE conveyor_jobs SET state = :state WHERE id = :id

-- name: filter_jobs
SELECT {job_columns}
FROM conveyor_jobs
WHERE {job_filter}
ORDER BY CASE WHEN :oldest_finished_first THEN coalesce(finished_at, 0) END, seq DESC
LIMIT :limit OFFSET :offset

-- name: list_jobs_newest_first
-- The admin listing. Its own query because a computed ORDER BY (as in filter_jobs)
-- sorts every matching row: here SQLite walks the rowid backwards and stops after
-- :limit matches. The keyset cursor is a plain range on the rowid (no "IS NULL OR"),
-- so a deep page starts its walk at the cursor instead of skipping rows to it.
SELECT {job_columns}
FROM conveyor_jobs
WHERE {job_filter}
  -- <= the largest seq, not < it: a row may hold it (the fuzz test wrote it there).
  AND seq <= coalesce(:before_seq - 1, 9223372036854775807)
ORDER BY seq DESC
LIMIT :limit OFFSET :offset

-- name: count_filtered_jobs
SELECT count(*) FROM conveyor_jobs WHERE {job_filter}

-- name: task_names
SELECT DISTINCT task FROM conveyor_jobs WHERE {job_filter} ORDER BY task

-- name: seq_of_job
-- Where a keyset cursor (a job id) sits in the listing order.
SELECT seq FROM conveyor_jobs WHERE id = :id

-- name: running_of_key
-- How many jobs of a concurrency key run: what `jobs show` says a held-back job waits
-- for. From the index of the key's slot holders (a running job is never parked).
SELECT count(*) FROM conveyor_jobs
WHERE concurrency_key = :key AND state IN ('running', 'available') AND parked = 0
  AND state = 'running'

-- name: get_record
SELECT value FROM conveyor_meta
WHERE namespace = :namespace AND key = :key AND (expires_at IS NULL OR expires_at > :now)

-- name: get_record_and_expiry
SELECT value, expires_at FROM conveyor_meta
WHERE namespace = :namespace AND key = :key AND (expires_at IS NULL OR expires_at > :now)

-- name: put_record
INSERT INTO conveyor_meta (namespace, key, value, expires_at)
VALUES (:namespace, :key, :value, :expires_at)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at

-- name: list_records
SELECT key, value FROM conveyor_meta
WHERE namespace = :namespace AND (expires_at IS NULL OR expires_at > :now)
ORDER BY key

-- name: delete_record
DELETE FROM conveyor_meta WHERE namespace = :namespace AND key = :key

-- name: delete_expired_records
DELETE FROM conveyor_meta WHERE expires_at IS NOT NULL AND expires_at <= :now

-- Workflows (docs/workflows.md, conveyor.rules.dependencies): jobs blocked on others.

-- name: states_of_jobs
SELECT id, state FROM conveyor_jobs WHERE id IN (SELECT value FROM json_each(:ids))

-- name: link_dependant
-- A new dependant's count of parents to wait for; its history when a parent already failed.
UPDATE conveyor_jobs
SET pending_parents = :pending_parents, allow_failure = :allow_failure, parents = :parents,
    finished_at = CASE WHEN :error IS NULL THEN finished_at ELSE :now END,
    errors = CASE WHEN :error IS NULL THEN errors ELSE json_array(json(:error)) END
WHERE id = :id

-- name: add_dependant
UPDATE conveyor_jobs
SET dependants = CASE WHEN json_valid(dependants) AND json_type(dependants) = 'array'
                      THEN json_insert(dependants, '$[#]', :child) ELSE json_array(:child) END
WHERE id = :id

-- name: dependants_of
SELECT dependants FROM conveyor_jobs WHERE id = :id

-- name: parents_of
SELECT parents FROM conveyor_jobs WHERE id = :id

-- name: blocked_job
SELECT allow_failure, pending_parents FROM conveyor_jobs WHERE id = :id AND state = 'blocked'

-- name: count_down_parents
UPDATE conveyor_jobs SET pending_parents = :pending_parents WHERE id = :id AND state = 'blocked'

-- name: unblock_job
UPDATE conveyor_jobs SET state = 'available', run_at = :now, pending_parents = 0
WHERE id = :id AND state = 'blocked'

-- name: cancel_blocked_job
UPDATE conveyor_jobs
SET state = 'cancelled', finished_at = :now,
    errors = CASE WHEN json_valid(errors) AND json_type(errors) = 'array'
                  THEN json_insert(errors, '$[#]', json(:error)) ELSE json_array(json(:error)) END
WHERE id = :id AND state = 'blocked'

-- name: cancelled_by_parent
-- A dependant a parent cancelled before it ever ran: what a redrive of it resumes.
SELECT allow_failure, parents FROM conveyor_jobs
WHERE id = :id AND state = 'cancelled' AND CAST(attempt AS INTEGER) = 0
  AND (CASE WHEN json_valid(errors) THEN json_extract(errors, '$[#-1].type') END)
      = 'DependencyFailed'

-- name: state_of_job
SELECT state FROM conveyor_jobs WHERE id = :id

-- name: reblock_job
UPDATE conveyor_jobs SET state = 'blocked', finished_at = NULL, pending_parents = :pending_parents
WHERE id = :id AND state = 'cancelled'

-- name: set_key_limit
-- An adaptive key's limit (migration 11); its trigger rebalances the key.
INSERT INTO conveyor_key_limits (concurrency_key, key_limit) VALUES (:key, :limit)
ON CONFLICT (concurrency_key) DO UPDATE SET key_limit = excluded.key_limit
WHERE key_limit IS NOT excluded.key_limit

-- name: drop_key_limit
DELETE FROM conveyor_key_limits WHERE concurrency_key = :key

-- name: key_limit
SELECT key_limit FROM conveyor_key_limits WHERE concurrency_key = :key

-- Queries of the PostgreSQL backend. psycopg named parameters; times are UTC
-- epoch seconds from the application clock. `{schema}` is replaced once, at load,
-- by the quoted schema name: names are qualified so the same text also runs on a
-- caller's own connection (transactional enqueue) whatever its search_path.
-- Every write about a running job is guarded by its lease token (fencing).

-- name: bootstrap_schema
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: bootstrap_migrations
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at double precision NOT NULL
)

-- name: lock_migrations
-- Transaction-scoped: concurrent migrators queue here, and a crashed one never holds it.
SELECT pg_advisory_xact_lock(hashtextextended('conveyor:migrate:' || %(schema)s, 0))

-- name: applied_migrations
SELECT version FROM {schema}.migrations

-- name: schema_exists
SELECT to_regclass(%(table)s) IS NOT NULL

-- name: use_schema
SELECT set_config('search_path', %(schema)s, true)

-- name: record_migration
INSERT INTO {schema}.migrations (version, name, applied_at) VALUES (%(version)s, %(name)s, %(now)s)

-- fragment: job_columns
-- Every query that returns jobs selects these: seq, then conveyor.backends.codec.COLUMNS
-- (rows.job_from_row). errors and meta as text: the codec decodes them field by field,
-- so one that is too deeply nested for Python is one corrupt job, not a failed query
-- (psycopg's own jsonb loader would raise for the whole result). The claim's RETURNING
-- and insert_jobs list them themselves, with the same casts.
seq, id, queue, task, payload, state, priority, attempt, max_attempts, run_at, created_at,
started_at, finished_at, lease_token, lease_expires_at, worker_id, unique_key, unique_for,
result, errors::text, checkpoint, progress, cancel_requested, timeout, meta::text, aging,
concurrency_key, concurrency_limit, rate_key, result_expires_at

-- fragment: claim_order
-- Claim order: priority (higher first), then the fairness vtime (0 without a key),
-- then run_at, then insertion; a job with aging ranks with priority 0 at
-- run_at - priority * aging, clamped as a run_at is. Word for word the expressions of
-- the jobs_claim index (migration 5, and 7, which adds its parked predicate);
-- and of migration 8's jobs_claim and jobs_rate_claim, which split it by rate_key.
(CASE WHEN aging IS NULL THEN priority ELSE 0 END) DESC,
fair_vtime,
(CASE WHEN aging IS NULL THEN run_at
      ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END),
seq

-- fragment: claim_keys
-- The claim_order keys as columns (k1 descending, then kf, then k2, then seq), to
-- rank candidates outside the subquery that read them in index order.
(CASE WHEN aging IS NULL THEN priority ELSE 0 END) AS k1,
fair_vtime AS kf,
(CASE WHEN aging IS NULL THEN run_at
      ELSE GREATEST(0::float8, LEAST(99999999999::float8, run_at - priority * aging)) END) AS k2

-- fragment: fair_advance
-- Tenant fairness (conveyor.rules.fairness): each queue's vtime moves up to the largest vtime
-- its claim took. Only claims that took jobs with a fairness key write (unkeyed jobs
-- have vtime 0), and only where the vtime moves: with many keys, most claims take
-- jobs of the vtime the last one reached (a lock and a new row version per queue and
-- claim, for nothing). The queues' rows are locked in name order first, so two claims
-- of several fair queues never wait for each other in a cycle; a row another claim
-- moved meanwhile is checked again at its latest version before it is locked.
fair_claimed AS (
    SELECT r.queue, max(c.kf) AS vtime
    FROM chosen AS c JOIN req AS r USING (ord)
    WHERE c.kf > 0
    GROUP BY r.queue
), fair_locked AS (
    SELECT f.queue FROM {schema}.fair_queues AS f JOIN fair_claimed AS m USING (queue)
    WHERE f.vtime < m.vtime
    ORDER BY f.queue
    FOR UPDATE OF f
), fair_advanced AS (
    UPDATE {schema}.fair_queues AS f SET vtime = GREATEST(f.vtime, m.vtime)
    FROM fair_locked AS l JOIN fair_claimed AS m USING (queue)
    WHERE f.queue = l.queue
)

-- fragment: job_filter
-- The admin filter (JobFilter) shared by listing, counting and redrive: an absent
-- filter is a NULL parameter, so one static statement serves every combination.
(%(states)s::text[] IS NULL OR state = ANY(%(states)s::text[]))
AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
AND (%(tasks)s::text[] IS NULL OR task = ANY(%(tasks)s::text[]))
AND (%(ids)s::text[] IS NULL OR id = ANY(%(ids)s::text[]))
-- error_type comes ASCII-lowered (base.ascii_lower); translate() folds exactly those
-- letters, as SQLite's lower() does, whatever the database's locale.
AND (%(error_type)s::text IS NULL
     OR translate(errors -> -1 ->> 'type', 'ABCDEFGHIJKLMNOPQRSTUVWXYZ',
                  'abcdefghijklmnopqrstuvwxyz') = %(error_type)s::text)
AND (%(args_contains)s::text IS NULL OR strpos(payload, %(args_contains)s::text) > 0)

-- fragment: after_ending
-- What follows a statement that ends jobs (its CTE `settled` returning id, state,
-- dependants): their dependants released and their waiters woken, in the same
-- statement; it returns (id, dependants made available, waiters signalled).
released AS (
    {release_dependants}
), signalled AS (
    {signal_ends}
)
SELECT id, (SELECT unblocked FROM released), (SELECT n FROM signalled) FROM settled

-- fragment: release_dependants
-- Workflows (conveyor.rules.dependencies): the dependants of the jobs `settled` just ended,
-- released in the same statement, by child id (one lock order for every settle). No
-- row here (HAVING) when none of them has dependants: the function is not called.
SELECT {schema}.release_dependants(array_agg(d.child ORDER BY d.child),
                                   array_agg(t.id ORDER BY d.child),
                                   array_agg(t.state ORDER BY d.child),
                                   %(now)s::float8, %(version)s::text,
                                   %(done_channel)s::text) AS unblocked
FROM settled AS t CROSS JOIN LATERAL unnest(t.dependants) AS d(child)
WHERE t.state IN ('completed', 'dead', 'cancelled')
HAVING count(*) > 0

-- fragment: signal_ends
-- FinishWakeups: a NOTIFY on the done channel for each job `settled` just ended that
-- someone waits for (a record in namespace finish_waiters): one primary-key probe of
-- the meta table per ended job, and no NOTIFY (no commit-time queue lock) otherwise.
SELECT count(pg_notify(%(done_channel)s::text, t.id)) AS n
FROM settled AS t
WHERE t.state IN ('completed', 'dead', 'cancelled')
  AND EXISTS (SELECT 1 FROM {schema}.meta AS m
              WHERE m.namespace = 'finish_waiters' AND m.key = t.id)

-- name: insert_new_job
-- `insert_new_jobs` for a batch of one (enqueue one by one is the common call):
-- plain parameters instead of arrays, a cheaper statement to bind and to plan.
WITH inserted AS (
    INSERT INTO {schema}.jobs (id, queue, task, payload, state, priority, max_attempts, run_at,
                               created_at, unique_for, timeout, meta, aging, concurrency_key,
                               concurrency_limit, rate_key)
    VALUES (%(id)s, %(queue)s, %(task)s, %(payload)s, %(state)s, %(priority)s, %(max_attempts)s,
            %(run_at)s, %(now)s, %(unique_for)s, %(timeout)s, %(meta)s, %(aging)s,
            %(concurrency_key)s, %(concurrency_limit)s, %(rate_key)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue
)
SELECT i.id, pg_notify(%(channel)s, i.queue) FROM inserted AS i

-- name: insert_new_jobs
-- The fast path of enqueue, for jobs without a unique_key: one statement (so one
-- round trip and, in autocommit, no BEGIN/COMMIT) that inserts and wakes workers.
-- A job whose id is taken is skipped here; the caller sends it down the full
-- dedup path below. The wake-up runs only when something was inserted. Arrays go as
-- binary parameters (text array quoting was a third of the Python time), and only ids
-- come back: the caller knows the rest (reading 25 columns back cost more than the insert).
WITH inserted AS (
    INSERT INTO {schema}.jobs (id, queue, task, payload, state, priority, max_attempts, run_at,
                               created_at, unique_key, unique_for, timeout, meta, aging,
                               concurrency_key, concurrency_limit, rate_key)
    SELECT n.id, n.queue, n.task, n.payload, n.state, n.priority, n.max_attempts, n.run_at,
           %(now)s, NULL, n.unique_for, n.timeout, n.meta, n.aging, n.ckey, n.climit,
           n.rate_key
    FROM unnest(%(ids)b::text[], %(queues)b::text[], %(tasks)b::text[], %(payloads)b::text[],
                %(states)b::text[], %(priorities)b::int[], %(max_attempts)b::int[],
                %(run_ats)b::float8[], %(unique_fors)b::float8[], %(timeouts)b::float8[],
                %(metas)b::jsonb[], %(agings)b::float8[], %(ckeys)b::text[], %(climits)b::int[],
                %(rate_keys)b::text[])
         WITH ORDINALITY AS n(id, queue, task, payload, state, priority, max_attempts, run_at,
                              unique_for, timeout, meta, aging, ckey, climit, rate_key, pos)
    ORDER BY n.pos
    ON CONFLICT (id) DO NOTHING
    RETURNING id, queue
), woken AS (
    SELECT count(pg_notify(%(channel)s, q)) AS n FROM (SELECT DISTINCT queue AS q FROM inserted) AS u
)
SELECT i.id, (SELECT n FROM woken) FROM inserted AS i

-- name: lock_enqueue_keys
-- Dedup by unique_key has no unique index to lean on (a completed job keeps its key
-- only for `unique_for`, which no index predicate can express), so concurrent
-- enqueues of one key serialise on an advisory lock held until commit. Sorted, so
-- two batches sharing keys cannot deadlock. Runs as its own statement before the
-- insert: under READ COMMITTED the insert then takes a snapshot that sees the
-- winner's committed row.
SELECT count(pg_advisory_xact_lock(hashtextextended('conveyor:key:' || %(schema)s || ':' || k, 0)))
FROM (SELECT DISTINCT k FROM unnest(%(keys)s::text[]) AS u(k) WHERE k IS NOT NULL ORDER BY k) AS sorted

-- name: delete_replaced_jobs
-- A deterministic id names one job at a time: once a finished job's dedup window is
-- over (and no active job holds the new job's unique_key), it makes way for the new one.
DELETE FROM {schema}.jobs AS j
USING unnest(%(ids)b::text[], %(keys)b::text[]) AS n(id, unique_key)
WHERE j.id = n.id
  AND j.state IN ('completed', 'cancelled', 'dead')
  AND NOT coalesce(j.state = 'completed' AND j.finished_at + j.unique_for > %(now)s, false)
  AND NOT EXISTS (
      SELECT 1 FROM {schema}.jobs AS d
      WHERE n.unique_key IS NOT NULL AND d.unique_key = n.unique_key
        AND (d.state IN ('blocked', 'scheduled', 'available', 'running', 'retryable')
             OR (d.state = 'completed' AND d.finished_at + d.unique_for > %(now)s)))

-- name: insert_jobs
-- Insert the jobs that have no live duplicate (same id, else same unique_key);
-- return, per input position, whether the row is new (fresh), then the inserted row
-- or the duplicate in its place.
WITH new AS (
    SELECT *
    FROM unnest(%(ids)b::text[], %(queues)b::text[], %(tasks)b::text[], %(payloads)b::text[],
                %(states)b::text[], %(priorities)b::int[], %(max_attempts)b::int[],
                %(run_ats)b::float8[], %(keys)b::text[], %(unique_fors)b::float8[],
                %(timeouts)b::float8[], %(metas)b::jsonb[], %(agings)b::float8[],
                %(fair_vtimes)b::bigint[], %(ckeys)b::text[], %(climits)b::int[],
                %(rate_keys)b::text[])
         WITH ORDINALITY AS n(id, queue, task, payload, state, priority, max_attempts, run_at,
                              unique_key, unique_for, timeout, meta, aging, fair_vtime, ckey,
                              climit, rate_key, pos)
), dup AS (
    SELECT n.pos,
           coalesce(
               (SELECT d.seq FROM {schema}.jobs AS d
                WHERE d.id = n.id
                  AND (d.state IN ('blocked', 'scheduled', 'available', 'running', 'retryable')
                       OR (d.state = 'completed' AND d.finished_at + d.unique_for > %(now)s))),
               (SELECT d.seq FROM {schema}.jobs AS d
                WHERE n.unique_key IS NOT NULL AND d.unique_key = n.unique_key
                  AND (d.state IN ('blocked', 'scheduled', 'available', 'running', 'retryable')
                       OR (d.state = 'completed' AND d.finished_at + d.unique_for > %(now)s))
                ORDER BY d.seq DESC LIMIT 1)) AS seq
    FROM new AS n
), inserted AS (
    INSERT INTO {schema}.jobs (id, queue, task, payload, state, priority, max_attempts, run_at,
                               created_at, unique_key, unique_for, timeout, meta, aging,
                               fair_vtime, concurrency_key, concurrency_limit, rate_key)
    SELECT n.id, n.queue, n.task, n.payload, n.state, n.priority, n.max_attempts, n.run_at,
           %(now)s, n.unique_key, n.unique_for, n.timeout, n.meta, n.aging, n.fair_vtime,
           n.ckey, n.climit, n.rate_key
    FROM new AS n JOIN dup USING (pos)
    WHERE dup.seq IS NULL
    ORDER BY n.pos
    -- A concurrent enqueue of the same id won: this row is skipped and read back after.
    ON CONFLICT (id) DO NOTHING
    RETURNING *
)
SELECT dup.pos, false AS fresh, j.seq, j.id, j.queue, j.task, j.payload, j.state, j.priority, j.attempt,
       j.max_attempts, j.run_at, j.created_at, j.started_at, j.finished_at, j.lease_token,
       j.lease_expires_at, j.worker_id, j.unique_key, j.unique_for, j.result, j.errors::text,
       j.checkpoint, j.progress, j.cancel_requested, j.timeout, j.meta::text, j.aging,
       j.concurrency_key, j.concurrency_limit, j.rate_key, j.result_expires_at
FROM dup JOIN {schema}.jobs AS j ON j.seq = dup.seq
UNION ALL
SELECT n.pos, true AS fresh, i.seq, i.id, i.queue, i.task, i.payload, i.state, i.priority, i.attempt,
       i.max_attempts, i.run_at, i.created_at, i.started_at, i.finished_at, i.lease_token,
       i.lease_expires_at, i.worker_id, i.unique_key, i.unique_for, i.result, i.errors::text,
       i.checkpoint, i.progress, i.cancel_requested, i.timeout, i.meta::text, i.aging,
       i.concurrency_key, i.concurrency_limit, i.rate_key, i.result_expires_at
FROM inserted AS i JOIN new AS n ON n.id = i.id

-- name: lock_bounded_queues
-- Enqueues to one bounded queue (conveyor.rules.backpressure) serialise on an advisory lock
-- held until commit, taken in a statement of its own before the insert (as for
-- unique keys): the count after the insert then sees every other producer's jobs.
-- Sorted, and taken before the unique keys' locks by every enqueue: no deadlock.
SELECT count(pg_advisory_xact_lock(hashtextextended('conveyor:queue:' || %(schema)s || ':' || q, 0)))
FROM (SELECT DISTINCT q FROM unnest(%(bound_queues)s::text[]) AS u(q) ORDER BY q) AS sorted

-- name: count_waiting
-- Each bounded queue's waiting jobs (its depth), from the state index.
SELECT u.q, (SELECT count(*) FROM {schema}.jobs
             WHERE state IN ('scheduled', 'available', 'retryable') AND queue = u.q)
FROM unnest(%(bound_queues)s::text[]) AS u(q)

-- name: take_back_jobs
-- Refused by a full queue: the batch's own new rows, not seen by anyone yet.
DELETE FROM {schema}.jobs WHERE id = ANY (%(ids)s::text[]) AND state IN ('scheduled', 'available')

-- name: shed_oldest_waiting
-- shed_oldest: cancel a full queue's %(n)s oldest waiting jobs (by insertion), recording
-- why in their history; each state's oldest from the state index, so the cost follows n.
-- A workflow member's dependants follow it (after_ending).
WITH settled AS (
UPDATE {schema}.jobs AS j
SET state = 'cancelled', finished_at = %(now)s,
    errors = CASE WHEN jsonb_typeof(j.errors) = 'array'
                       AND coalesce(jsonb_typeof(j.errors -> -1), 'object') = 'object'
                  THEN j.errors || jsonb_build_array(%(error)s::jsonb)
                  ELSE jsonb_build_array(%(error)s::jsonb) END
WHERE j.seq IN (SELECT seq FROM (
    (SELECT seq FROM {schema}.jobs WHERE state = 'scheduled' AND queue = %(queue)s
     ORDER BY seq LIMIT %(n)s)
    UNION ALL
    (SELECT seq FROM {schema}.jobs WHERE state = 'available' AND queue = %(queue)s
     ORDER BY seq LIMIT %(n)s)
    UNION ALL
    (SELECT seq FROM {schema}.jobs WHERE state = 'retryable' AND queue = %(queue)s
     ORDER BY seq LIMIT %(n)s)) AS oldest
  ORDER BY seq LIMIT %(n)s)
RETURNING j.id, j.state, j.dependants
), {after_ending}

-- name: notify_queues
-- A wake-up hint per queue; inside a transaction it is delivered at commit (or never).
SELECT count(pg_notify(%(channel)s, q)) FROM (SELECT DISTINCT unnest(%(queues)s::text[]) AS q) AS u

-- name: stage_due_jobs
-- SKIP LOCKED: many workers stage at once without queueing on each other's rows.
-- `seq = ANY (ARRAY(...))`, here and below: the chosen rows are then fetched by
-- primary key whatever the table's size; with `IN (...)` or a join the planner
-- may hash-join against a sequential scan of the whole table (seen at 10,000 rows).
UPDATE {schema}.jobs SET state = 'available'
WHERE seq = ANY (ARRAY(
    SELECT seq FROM {schema}.jobs
    WHERE state IN ('scheduled', 'retryable') AND run_at <= %(now)s
    ORDER BY run_at LIMIT 5000
    FOR UPDATE SKIP LOCKED))

-- name: claim_session
-- The claim lane's connection (lane.py), set up once: every claim runs there on its
-- generic plan, without JIT. Under the default `auto` PostgreSQL planned each claim
-- afresh (its estimate of the generic plan is above the custom plans', which come to
-- the same plan), a large share of a claim. JIT: the planner's estimates of a claim
-- grow with the waiting jobs, and past jit_above_cost compiling took far longer than
-- the claim (figures: docs/performance.md). Only on this connection: the admin filters
-- (`x IS NULL OR ...`) need their custom plans.
SET plan_cache_mode = force_generic_plan; SET jit = off

-- name: claim_jobs
-- A whole ClaimRequest in one statement (one round trip, however many queues), in the
-- two passes of conveyor.backends.claiming.claim_steps: first each queue's first jobs in claim
-- order that no other worker has locked, up to its quota (cut by its ceiling and the
-- limit; a paused queue has none), taken in the request's order while short of the
-- limit; then the queues that gave all they were asked (or were asked nothing) take
-- what is left, in the same order, up to their ceilings. The second pass locks its
-- candidates only when the first left room, so a claim locks the jobs it takes and
-- few more (locking each queue's candidates for both passes up front locked several
-- times the claim's jobs, and cost more than ranking them: docs/performance.md). The
-- chosen rows are leased and returned. A count at the top of its
-- range (written by something else) starts again at 1 instead of overflowing, which
-- would fail the claim of every row of the queue. Jobs with a rate limit bucket are
-- claimed by claim_rated_jobs only (the request carries no limits here).
WITH req AS ({claim_request}
), first_cand AS (WITH lane AS ({first_lane}) {free_cand}
), {first_pass}, second_cand AS (WITH lane AS ({second_lane}) {free_cand}
), {second_pass}, {fair_advance}
{claim_lease}

-- fragment: claim_request
    SELECT r.queue, r.quota, r.ceiling, r.ord
    FROM unnest(%(queues)s::text[], %(quotas)s::int[], %(ceilings)s::int[])
         WITH ORDINALITY AS r(queue, quota, ceiling, ord)
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.queues AS q WHERE q.name = r.queue AND q.paused)

-- fragment: first_lane
-- The first pass's lane of each queue: how many it may give (n), no jobs taken yet.
SELECT queue, ord, GREATEST(0, LEAST(quota, ceiling, %(limit)s)) AS n, '{}'::bigint[] AS taken
FROM req

-- fragment: second_lane
-- The second pass's lanes: the queues `more` lets give more.
SELECT queue, ord, n, taken FROM more WHERE n > 0

-- fragment: free_lane
-- The first `lane.n` available jobs of `lane.queue` with no rate limit bucket (the
-- jobs_claim index) that this claim does not hold already (`lane.taken`: a lock of
-- our own does not make SKIP LOCKED skip a row).
        SELECT seq, {claim_keys}
        FROM {schema}.jobs
        -- NOT parked: a job of a concurrency key that has no slot for it (migration 7).
        WHERE state = 'available' AND NOT parked AND queue = lane.queue AND rate_key IS NULL
          AND seq <> ALL (lane.taken)
        ORDER BY {claim_order}
        LIMIT lane.n
        FOR UPDATE SKIP LOCKED

-- fragment: free_cand
-- The candidates of `lane`'s queues, ranked within each queue (rn).
SELECT lane.ord, c.seq, c.kf, NULL::text AS rate_key,
       row_number() OVER (PARTITION BY lane.ord ORDER BY c.k1 DESC, c.kf, c.k2, c.seq) AS rn
FROM lane CROSS JOIN LATERAL ({free_lane}) AS c

-- fragment: first_pass
-- The first pass over first_cand (ord, seq, kf, rate_key, rn: the rank within its
-- queue): the queues in order, each its candidates, while short of the limit. `more`:
-- what each queue may give in the second pass, min(the room left, its ceiling less
-- what it gave) if it gave all the first pass asked of it (its quota, cut by its
-- ceiling and by the room the queues before it left) or was asked nothing; `taken`,
-- its rows the first pass holds.
first AS (
    SELECT seq, ord, kf, rate_key
    FROM (SELECT *, row_number() OVER (ORDER BY ord, rn) AS pos FROM first_cand) AS f
    WHERE pos <= %(limit)s
), more AS (
    SELECT a.queue, a.ord,
           CASE WHEN a.quota <= 0 OR (a.wanted > 0 AND a.gave = a.wanted)
                THEN GREATEST(0, LEAST(a.ceiling - a.gave,
                                       %(limit)s - (SELECT count(*) FROM first)))
                ELSE 0 END AS n,
           ARRAY(SELECT c.seq FROM first_cand AS c WHERE c.ord = a.ord) AS taken
    FROM (SELECT r.queue, r.ord, r.quota, r.ceiling, coalesce(g.n, 0) AS gave,
                 LEAST(r.quota, r.ceiling, %(limit)s - coalesce(sum(coalesce(g.n, 0)) OVER (
                     ORDER BY r.ord ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                 ) AS wanted
          FROM req AS r LEFT JOIN (SELECT ord, count(*) AS n FROM first GROUP BY ord) AS g
               USING (ord)) AS a
)

-- fragment: second_pass
-- The second pass over second_cand (its lanes hold at most what `more` allows each
-- queue): the queues in order, until the limit. `chosen`: both passes' jobs.
second AS (
    SELECT seq, ord, kf, rate_key
    FROM (SELECT *, row_number() OVER (ORDER BY ord, rn) AS pos FROM second_cand) AS s
    WHERE pos <= %(limit)s - (SELECT count(*) FROM first)
), chosen AS (
    SELECT * FROM first UNION ALL SELECT * FROM second
)

-- fragment: claim_lease
-- An array, not IN (subquery): the planner then finds each row by its key instead of
-- hashing the chosen ones against a scan of the table. errors and meta as text:
-- nearly always '[]' and '{}', which the codec recognises without a JSON parse (two
-- parses per claimed job showed in profiles).
UPDATE {schema}.jobs AS j
SET state = 'running',
    attempt = CASE WHEN j.attempt BETWEEN 0 AND 999999999 THEN j.attempt + 1 ELSE 1 END,
    lease_token = CASE WHEN j.lease_token BETWEEN 0 AND 4611686018427387903
                       THEN j.lease_token + 1 ELSE 1 END,
    lease_expires_at = %(lease_expires_at)s, worker_id = %(worker_id)s, started_at = %(now)s
WHERE j.seq = ANY (ARRAY(SELECT seq FROM chosen))
RETURNING j.seq, j.id, j.queue, j.task, j.payload, j.state, j.priority, j.attempt, j.max_attempts,
          j.run_at, j.created_at, j.started_at, j.finished_at, j.lease_token, j.lease_expires_at,
          j.worker_id, j.unique_key, j.unique_for, j.result, j.errors::text, j.checkpoint,
          j.progress, j.cancel_requested, j.timeout, j.meta::text, j.aging, j.concurrency_key,
          j.concurrency_limit, j.rate_key, j.result_expires_at
-- name: ensure_rate_buckets
-- A bucket starts full. Run once per bucket and process, before its first claim.
INSERT INTO {schema}.rate_buckets (name, tokens, updated_at, rate, burst)
SELECT name, burst, %(now)s, rate, burst
FROM unnest(%(rate_keys)s::text[], %(rates)s::float8[], %(bursts)s::int[]) AS l(name, rate, burst)
ON CONFLICT (name) DO NOTHING

-- name: hold_rate_bucket
-- Backend.hold_rate_bucket: tokens as of a time that may be ahead. The row lock
-- orders it with the claims of the bucket (claim_rated_jobs locks it FOR UPDATE). A
-- bucket no claim made yet gets rate and burst 0 until its first claim declares them.
INSERT INTO {schema}.rate_buckets (name, tokens, updated_at, rate, burst)
VALUES (%(name)s, %(tokens)s, %(until)s, 0, 0)
ON CONFLICT (name) DO UPDATE SET tokens = excluded.tokens, updated_at = excluded.updated_at

-- name: claim_rated_jobs
-- claim_jobs for a worker that declares rate limits (docs/flow-control.md), still one
-- statement. The request's buckets are locked first (FOR UPDATE, in name order: no
-- deadlock), which serialises the claimers of one bucket and no one else. FOR UPDATE
-- returns each bucket's latest committed row, even one written after this
-- statement's snapshot (READ COMMITTED), so two claimers never spend the same tokens;
-- the jobs another claimer took meanwhile fail SKIP LOCKED's recheck of their state.
-- Each pass's candidates of a queue are its free lane plus each bucket's lane, as far
-- as the bucket's whole tokens go (jobs_rate_claim: a throttled bucket's backlog is
-- never walked), a bucket shared by several queues cut to its tokens in the
-- request's queue order; the second pass has the tokens the first left. Then the
-- lease, the buckets spent and stored back. The last column of every row is when a
-- bucket that still holds back a waiting job of these queues has its next token
-- (NULL: none); a claim that got nothing returns one row of NULLs but that.
WITH req AS ({claim_request}
), bucket_rows AS (
    SELECT b.name, l.rate, l.burst, b.tokens, b.updated_at
    FROM unnest(%(rate_keys)s::text[], %(rates)s::float8[], %(bursts)s::int[]) AS l(name, rate, burst)
    JOIN {schema}.rate_buckets AS b ON b.name = l.name
    ORDER BY b.name
    FOR UPDATE OF b
), buckets AS (
    -- conveyor.rules.rate_limits.refill, and ClaimBuckets.allowed's slack.
    SELECT name, rate, burst, updated_at, t.tokens, floor(t.tokens + 1e-6)::int AS allowed
    FROM bucket_rows, LATERAL (SELECT LEAST(burst::float8, tokens
                                            + GREATEST(0::float8, %(now)s - updated_at) * rate)
                               AS tokens) AS t
), first_cand AS (
    WITH lane AS ({first_lane}), allowance AS (SELECT name, allowed FROM buckets)
    {rated_cand}
), {first_pass}, second_cand AS (
    WITH lane AS ({second_lane}), allowance AS (
        SELECT b.name, b.allowed - (SELECT count(*) FROM first AS f WHERE f.rate_key = b.name)
               AS allowed
        FROM buckets AS b)
    {rated_cand}
), {second_pass}, {fair_advance}, spent AS (
    UPDATE {schema}.rate_buckets AS rb
    -- A bucket's time never goes back (a claimer that read the clock earlier may
    -- spend later): ClaimBuckets.as_of.
    SET tokens = GREATEST(0::float8, b.tokens - coalesce(t.n, 0)),
        updated_at = GREATEST(b.updated_at, %(now)s),
        rate = b.rate, burst = b.burst
    FROM buckets AS b LEFT JOIN (
        SELECT rate_key, count(*) AS n FROM chosen WHERE rate_key IS NOT NULL
        GROUP BY rate_key) AS t ON t.rate_key = b.name
    WHERE rb.name = b.name
    RETURNING rb.name, rb.tokens, rb.rate, rb.updated_at
), hint AS (
    -- From the bucket's time (ClaimBuckets.next_token_at), which a late claimer's
    -- `now` may be behind.
    SELECT min(s.updated_at + (1 - s.tokens) / s.rate) AS next_token_at
    FROM spent AS s
    -- The first entry of the bucket's lane in each queue (a LATERAL, in the index's
    -- order, LIMIT 1: as a plain EXISTS the planner chose a scan of the table).
    WHERE s.tokens + 1e-6 < 1 AND EXISTS (
        SELECT 1 FROM req AS r CROSS JOIN LATERAL (
            SELECT 1 FROM {schema}.jobs
            WHERE state = 'available' AND NOT parked AND queue = r.queue AND rate_key = s.name
              AND seq <> ALL (ARRAY(SELECT seq FROM chosen))
            ORDER BY {claim_order} LIMIT 1) AS one)
), claimed AS ({claim_lease}
)
SELECT claimed.*, hint.next_token_at FROM hint LEFT JOIN claimed ON true

-- fragment: rated_cand
-- The candidates of `lane`'s queues: each queue's free lane and each bucket's lane (as
-- far as its `allowance` goes), a bucket shared by several queues cut to its
-- allowance in the request's queue order; ranked within each queue (rn), its first n.
SELECT ord, seq, kf, rate_key, rn FROM (
    SELECT ord, n, seq, kf, rate_key,
           row_number() OVER (PARTITION BY ord ORDER BY k1 DESC, kf, k2, seq) AS rn
    FROM (
        SELECT l.*, a.allowed,
               row_number() OVER (PARTITION BY l.rate_key
                                  ORDER BY l.ord, l.k1 DESC, l.kf, l.k2, l.seq) AS nth
        FROM (
            SELECT lane.ord, lane.n, c.seq, c.k1, c.kf, c.k2, NULL::text AS rate_key
            FROM lane CROSS JOIN LATERAL ({free_lane}) AS c
            UNION ALL
            SELECT lane.ord, lane.n, c.seq, c.k1, c.kf, c.k2, a.name
            FROM lane JOIN allowance AS a ON a.allowed > 0 CROSS JOIN LATERAL (
                SELECT seq, {claim_keys}
                FROM {schema}.jobs
                WHERE state = 'available' AND NOT parked AND queue = lane.queue
                  AND rate_key = a.name AND seq <> ALL (lane.taken)
                ORDER BY {claim_order}
                LIMIT LEAST(lane.n, a.allowed)
                FOR UPDATE SKIP LOCKED) AS c
        ) AS l LEFT JOIN allowance AS a ON a.name = l.rate_key
    ) AS capped
    WHERE rate_key IS NULL OR nth <= allowed
) AS ranked
WHERE rn <= n

-- name: settle_jobs
-- A batch of attempt outcomes in one statement. Completed: store the result.
-- Refunded (snooze, release): back to waiting without using the attempt. Otherwise
-- (retry, dead, cancelled): append the attempt's error. Returns the rows applied;
-- the caller reports the rest as stale.
-- Rows are locked first, in id order: a worker heartbeats finished jobs until their
-- outcome is written, so its heartbeat and outcome writes (two connections) touch
-- the same rows; one lock order makes them queue instead of deadlocking.
WITH s AS (
    SELECT * FROM unnest(%(ids)b::text[], %(tokens)b::bigint[], %(states)b::text[],
                         %(results)b::text[], %(errors)b::jsonb[], %(run_ats)b::float8[],
                         %(refunds)b::bool[], %(result_ttls)b::float8[])
         AS s(id, token, state, result, error, run_at, refund, result_ttl)
), locked AS (
    -- By id (the unique index): cost follows the batch, not the number of running jobs.
    SELECT seq FROM {schema}.jobs
    WHERE id = ANY (%(ids)b::text[]) AND state = 'running'
    ORDER BY id
    FOR UPDATE
), settled AS (
UPDATE {schema}.jobs AS j
SET state = s.state,
    run_at = coalesce(s.run_at, j.run_at),
    lease_expires_at = NULL,
    result = CASE WHEN s.state = 'completed' THEN s.result ELSE j.result END,
    -- A result kept result_ttl seconds (conveyor.rules.results): its expiry, for expire_results.
    result_expires_at = CASE WHEN s.state = 'completed' AND s.result IS NOT NULL
                             THEN %(now)s + s.result_ttl ELSE j.result_expires_at END,
    finished_at = CASE WHEN s.state IN ('completed', 'dead', 'cancelled') THEN %(now)s
                       WHEN s.refund THEN j.finished_at END,
    attempt = CASE WHEN s.refund THEN greatest(j.attempt - 1, 0) ELSE j.attempt END,
    -- A history that is not an array ending with an error record (a corrupt one: the
    -- error written is then a CorruptJob naming it) starts again from this error.
    errors = CASE WHEN s.error IS NULL OR s.refund OR s.state = 'completed' THEN j.errors
                  WHEN jsonb_typeof(j.errors) = 'array'
                       AND coalesce(jsonb_typeof(j.errors -> -1), 'object') = 'object'
                  THEN j.errors || jsonb_build_array(s.error)
                  ELSE jsonb_build_array(s.error) END
FROM s
-- No "AND j.state = 'running'" here: `locked` took only running rows, and its lock keeps
-- them so. Restated, it made a cached generic plan guess one row for the jobs and join
-- them to the unnest by a nested loop that rescans it once per job (docs/performance.md).
WHERE j.seq = ANY (ARRAY(SELECT seq FROM locked))
  AND j.id = s.id AND j.lease_token = s.token
RETURNING j.id, j.state, j.dependants
), {after_ending}

-- name: heartbeat_jobs
-- Locks in id order, as settle_jobs does (see there).
WITH l AS (
    SELECT * FROM unnest(%(ids)b::text[], %(tokens)b::bigint[]) AS l(id, token)
), locked AS (
    SELECT seq FROM {schema}.jobs
    WHERE id = ANY (%(ids)b::text[]) AND state = 'running'
    ORDER BY id
    FOR UPDATE
)
UPDATE {schema}.jobs AS j SET lease_expires_at = %(lease_expires_at)s
FROM l
WHERE j.seq = ANY (ARRAY(SELECT seq FROM locked))  -- running, and kept so (see settle_jobs)
  AND j.id = l.id AND j.lease_token = l.token
RETURNING j.id, j.cancel_requested

-- name: checkpoint_job
UPDATE {schema}.jobs
SET checkpoint = coalesce(%(checkpoint)s, checkpoint), progress = coalesce(%(progress)s, progress)
WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'

-- name: check_lease
SELECT 1 FROM {schema}.jobs WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'

-- name: complete_job
-- Completes inside the caller's transaction (complete_in_transaction), releasing
-- dependants as settle_jobs does.
WITH settled AS (
    UPDATE {schema}.jobs
    SET state = 'completed', result = %(result)s, finished_at = %(now)s, lease_expires_at = NULL,
        result_expires_at = CASE WHEN %(result)s::text IS NOT NULL
                                 THEN %(now)s + %(result_ttl)s::float8 END
    WHERE id = %(id)s AND lease_token = %(token)s AND state = 'running'
    RETURNING id, state, dependants
), {after_ending}

-- name: find_leases
-- Running jobs whose lease expired, or held by workers known to be dead; the
-- rescuer settles them, fenced by their tokens. Walks the running jobs only
-- (jobs_lease is a partial index on them).
SELECT id, lease_token, worker_id, attempt, max_attempts, lease_expires_at
FROM {schema}.jobs
WHERE state = 'running'
  AND (lease_expires_at < %(expired_before)s::float8 OR worker_id = ANY (%(worker_ids)s::text[]))
LIMIT %(limit)s

-- name: prune_jobs
DELETE FROM {schema}.jobs
WHERE seq = ANY (ARRAY(
    SELECT seq FROM {schema}.jobs
    WHERE finished_at IS NOT NULL
      AND ((state IN ('completed', 'cancelled') AND finished_at < %(completed_before)s
            AND (unique_for IS NULL OR finished_at + unique_for < %(now)s))
           OR (state = 'dead' AND finished_at < %(dead_before)s))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))

-- name: expire_results
-- Results past their expiry, by the jobs_result_expiry index (migration 10), which
-- clearing a result takes the row out of; the job and its expiry stay.
UPDATE {schema}.jobs SET result = NULL
WHERE seq = ANY (ARRAY(
    SELECT seq FROM {schema}.jobs
    WHERE result_expires_at IS NOT NULL AND result IS NOT NULL
      AND result_expires_at <= %(now)s::float8
    ORDER BY result_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED))
RETURNING id

-- name: get_job
SELECT {job_columns}
FROM {schema}.jobs WHERE id = %(id)s

-- name: get_jobs
SELECT {job_columns}
FROM {schema}.jobs WHERE id = ANY(%(ids)s::text[])

-- name: cancel_waiting_job
-- An operator's cancel of one job that has not started: waiting, or blocked on its
-- parents (a workflow member); its dependants are released in the same statement.
WITH settled AS (
    UPDATE {schema}.jobs SET state = 'cancelled', finished_at = %(now)s
    WHERE id = %(id)s AND state IN ('blocked', 'scheduled', 'available', 'retryable')
    RETURNING id, state, dependants
), {after_ending}

-- name: request_cancel_running_job
UPDATE {schema}.jobs SET cancel_requested = true WHERE id = %(id)s AND state = 'running'

-- name: redrive_jobs
-- The dependants a redriven workflow member had cancelled are resumed in the same
-- statement (resume_dependants, migration 5); no call when none has dependants.
WITH redriven AS (
    UPDATE {schema}.jobs
    SET state = 'available', attempt = 0, run_at = %(now)s, finished_at = NULL,
        cancel_requested = false
    WHERE id = ANY(%(ids)s::text[]) AND state IN ('dead', 'cancelled')
    RETURNING id, dependants
)
SELECT {schema}.resume_dependants(array_agg(id ORDER BY id)) FROM redriven
WHERE dependants IS NOT NULL
HAVING count(*) > 0

-- name: delete_jobs
DELETE FROM {schema}.jobs
WHERE id = ANY(%(ids)s::text[]) AND state IN ('completed', 'cancelled', 'dead')
RETURNING id

-- name: count_by_queue_and_state
SELECT queue, state, count(*) FROM {schema}.jobs GROUP BY queue, state

-- name: oldest_available_by_queue
SELECT queue, min(run_at) FROM {schema}.jobs WHERE state = 'available' GROUP BY queue

-- name: throttled_by_queue
-- Available jobs with a rate limit bucket, from jobs_rate_claim.
SELECT queue, count(*) FROM {schema}.jobs
WHERE state = 'available' AND NOT parked AND rate_key IS NOT NULL GROUP BY queue

-- name: parked_by_queue
-- Available jobs parked behind their concurrency key, from jobs_parked.
SELECT queue, count(*) FROM {schema}.jobs WHERE state = 'available' AND parked GROUP BY queue

-- name: key_loads
-- Running and held (parked) jobs by concurrency key, of one queue or of every queue
-- (:queue NULL): for operators (flow_loads). Each half reads one partial index: the
-- running jobs from the key's slot holders (the restated state as in running_of_key),
-- the held ones from the parked index.
SELECT concurrency_key, count(*), 0 FROM {schema}.jobs
WHERE concurrency_key IS NOT NULL AND state IN ('running', 'available') AND NOT parked
  AND state = 'running' AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY concurrency_key
UNION ALL
SELECT concurrency_key, 0, count(*) FROM {schema}.jobs
WHERE state = 'available' AND parked AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY concurrency_key

-- name: throttled_by_bucket
-- Available jobs waiting for a rate limit bucket's tokens, by bucket (flow_loads).
SELECT rate_key, count(*) FROM {schema}.jobs
WHERE state = 'available' AND NOT parked AND rate_key IS NOT NULL
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
GROUP BY rate_key

-- name: queue_paused
SELECT paused FROM {schema}.queues WHERE name = %(queue)s

-- name: all_queue_flags
SELECT name, paused FROM {schema}.queues

-- name: count_shed
-- The jobs a full queue just shed, added to its counter (migration 11).
INSERT INTO {schema}.queues (name, paused, shed) VALUES (%(queue)s, false, %(n)s)
ON CONFLICT (name) DO UPDATE SET shed = {schema}.queues.shed + excluded.shed

-- name: shed_by_queue
SELECT name, shed FROM {schema}.queues WHERE shed > 0

-- name: set_queue_paused
INSERT INTO {schema}.queues (name, paused) VALUES (%(queue)s, %(paused)s)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused

-- name: force_state
-- Test hook for the conformance suite: proves the storage guard rejects illegal transitions.
UPDATE {schema}.jobs SET state = %(state)s WHERE id = %(id)s

-- name: filter_jobs
SELECT {job_columns}
FROM {schema}.jobs
WHERE {job_filter}
ORDER BY CASE WHEN %(oldest_finished_first)s::bool THEN coalesce(finished_at, 0) END, seq DESC
LIMIT %(limit)s OFFSET %(offset)s

-- name: list_jobs_newest_first
-- The admin listing: a plain ORDER BY seq DESC lets PostgreSQL walk an index backwards and
-- stop after :limit rows; the keyset cursor is a plain range on seq.
SELECT {job_columns}
FROM {schema}.jobs
WHERE {job_filter}
  -- <= the largest bigint, not < it: a row may hold it (a seq written by hand).
  AND seq <= coalesce(%(before_seq)s::bigint - 1, 9223372036854775807)
ORDER BY seq DESC
LIMIT %(limit)s OFFSET %(offset)s

-- name: seq_of_job
SELECT seq FROM {schema}.jobs WHERE id = %(id)s

-- name: count_filtered_jobs
SELECT count(*) FROM {schema}.jobs WHERE {job_filter}

-- name: task_names
SELECT DISTINCT task FROM {schema}.jobs WHERE {job_filter} ORDER BY task

-- name: cancel_waiting_jobs
-- Operator bulk cancel: the state guard again, since a chosen job may have been claimed.
-- A workflow member's dependants follow it, in the same statement.
WITH settled AS (
    UPDATE {schema}.jobs SET state = 'cancelled', finished_at = %(now)s
    WHERE id = ANY(%(ids)s::text[]) AND state IN ('scheduled', 'available', 'retryable')
    RETURNING id, state, dependants
), {after_ending}

-- name: listen
LISTEN {channel}

-- name: listen_done
LISTEN {done_channel}

-- fragment: live_record
-- A record counts only until its expiry (by the application clock).
(expires_at IS NULL OR expires_at > %(now)s)

-- name: running_of_key
-- How many jobs of a concurrency key run: what `jobs show` says a held-back job waits
-- for. From the index of the key's slot holders (a running job is never parked).
SELECT count(*) FROM {schema}.jobs
WHERE concurrency_key = %(key)s AND state IN ('running', 'available') AND NOT parked
  AND state = 'running'

-- name: get_record
SELECT value FROM {schema}.meta
WHERE namespace = %(namespace)s AND key = %(key)s AND {live_record}

-- name: list_records
SELECT key, value FROM {schema}.meta
WHERE namespace = %(namespace)s AND {live_record}
ORDER BY key

-- name: put_record
-- Expired records are swept on write (workers write every heartbeat), reads filter them.
WITH swept AS (
    DELETE FROM {schema}.meta WHERE expires_at IS NOT NULL AND expires_at <= %(now)s
)
INSERT INTO {schema}.meta (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, %(expires_at)s)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at

-- name: put_record_if_absent
-- Takes the key when no record holds it or the one there expired.
INSERT INTO {schema}.meta AS m (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(value)s, %(expires_at)s)
ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at
    WHERE m.expires_at IS NOT NULL AND m.expires_at <= %(now)s
RETURNING 1

-- name: compare_and_set_record
UPDATE {schema}.meta SET value = %(value)s, expires_at = %(expires_at)s
WHERE namespace = %(namespace)s AND key = %(key)s AND value = %(expected)s AND {live_record}
RETURNING 1

-- name: incr_record
-- A live record is incremented and keeps its expiry; an absent or expired one
-- starts at `amount` with the new expiry. A value that is not an integer raises
-- (invalid_text_representation), reported as a ValueError.
INSERT INTO {schema}.meta AS m (namespace, key, value, expires_at)
VALUES (%(namespace)s, %(key)s, %(amount)s::bigint::text, %(expires_at)s)
ON CONFLICT (namespace, key) DO UPDATE SET
    value = CASE WHEN m.expires_at IS NULL OR m.expires_at > %(now)s
                 THEN (m.value::bigint + %(amount)s::bigint)::text ELSE excluded.value END,
    expires_at = CASE WHEN m.expires_at IS NULL OR m.expires_at > %(now)s
                      THEN m.expires_at ELSE excluded.expires_at END
RETURNING value

-- name: delete_record
DELETE FROM {schema}.meta WHERE namespace = %(namespace)s AND key = %(key)s
RETURNING {live_record}

-- name: take_liveness_lock
-- A worker's liveness signal: a session-level advisory lock on its own connection,
-- held until the session ends (a clean stop, or the kernel closing the socket of a
-- killed process). The server's start time dates it: no lock taken before a
-- restart is judged after it (every session ended then, dead or not).
SELECT pg_try_advisory_lock(%(key1)s, %(key2)s) AS taken,
       extract(epoch FROM pg_postmaster_start_time())::text AS epoch

-- name: keep_liveness_session
-- Now and then on the liveness connection, so that no idle timeout ends it.
SELECT 1

-- name: liveness_locks_gone
-- Which candidate locks (key1, key2) nobody holds, by position, with the server's
-- start time. Reads pg_locks, so it never takes (nor steals) a worker's lock.
SELECT extract(epoch FROM pg_postmaster_start_time())::text AS epoch,
       ARRAY(SELECT k.i::int
             FROM unnest(%(keys1)s::int[], %(keys2)s::int[]) WITH ORDINALITY AS k(key1, key2, i)
             WHERE NOT EXISTS (
                 SELECT 1 FROM pg_locks l
                 WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
                   AND l.database = (SELECT oid FROM pg_database
                                     WHERE datname = current_database())
                   AND l.classid = k.key1::oid AND l.objid = k.key2::oid)) AS gone

-- name: assign_fair_vtimes
-- Tenant fairness (conveyor.rules.fairness), for a batch with fairness keys, before its
-- insert: reserve each (queue, key)'s vtimes, `steps` (the sum of its jobs' steps)
-- after max(its last vtime, its queue's vtime), and return the new last vtime; the
-- caller hands them out in batch order. Keys in order, so concurrent producers lock
-- them in one order. The queue's row is made here (the claim only updates it).
WITH n AS (
    SELECT u.queue, u.key, sum(u.step)::bigint AS steps
    FROM unnest(%(fair_queues)s::text[], %(fair_keys)s::text[], %(fair_steps)s::bigint[])
         AS u(queue, key, step)
    GROUP BY u.queue, u.key
), made AS (
    INSERT INTO {schema}.fair_queues (queue, vtime)
    SELECT DISTINCT queue, 0 FROM n ORDER BY queue
    ON CONFLICT (queue) DO NOTHING
)
INSERT INTO {schema}.fair_keys AS f (queue, key, last_vtime)
SELECT n.queue, n.key,
       coalesce((SELECT q.vtime FROM {schema}.fair_queues AS q WHERE q.queue = n.queue), 0)
       + n.steps
FROM n ORDER BY n.queue, n.key
-- max(last, queue) + steps, written as max(last - queue, 0) + (queue + steps)
ON CONFLICT (queue, key) DO UPDATE
SET last_vtime = GREATEST(f.last_vtime - coalesce(
        (SELECT q.vtime FROM {schema}.fair_queues AS q WHERE q.queue = f.queue), 0), 0)
    + excluded.last_vtime
RETURNING f.queue, f.key, f.last_vtime

-- Workflows (docs/workflows.md, conveyor.rules.dependencies): enqueue of jobs blocked on others.

-- name: lock_parents
-- The parents of a batch's dependants, locked in id order: a parent ending meanwhile
-- waits for this enqueue, then finds the dependant in its `dependants` (settle_jobs).
SELECT id, state FROM {schema}.jobs WHERE id = ANY(%(ids)s::text[]) ORDER BY id FOR UPDATE

-- name: insert_dependant
WITH inserted AS (
    INSERT INTO {schema}.jobs (id, queue, task, payload, state, priority, max_attempts, run_at,
                               created_at, finished_at, unique_for, timeout, meta, aging,
                               concurrency_key, concurrency_limit, rate_key,
                               pending_parents, allow_failure, parents, errors)
    VALUES (%(id)s, %(queue)s, %(task)s, %(payload)s, %(state)s, %(priority)s, %(max_attempts)s,
            %(run_at)s, %(now)s, CASE WHEN %(state)s = 'cancelled' THEN %(now)s::float8 END,
            %(unique_for)s, %(timeout)s, %(meta)s, %(aging)s, %(concurrency_key)s,
            %(concurrency_limit)s, %(rate_key)s, %(pending_parents)s,
            %(allow_failure)s, %(parents)s::text[],
            CASE WHEN %(error)s::jsonb IS NULL THEN '[]'::jsonb
                 ELSE jsonb_build_array(%(error)s::jsonb) END)
    ON CONFLICT (id) DO NOTHING
    RETURNING {job_columns}
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM inserted WHERE state = 'available'
)
SELECT *, (SELECT count(*) FROM woken) FROM inserted

-- name: insert_dependants
-- Every dependant of a batch in one statement (dependants.py), each in the state
-- conveyor.rules.dependencies.start_of gave it, in batch order. `dependants` holds the
-- batch's own dependants of each (rows inserted here cannot be updated here); the
-- `linked` part appends to the lists of the parents stored before this statement.
-- A conflicting id inserts nothing for that row: the caller sees fewer rows back
-- and redoes the dependants one at a time.
WITH new AS (
    SELECT * FROM unnest(%(ids)s::text[], %(queues)s::text[], %(tasks)s::text[],
                         %(payloads)s::text[], %(states)s::text[], %(priorities)s::int[],
                         %(max_attempts)s::int[], %(run_ats)s::float8[],
                         %(unique_fors)s::float8[], %(timeouts)s::float8[], %(metas)s::jsonb[],
                         %(agings)s::float8[], %(ckeys)s::text[], %(climits)s::int[],
                         %(rate_keys)s::text[], %(pendings)s::int[], %(allows)s::bool[],
                         %(parents)s::jsonb[], %(children)s::jsonb[], %(errors)s::jsonb[])
        WITH ORDINALITY AS n(id, queue, task, payload, state, priority, max_attempts, run_at,
                             unique_for, timeout, meta, aging, ckey, climit, rate_key,
                             pending, allow, parents, children, error, pos)
), inserted AS (
    INSERT INTO {schema}.jobs (id, queue, task, payload, state, priority, max_attempts, run_at,
                               created_at, finished_at, unique_for, timeout, meta, aging,
                               concurrency_key, concurrency_limit, rate_key,
                               pending_parents, allow_failure, parents, dependants, errors)
    SELECT n.id, n.queue, n.task, n.payload, n.state, n.priority, n.max_attempts, n.run_at,
           %(now)s, CASE WHEN n.state = 'cancelled' THEN %(now)s::float8 END,
           n.unique_for, n.timeout, n.meta, n.aging, n.ckey, n.climit, n.rate_key,
           n.pending, n.allow, ARRAY(SELECT jsonb_array_elements_text(n.parents)),
           CASE WHEN n.children IS NOT NULL
                THEN ARRAY(SELECT jsonb_array_elements_text(n.children)) END,
           CASE WHEN n.error IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(n.error) END
    FROM new AS n
    ORDER BY n.pos
    ON CONFLICT (id) DO NOTHING
    RETURNING {job_columns}
), linked AS (
    UPDATE {schema}.jobs AS j SET dependants = array_cat(j.dependants, l.children)
    FROM (SELECT parent, array_agg(child ORDER BY ord) AS children
          FROM unnest(%(link_parents)s::text[], %(link_children)s::text[])
               WITH ORDINALITY AS l(parent, child, ord)
          GROUP BY parent) AS l
    WHERE j.id = l.parent
    RETURNING 1
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted
                                               WHERE state = 'available') AS q
)
SELECT *, (SELECT count(*) FROM woken), (SELECT count(*) FROM linked) FROM inserted

-- name: add_dependant
UPDATE {schema}.jobs SET dependants = array_append(dependants, %(child)s::text)
WHERE id = ANY(%(ids)s::text[])

-- name: dependants_of
SELECT dependants FROM {schema}.jobs WHERE id = %(id)s

-- name: parents_of
SELECT parents FROM {schema}.jobs WHERE id = %(id)s

-- name: set_key_limit
-- An adaptive key's limit (migration 12); its trigger rebalances the key.
INSERT INTO {schema}.key_limits (concurrency_key, key_limit) VALUES (%(key)s, %(limit)s)
ON CONFLICT (concurrency_key) DO UPDATE SET key_limit = excluded.key_limit
WHERE key_limits.key_limit IS DISTINCT FROM excluded.key_limit

-- name: drop_key_limit
DELETE FROM {schema}.key_limits WHERE concurrency_key = %(key)s

-- name: key_limit
SELECT key_limit FROM {schema}.key_limits WHERE concurrency_key = %(key)s

-- Workflows (docs/workflows.md, conveyor.rules.dependencies). A job enqueued with depends_on
-- waits in the new state 'blocked' with the count of its parents that have not ended
-- (pending_parents) and whether a failed parent lets it run (allow_failure); each such
-- parent lists it in `dependants` (NULL for none: all the settle path of every other
-- job pays is that check).

ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check CHECK (state IN
    ('blocked', 'scheduled', 'available', 'running', 'retryable', 'completed', 'cancelled', 'dead'));
ALTER TABLE jobs ADD COLUMN dependants text[];
ALTER TABLE jobs ADD COLUMN parents text[];  -- what a redrive of one of them counts again
ALTER TABLE jobs ADD COLUMN pending_parents integer;
ALTER TABLE jobs ADD COLUMN allow_failure boolean NOT NULL DEFAULT false;

-- The state machine of conveyor/model/lifecycle.py with the blocked state's two ways out.
-- Keep in step with lifecycle.ALLOWED (tests/backends/postgres/test_pg_schema.py
-- compares the newest migration that defines it).
CREATE OR REPLACE FUNCTION check_job_transition() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.state || '>' || NEW.state) NOT IN (
        'available>cancelled', 'available>running', 'blocked>available', 'blocked>cancelled',
        'cancelled>available', 'cancelled>blocked', 'dead>available', 'retryable>available',
        'retryable>cancelled',
        'running>available', 'running>cancelled', 'running>completed', 'running>dead',
        'running>retryable', 'running>scheduled', 'scheduled>available', 'scheduled>cancelled')
    THEN
        RAISE EXCEPTION 'conveyor: illegal job state transition % -> % (job %)',
            OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'check_violation', HINT = 'see conveyor/model/lifecycle.py';
    END IF;
    RETURN NEW;
END
$$;

-- conveyor.rules.dependencies.release_dependants, called by the statement that ends the
-- parents (settle_jobs, complete_job), so it commits or rolls back with them.
-- children[i] is a dependant of parents[i], which ended in states[i]. Each
-- dependant is locked (FOR UPDATE, in the order given: the callers sort by child
-- id) before its count is read: when the last two parents of one dependant end at
-- the same instant in two transactions, the second waits for the first, then reads
-- the count the first left, so exactly one of them makes it available. A cancelled
-- dependant's own dependants are appended to the walk. Returns how many became
-- available. The error record is conveyor.rules.dependencies.dependency_error's.
CREATE FUNCTION release_dependants(children text[], parents text[], states text[],
                                   now float8, version text)
RETURNS integer LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    i integer := 1;
    unblocked integer := 0;
    found_allow boolean;
    found_pending integer;
    onwards text[];
    why jsonb;
BEGIN
    WHILE i <= coalesce(cardinality(children), 0) LOOP
        SELECT allow_failure, coalesce(pending_parents, 0) INTO found_allow, found_pending
        FROM jobs WHERE id = children[i] AND state = 'blocked' FOR UPDATE;
        IF FOUND THEN
            IF states[i] IN ('dead', 'cancelled') AND NOT found_allow THEN
                why := jsonb_build_object(
                    'attempt', 0, 'at', now, 'type', 'DependencyFailed',
                    'message', 'parent job ' || parents[i] || ' ended ' || states[i],
                    'traceback', '', 'worker_id', '', 'host', '', 'version', version,
                    'app_version', '');
                UPDATE jobs
                SET state = 'cancelled', finished_at = now,
                    errors = CASE WHEN jsonb_typeof(errors) = 'array'
                                  THEN errors || jsonb_build_array(why)
                                  ELSE jsonb_build_array(why) END
                WHERE id = children[i]
                RETURNING dependants INTO onwards;
                IF onwards IS NOT NULL THEN
                    children := children || onwards;
                    parents := parents || array_fill(children[i], ARRAY[cardinality(onwards)]);
                    states := states || array_fill('cancelled'::text, ARRAY[cardinality(onwards)]);
                END IF;
            ELSIF found_pending <= 1 THEN
                UPDATE jobs SET state = 'available', run_at = now, pending_parents = 0
                WHERE id = children[i];
                unblocked := unblocked + 1;
            ELSE
                UPDATE jobs SET pending_parents = found_pending - 1 WHERE id = children[i];
            END IF;
        END IF;
        i := i + 1;
    END LOOP;
    RETURN unblocked;
END
$$;

-- conveyor.rules.dependencies.resume_dependants, called by the redrive statement: the
-- dependants the redriven jobs had cancelled (cancelled, never run, their last error a
-- DependencyFailed) wait again for their parents (cancelled -> blocked, counting those
-- not ended), and onwards; one that another parent still fails (dead or cancelled,
-- without allow_failure) stays cancelled. Each dependant is locked before it is read,
-- as release_dependants does. Returns how many were resumed.
CREATE FUNCTION resume_dependants(redriven text[])
RETURNS integer LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    walk text[] := redriven;
    i integer := 1;
    resumed integer := 0;
    child text;
    kids text[];
    found_allow boolean;
    found_parents text[];
    failed integer;
    pending integer;
BEGIN
    WHILE i <= coalesce(cardinality(walk), 0) LOOP
        SELECT dependants INTO kids FROM jobs WHERE id = walk[i];
        FOREACH child IN ARRAY coalesce(kids, '{}'::text[]) LOOP
            SELECT allow_failure, parents INTO found_allow, found_parents
            FROM jobs
            WHERE id = child AND state = 'cancelled' AND attempt = 0
              AND jsonb_typeof(errors) = 'array' AND errors -> -1 ->> 'type' = 'DependencyFailed'
            FOR UPDATE;
            IF FOUND THEN
                SELECT count(*) FILTER (WHERE state IN ('dead', 'cancelled')),
                       count(*) FILTER (WHERE state NOT IN ('completed', 'dead', 'cancelled'))
                INTO failed, pending
                FROM jobs WHERE id = ANY(coalesce(found_parents, '{}'::text[]));
                IF found_allow OR failed = 0 THEN
                    UPDATE jobs SET state = 'blocked', finished_at = NULL, pending_parents = pending
                    WHERE id = child;
                    resumed := resumed + 1;
                    walk := walk || child;
                END IF;
            END IF;
        END LOOP;
        i := i + 1;
    END LOOP;
    RETURN resumed;
END
$$;

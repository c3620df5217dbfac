-- A dependant that release_dependants cancels (its parent ended dead or cancelled) is
-- woken for whoever waits on its result (FinishWakeups), as a job a settle ends is:
-- before, its waiters learnt of it only from their one-second re-read. The function
-- takes the done channel; the body is migration 6's otherwise.
DROP FUNCTION release_dependants(text[], text[], text[], float8, text);

CREATE FUNCTION release_dependants(children text[], parents text[], states text[],
                                   now float8, version text, done_channel text)
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
                -- Ended here, not by the statement's own settle: its waiters are woken
                -- here (as signal_ends does for the jobs the statement ended).
                IF EXISTS (SELECT 1 FROM meta
                           WHERE namespace = 'finish_waiters' AND key = children[i]) THEN
                    PERFORM pg_notify(done_channel, children[i]);
                END IF;
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

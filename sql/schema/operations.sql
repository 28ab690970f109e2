-- sql/schema/operations.sql: what operators and monitoring call: cancel, re-drive dead letters,
-- what the executors run now, counts and metrics, handing a role's jobs to another.

------------------------------------------------------------------------------
-- Cancel, and what runs now (C).
------------------------------------------------------------------------------
-- Cancel an enqueued job, or ask a running one to stop. Returns the resulting state.
CREATE FUNCTION vq_cancel(execution_id uuid) RETURNS text
    LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_cancel';

-- What the executors of this database are running now (shared memory).
CREATE FUNCTION vq.running_jobs_now(
    OUT pid integer, OUT execution_id uuid, OUT handler text, OUT attempt_number integer,
    OUT started_at timestamptz, OUT progress_total bigint, OUT progress_succeeded bigint,
    OUT progress_failed bigint, OUT cancel_requested boolean)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_running_jobs';

------------------------------------------------------------------------------
-- Re-drive dead letters (not granted to PUBLIC).
------------------------------------------------------------------------------
-- Re-enqueue dead-lettered jobs with fresh attempts (one REDRIVEN transition each): one job,
-- or every dead letter matching the filters (NULL = any). A job whose job_id an unfinished job
-- holds meanwhile is left dead-lettered. Returns the number re-enqueued.
CREATE FUNCTION vq_redrive(execution_id uuid) RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT vq.redrive(ARRAY(SELECT j.execution_id FROM vq.job j
                             WHERE j.execution_id OPERATOR(pg_catalog.=) vq_redrive.execution_id
                               AND j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state));
$$;

-- An untyped literal resolves to this form, not the one above: vq_redrive('<an execution id>')
-- names a handler that cannot exist, and is refused instead of redriving nothing.
CREATE FUNCTION vq_redrive(handler text DEFAULT NULL, queue text DEFAULT NULL,
                           finished_after timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_redrive');
    IF handler OPERATOR(pg_catalog.~*) '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       AND NOT EXISTS (SELECT FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) vq_redrive.handler) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008',
            MESSAGE = pg_catalog.format('vq_redrive: %L is an execution id, not a handler name', handler),
            HINT = pg_catalog.format('To redrive that job, pass a uuid: vq_redrive(%L::uuid).', handler);
    END IF;
    RETURN vq.redrive(ARRAY(SELECT j.execution_id FROM vq.job j
                             WHERE j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state
                               AND (vq_redrive.handler IS NULL OR j.handler OPERATOR(pg_catalog.=) vq_redrive.handler)
                               AND (vq_redrive.queue IS NULL OR j.queue OPERATOR(pg_catalog.=) vq_redrive.queue)
                               AND (vq_redrive.finished_after IS NULL
                                    OR j.finished_at OPERATOR(pg_catalog.>=) vq_redrive.finished_after)));
END
$$;

CREATE FUNCTION vq.redrive(ids uuid[]) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id uuid;
    n integer := 0;
    violated text;
BEGIN
    PERFORM vq.require_writable('vq_redrive');
    FOREACH id IN ARRAY coalesce(ids, '{}') LOOP
        BEGIN
            -- moved back to vq.job_active (DELETE + INSERT, as the workers move jobs)
            WITH d AS (
                DELETE FROM vq.job_finished j
                 WHERE j.execution_id OPERATOR(pg_catalog.=) id
                   AND j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state
                RETURNING j.*),
            r AS (
                INSERT INTO vq.job_active
                SELECT d.execution_id, 'ENQUEUED', d.priority, 0, d.max_attempts, now(), d.created_at,
                       now(), d.enqueued_by, d.queue, d.job_id, d.handler, d.handler_address, d.handler_function, d.payload,
                       d.metadata, d.started_at, NULL, NULL, NULL, NULL, false, d.last_error,
                       d.progress_total, d.progress_succeeded, d.progress_failed
                  FROM d
                RETURNING execution_id)
            INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state)
            SELECT r.execution_id, 0, 'REDRIVEN', 'DEAD_LETTER', 'ENQUEUED' FROM r;
            IF FOUND THEN
                n := n + 1;
            END IF;
        EXCEPTION WHEN unique_violation THEN
            GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
            IF violated IS DISTINCT FROM 'job_active_job_id_key' THEN
                RAISE;      -- not the case below: never swallowed
            END IF;
            -- an unfinished job of its role holds its job_id now: leave this one dead-lettered
        END;
    END LOOP;
    IF n > 0 THEN
        PERFORM vq.wake_executors(true);
    END IF;
    RETURN n;
END
$$;

------------------------------------------------------------------------------
-- Counts for monitoring. Rows of vq.job and vq.outbox (payloads, metadata, errors) are visible
-- per role; their counts are visible to every job to pg_monitor members and to roles an
-- administrator grants EXECUTE on vq.all_job_counts() / vq.all_outbox_counts(), and to
-- everyone else over the rows they may see. Every count says which it is (scope 'all' or
-- 'own'), so that zeros are never silently partial.
------------------------------------------------------------------------------
-- Per queue (every queue of vq.queue): its jobs by state, when its oldest due job was due and
-- its completions of the last minute, over the jobs of vq.job the caller may see. One scan of
-- vq.job; counts only (count(*), not count(j.*): no row is formed for them).
CREATE FUNCTION vq.visible_job_counts(
    OUT queue text, OUT paused boolean, OUT due bigint, OUT scheduled bigint, OUT running bigint,
    OUT completed bigint, OUT dead_letter bigint, OUT cancelled bigint,
    OUT oldest_due_at timestamptz, OUT completed_last_minute bigint)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.name, q.paused,
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'ENQUEUED' AND j.scheduled_at OPERATOR(pg_catalog.<=) pg_catalog.now()),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'ENQUEUED' AND j.scheduled_at OPERATOR(pg_catalog.>) pg_catalog.now()),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'RUNNING'),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'COMPLETED'),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'CANCELLED'),
           -- (finite times only: the API refuses infinite ones, and one written directly must not break the counts)
           pg_catalog.min(j.scheduled_at) FILTER (
               WHERE j.state OPERATOR(pg_catalog.=) 'ENQUEUED' AND j.scheduled_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                 AND pg_catalog.isfinite(j.scheduled_at)),
           count(*) FILTER (WHERE j.finished_at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute')
                              AND j.state OPERATOR(pg_catalog.=) 'COMPLETED')
      FROM vq.queue q
      LEFT JOIN vq.job j ON j.queue OPERATOR(pg_catalog.=) q.name
     GROUP BY q.name, q.paused
$$;

-- The same over every job: as the extension owner, whom row security does not filter.
CREATE FUNCTION vq.all_job_counts(
    OUT queue text, OUT paused boolean, OUT due bigint, OUT scheduled bigint, OUT running bigint,
    OUT completed bigint, OUT dead_letter bigint, OUT cancelled bigint,
    OUT oldest_due_at timestamptz, OUT completed_last_minute bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM vq.visible_job_counts() $$;

-- Outbox rows by status: those the caller may see, and (as the owner) all of them.
CREATE FUNCTION vq.visible_outbox_counts(OUT status text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$ SELECT o.status, count(*) FROM vq.outbox o GROUP BY o.status $$;

CREATE FUNCTION vq.all_outbox_counts(OUT status text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM vq.visible_outbox_counts() $$;

-- What the caller may count: every job with EXECUTE on vq.all_job_counts() (scope 'all'),
-- else the jobs it may see (scope 'own'). Decided here, as the caller: a plain query naming
-- both functions would need EXECUTE on both.
CREATE FUNCTION vq.job_counts(
    OUT queue text, OUT paused boolean, OUT due bigint, OUT scheduled bigint, OUT running bigint,
    OUT completed bigint, OUT dead_letter bigint, OUT cancelled bigint,
    OUT oldest_due_at timestamptz, OUT completed_last_minute bigint, OUT scope text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.has_function_privilege('vq.all_job_counts()', 'EXECUTE') THEN
        RETURN QUERY SELECT c.*, 'all'::text FROM vq.all_job_counts() c;
    ELSE
        RETURN QUERY SELECT c.*, 'own'::text FROM vq.visible_job_counts() c;
    END IF;
END
$$;

-- The same for outbox rows (EXECUTE on vq.all_outbox_counts()).
CREATE FUNCTION vq.outbox_counts(OUT status text, OUT n bigint, OUT scope text) RETURNS SETOF record
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.has_function_privilege('vq.all_outbox_counts()', 'EXECUTE') THEN
        RETURN QUERY SELECT c.*, 'all'::text FROM vq.all_outbox_counts() c;
    ELSE
        RETURN QUERY SELECT c.*, 'own'::text FROM vq.visible_outbox_counts() c;
    END IF;
END
$$;

-- Prometheus-style metric lines, each labelled with the scope of its count (see vq.job_counts).
-- vq.job is scanned once (the CTE is evaluated once).
CREATE FUNCTION vq_metrics() RETURNS SETOF text
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    WITH s AS MATERIALIZED (SELECT * FROM vq.job_counts())
    SELECT format('vq_jobs{queue="%s",state="%s",scope="%s"} %s', s.queue, st.state, s.scope, st.n)
      FROM s,
           LATERAL (VALUES ('due', s.due), ('scheduled', s.scheduled), ('running', s.running),
                           ('completed', s.completed), ('dead_letter', s.dead_letter),
                           ('cancelled', s.cancelled)) AS st(state, n)
    UNION ALL
    SELECT format('vq_oldest_due_seconds{queue="%s",scope="%s"} %s', s.queue, s.scope,
                  coalesce(round(extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_due_at)::numeric, 3), 0))
      FROM s
    UNION ALL
    SELECT format('vq_completed_last_minute{queue="%s",scope="%s"} %s', s.queue, s.scope, s.completed_last_minute)
      FROM s
    UNION ALL
    SELECT format('vq_outbox_rows{status="%s",scope="%s"} %s', o.status, o.scope, o.n)
      FROM vq.outbox_counts() o;
$$;

------------------------------------------------------------------------------
-- Reassign a role's jobs (not granted to PUBLIC).
------------------------------------------------------------------------------
-- Raise VQ201 when to_role holds an unfinished job with the job_id of one of from_role's
-- (vq_reassign_jobs would give it two), naming how many ids and some of them; or, with
-- must_raise, 40001 when none collides any more (a concurrent change got in the way).
CREATE FUNCTION vq.raise_job_id_conflict(from_role regrole, to_role regrole, must_raise boolean) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    ids text[];
BEGIN
    SELECT count(*), (array_agg(pg_catalog.quote_literal(f.job_id) ORDER BY f.job_id COLLATE "C"))[1:10] INTO n, ids
      FROM vq.job_active f
      JOIN vq.job_active t ON t.job_id OPERATOR(pg_catalog.=) f.job_id
                          AND t.enqueued_by OPERATOR(pg_catalog.=) to_role
     WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role;
    IF n > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ201',
            MESSAGE = format('vq_reassign_jobs: %s job_id(s) of role %s are also held by unfinished jobs of role %s',
                             n, from_role, to_role),
            DETAIL = format('job_id %s%s', array_to_string(ids, ', '), CASE WHEN n > 10 THEN ', ...' ELSE '' END),
            HINT = 'Nothing was reassigned: a role holds each job_id once among its unfinished jobs. Cancel '
                   'one job of each pair (vq_cancel), or let it finish, then call vq_reassign_jobs again.';
    END IF;
    IF must_raise THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('vq_reassign_jobs: jobs or job_id windows of role %s changed meanwhile', to_role),
            HINT = 'Nothing was reassigned; call vq_reassign_jobs again.';
    END IF;
END
$$;

-- Hand a role's unfinished jobs and undelivered outbox rows to another role (before DROP ROLE,
-- which is refused while a role has any in the database). They then run (are delivered) as the
-- new role, which needs EXECUTE on their handler functions like any enqueuer. All or nothing,
-- like REASSIGN OWNED: if to_role holds an unfinished job with the job_id of one of
-- from_role's, nothing changes hands (VQ201). The job_id windows (unique_for) of the jobs that
-- move go with them; where to_role has a window of its own for the id that has not ended, that
-- one stays and from_role's is dropped. Returns how many jobs and rows changed hands. Not
-- granted to PUBLIC.
CREATE FUNCTION vq_reassign_jobs(from_role regrole, to_role regrole) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moved uuid[];
    m bigint;
    violated text;
BEGIN
    PERFORM vq.require_writable('vq_reassign_jobs');
    IF from_role IS NULL OR to_role IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008', MESSAGE = 'vq_reassign_jobs: both roles are required';
    END IF;
    IF from_role OPERATOR(pg_catalog.=) to_role THEN
        RETURN 0;
    END IF;
    PERFORM vq.raise_job_id_conflict(from_role, to_role, false);
    BEGIN
        WITH j AS (UPDATE vq.job_active j SET enqueued_by = to_role
                    WHERE j.enqueued_by OPERATOR(pg_catalog.=) from_role RETURNING j.execution_id)
        SELECT coalesce(array_agg(j.execution_id), '{}') INTO moved FROM j;
        -- the windows of the moved jobs: to_role's own live window for an id wins
        DELETE FROM vq.job_id_window t
         WHERE t.enqueued_by OPERATOR(pg_catalog.=) to_role::oid AND t.until OPERATOR(pg_catalog.<=) now()
           AND t.job_id IN (SELECT f.job_id FROM vq.job_id_window f
                             WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role::oid
                               AND f.execution_id OPERATOR(pg_catalog.=) ANY (moved));
        UPDATE vq.job_id_window f SET enqueued_by = to_role::oid
         WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role::oid AND f.execution_id OPERATOR(pg_catalog.=) ANY (moved)
           AND NOT EXISTS (SELECT FROM vq.job_id_window t WHERE t.enqueued_by OPERATOR(pg_catalog.=) to_role::oid
                                                          AND t.job_id OPERATOR(pg_catalog.=) f.job_id);
        DELETE FROM vq.job_id_window f
         WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role::oid AND f.execution_id OPERATOR(pg_catalog.=) ANY (moved);
    EXCEPTION WHEN unique_violation THEN
        -- to_role enqueued one of the ids (or took a window for one) since the check above
        GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
        IF violated IS DISTINCT FROM 'job_active_job_id_key' AND violated IS DISTINCT FROM 'job_id_window_pkey' THEN
            RAISE;
        END IF;
        PERFORM vq.raise_job_id_conflict(from_role, to_role, true);
    END;
    UPDATE vq.outbox o SET published_by = to_role, updated_at = pg_catalog.clock_timestamp()
     WHERE o.published_by OPERATOR(pg_catalog.=) from_role AND o.status OPERATOR(pg_catalog.=) 'PENDING';
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN cardinality(moved) + m;
END
$$;

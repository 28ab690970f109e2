-- vq_job 0.1.0 -> 0.2.0: how a database at 0.1.0 becomes what a fresh install of 0.2.0
-- creates (sql/schema/ holds the fragments of 0.2.0; sql/README.md says how the two are kept
-- equal, and test/scenarios/upgrade.sh compares them).
\echo Use "ALTER EXTENSION vq_job UPDATE TO '0.2.0'" to load this file. \quit

------------------------------------------------------------------------------
-- The external-worker protocol (jobs.sql, consumers.sql, views.sql): workers take the jobs
-- of external (NOTIFY) handlers themselves, with a lease; the executors no longer claim or
-- announce them.
------------------------------------------------------------------------------
ALTER TABLE vq.job ADD COLUMN lease_until timestamptz;

-- The executors' claims cover function handlers' jobs only; workers take the others by queue
-- and handler. Announced jobs are no more, and with them the pull index.
DROP INDEX vq.job_claim_idx;
CREATE INDEX job_claim_idx ON vq.job_active (queue, priority DESC, scheduled_at, execution_id)
    WHERE state = 'ENQUEUED' AND handler_function IS NOT NULL;
CREATE INDEX job_take_idx ON vq.job_active (queue, handler, priority DESC, scheduled_at, execution_id)
    WHERE state = 'ENQUEUED' AND handler_function IS NULL;
DROP INDEX vq.job_pull_idx;

-- Jobs 0.1.0 announced and no consumer took: waiting again, in their place, attempt kept.
WITH withdrawn AS (
    UPDATE vq.job_active j SET state = 'ENQUEUED', started_at = NULL, updated_at = pg_catalog.clock_timestamp()
     WHERE j.state = 'RUNNING' AND j.worker_pid IS NULL AND j.consumer_claimed_at IS NULL
    RETURNING j.execution_id, j.attempt_number)
INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state, error)
SELECT execution_id, attempt_number, 'INTERRUPTED', 'RUNNING', 'ENQUEUED',
       'announced by vq_job 0.1.0 and not taken: waiting for a worker again (update to 0.2.0)'
  FROM withdrawn;
-- Jobs a consumer took: held under a lease of vq.execution_timeout_ms from the take (5 minutes
-- when that is 0), as 0.1.0 would have waited for their reply.
UPDATE vq.job_active j
   SET lease_until = j.consumer_claimed_at + coalesce(
           nullif(pg_catalog.current_setting('vq.execution_timeout_ms', true)::interval, interval '0'),
           interval '5 minutes')
 WHERE j.state = 'RUNNING' AND j.worker_pid IS NULL;

DROP FUNCTION vq_take(uuid, integer, text);

CREATE FUNCTION vq_take_jobs(handlers text[], max_jobs integer DEFAULT 1, lease interval DEFAULT NULL)
RETURNS TABLE (execution_id uuid, attempt integer, handler text, job_id text, payload jsonb,
               metadata jsonb, queue text, priority integer, max_attempts integer,
               scheduled_at timestamptz, lease_until timestamptz)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_take_jobs';
COMMENT ON FUNCTION vq_take_jobs(text[], integer, interval)
    IS 'take up to max_jobs due jobs of external handlers (priority, then due time), leased until lease_until';
CREATE FUNCTION vq_reply_jobs(execution_ids uuid[], attempts integer[], outcomes text[] DEFAULT NULL,
                              errors text[] DEFAULT NULL, retry_at timestamptz[] DEFAULT NULL)
RETURNS TABLE (execution_id uuid, attempt integer, ignored text)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_reply_jobs';
COMMENT ON FUNCTION vq_reply_jobs(uuid[], integer[], text[], text[], timestamptz[])
    IS 'reply for many taken jobs (complete, fail, retry, release); returns the replies that were ignored, with why';
CREATE FUNCTION vq_extend_leases(execution_ids uuid[], attempts integer[], lease interval DEFAULT NULL)
RETURNS TABLE (execution_id uuid, lease_until timestamptz, cancel_requested boolean)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_extend_leases';
COMMENT ON FUNCTION vq_extend_leases(uuid[], integer[], interval)
    IS 'extend the leases of taken jobs still held (a missing row: the lease was lost)';
CREATE FUNCTION vq_log_jobs(execution_ids uuid[], attempts integer[], levels text[], messages text[],
                            fields jsonb[] DEFAULT NULL) RETURNS integer
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_log_jobs';
COMMENT ON FUNCTION vq_log_jobs(uuid[], integer[], text[], text[], jsonb[])
    IS 'write log lines of taken jobs into vq.job_log; returns how many were written';
CREATE FUNCTION vq_progress_jobs(execution_ids uuid[], attempts integer[], total bigint[],
                                 succeeded bigint[], failed bigint[]) RETURNS integer
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_progress_jobs';
COMMENT ON FUNCTION vq_progress_jobs(uuid[], integer[], bigint[], bigint[], bigint[])
    IS 'set the progress counters of taken jobs (absolute values; NULL keeps a counter); returns the jobs updated';
COMMENT ON FUNCTION vq_complete(uuid, integer)
    IS 'reply for a taken job: done; false (with a WARNING saying why) when the reply is ignored';
COMMENT ON FUNCTION vq_fail(uuid, text, integer)
    IS 'reply for a taken job: failed (retry, backoff, dead letter as for function handlers)';
COMMENT ON FUNCTION vq_pull(text, integer)
    IS 'take up to max_jobs due jobs of one external handler (vq_take_jobs with the default lease)';

CREATE OR REPLACE VIEW vq.job_transition WITH (security_invoker = true) AS
SELECT t.id, t.execution_id, t.attempt_number, t.kind, t.from_state, t.to_state, t.error, t.at
  FROM vq.job_transition_data t
UNION ALL
SELECT NULL::bigint, j.execution_id, j.attempt_number, 'CLAIMED'::text,
       'ENQUEUED'::vq.job_state, 'RUNNING'::vq.job_state, NULL::text, j.consumer_claimed_at
  FROM vq.job j
 WHERE j.consumer_claimed_at IS NOT NULL
   AND j.state OPERATOR(pg_catalog.=) ANY ('{RUNNING,COMPLETED}'::vq.job_state[])
   AND NOT EXISTS (SELECT 1 FROM vq.job_transition_data c
                    WHERE c.execution_id OPERATOR(pg_catalog.=) j.execution_id
                      AND c.attempt_number OPERATOR(pg_catalog.=) j.attempt_number
                      AND c.kind OPERATOR(pg_catalog.=) 'CLAIMED')
UNION ALL
SELECT NULL::bigint, j.execution_id, j.attempt_number, 'COMPLETED'::text,
       CASE WHEN j.consumer_claimed_at IS NULL THEN 'ENQUEUED'::vq.job_state ELSE 'RUNNING'::vq.job_state END,
       'COMPLETED'::vq.job_state, NULL::text, j.finished_at
  FROM vq.job j
 WHERE j.state OPERATOR(pg_catalog.=) 'COMPLETED'::vq.job_state
   AND NOT EXISTS (SELECT 1 FROM vq.job_transition_data c
                    WHERE c.execution_id OPERATOR(pg_catalog.=) j.execution_id
                      AND c.kind OPERATOR(pg_catalog.=) 'COMPLETED');

CREATE OR REPLACE VIEW vq.running_jobs WITH (security_invoker = true) AS
SELECT r.execution_id, j.job_id, r.handler, j.queue, r.attempt_number, r.started_at,
       r.progress_total, r.progress_succeeded, r.progress_failed, r.cancel_requested,
       r.pid AS executor_pid, j.enqueued_by, NULL::pg_catalog.timestamptz AS lease_until
  FROM vq.running_jobs_now() r
  JOIN vq.job j ON j.execution_id OPERATOR(pg_catalog.=) r.execution_id
UNION ALL
SELECT j.execution_id, j.job_id, j.handler, j.queue, j.attempt_number, j.started_at,
       j.progress_total, j.progress_succeeded, j.progress_failed, j.cancel_requested,
       NULL::integer, j.enqueued_by, j.lease_until
  FROM vq.job j
 WHERE j.state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state AND j.worker_pid IS NULL;

-- Last: once this update commits, the launcher looks at this database again at once (its
-- executors stopped when the library and the installed version differed).
SELECT vq.launcher_wakeup();

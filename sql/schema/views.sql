-- sql/schema/views.sql: the views for monitoring and operators (vq.job_transition, the history
-- view, is in jobs.sql: vq.callback_event stores its rows).

-- Jobs running now with live progress: those the executors run (shared memory) and those
-- workers hold (lease_until); a role sees the jobs it may see in vq.job.
CREATE VIEW vq.running_jobs WITH (security_invoker = true) AS
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

-- Per queue: jobs by state, how late the oldest due job is, and what finished in the last
-- minute; scope 'all' (every job: pg_monitor and granted roles) or 'own' (the jobs the caller
-- may see), see vq.job_counts.
CREATE VIEW vq.queue_stats WITH (security_invoker = true) AS
SELECT c.queue, c.paused, c.due, c.scheduled, c.running, c.completed, c.dead_letter, c.cancelled,
       pg_catalog.now() OPERATOR(pg_catalog.-) c.oldest_due_at AS oldest_due_age,
       c.completed_last_minute, c.scope
  FROM vq.job_counts() c;

-- Dead-lettered jobs (nothing runs them again).
CREATE VIEW vq.dead_letters WITH (security_invoker = true) AS
SELECT execution_id, job_id, handler, queue, attempt_number, max_attempts, last_error,
       finished_at, payload, metadata, enqueued_by
  FROM vq.job WHERE state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state;

-- Effective settings of every registered handler (override > handler default > framework default).
CREATE VIEW vq.handler_settings WITH (security_barrier) AS
SELECT h.name,
       h.kind,
       h.address,
       coalesce(o.queue, h.queue, 'default') AS queue,
       coalesce(o.priority, h.priority, 0) AS priority,
       coalesce(o.max_attempts, h.max_attempts, 3) AS max_attempts,
       (h.queue IS NOT NULL OR h.priority IS NOT NULL OR h.max_attempts IS NOT NULL) AS is_contract,
       h.max_running,
       h.unique_for
  FROM vq.handler h
  LEFT JOIN vq.contract_override o ON o.handler OPERATOR(pg_catalog.=) h.name;

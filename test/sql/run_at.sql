-- run_at.sql: when a job is due, and which times are refused.
--   1. run_at NULL: due from the call (clock_timestamp() then), not from the transaction's start:
--      a job enqueued late in a long transaction comes after the jobs that became due meanwhile;
--   2. a role without a grant on the job's queue cannot backdate it: a past run_at
--      (vq_enqueue, vq_enqueue_many), a negative delay (vq_enqueue_in) or the past
--      scheduled_at of a DELAYED_JOB outbox row counts as the call, so the job comes after
--      every job already due at its priority, in claim order; a role granted the queue
--      (vq_grant_queue), and a superuser, keep the past time;
--   3. infinite or out-of-range times are refused with VQ008: run_at +-infinity
--      (vq_enqueue, vq_enqueue_many), a delay or unique_for that leaves the timestamp range,
--      scheduled_at +-infinity (vq_outbox_publish, vq_outbox_publish_to); nothing is written;
--   4. vq.queue_stats and vq_metrics() still work with a job whose scheduled_at is -infinity
--      (written directly: the API cannot).
\set SHOW_CONTEXT never
SET client_min_messages = warning;
CREATE ROLE ra_tenant;
CREATE ROLE ra_granted;
CREATE FUNCTION public.ra_fn(jsonb) RETURNS void LANGUAGE sql AS '';
GRANT EXECUTE ON FUNCTION public.ra_fn(jsonb) TO ra_tenant, ra_granted;
SELECT (vq_create_queue('ra_q')).name;
SELECT vq_register_handler('ra_h', 'public.ra_fn(jsonb)', 'ra_q');
SELECT vq_grant_queue('ra_q', 'ra_granted');
RESET client_min_messages;
-- claim order of the queue's waiting jobs, by job_id
CREATE FUNCTION pg_temp.claim_order() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(job_id, ' ' ORDER BY priority DESC, scheduled_at, execution_id)
      FROM vq.job WHERE queue = 'ra_q' AND state = 'ENQUEUED';
$$;

-- 1. NULL: due from the call
BEGIN;
SELECT pg_sleep(0.05);
SELECT clock_timestamp() AS t_call \gset
SELECT vq_enqueue('ra_h', '{}', job_id => 'late-in-transaction') AS late \gset
SELECT scheduled_at > now() AS after_transaction_start, scheduled_at >= :'t_call' AS from_the_call,
       created_at = now() AS created_at_transaction_start
  FROM vq.job WHERE execution_id = :'late';
ROLLBACK;

-- 2. already due: two jobs of another role
SELECT vq_enqueue('ra_h', '{}', job_id => 'due-1') IS NOT NULL AS enqueued;
SELECT vq_enqueue('ra_h', '{}', job_id => 'due-2') IS NOT NULL AS enqueued;
SET ROLE ra_tenant;
SELECT clock_timestamp() AS t_call \gset
SELECT vq_enqueue('ra_h', '{}', '2000-01-01', job_id => 'tenant-backdated') AS b1 \gset
SELECT vq_enqueue_in('ra_h', '{}', '-1 day', job_id => 'tenant-negative-delay') AS b2 \gset
SELECT cardinality(vq_enqueue_many('ra_h', ARRAY['{}'::jsonb], now() - interval '1 hour',
                                   job_ids => ARRAY['tenant-batch'])) AS batch;
SELECT vq_enqueue('ra_h', '{}', '2999-01-01', job_id => 'tenant-future') AS b4 \gset
SELECT vq_outbox_publish('ra_h', '{"o": 1}', '2000-01-01') AS o1 \gset
SELECT vq_outbox_publish_to('NOTIFY', 'ra_channel', '{}', '2000-01-01') AS o2 \gset
RESET ROLE;
-- an outbox row's job is due at its scheduled_at: stored as the publish's time (a NOTIFY row has no queue)
SELECT id = :o1 AS delayed_job_row, scheduled_at >= :'t_call' AS not_before_the_call
  FROM vq.outbox WHERE id IN (:o1, :o2) ORDER BY id;
DELETE FROM vq.outbox WHERE id IN (:o1, :o2);
SELECT job_id, scheduled_at >= :'t_call' AS not_before_the_call, scheduled_at < '2001-01-01' AS kept_in_the_past
  FROM vq.job WHERE queue = 'ra_q' AND job_id LIKE 'tenant-%' AND job_id <> 'tenant-future' ORDER BY job_id;
SELECT scheduled_at = '2999-01-01' AS future_kept FROM vq.job WHERE execution_id = :'b4';
SELECT pg_temp.claim_order() AS claim_order;
-- a role granted the queue, and a superuser, keep a past time (ahead of the others)
SET ROLE ra_granted;
SELECT vq_enqueue('ra_h', '{}', '2000-01-01', job_id => 'granted-backdated') IS NOT NULL AS enqueued;
RESET ROLE;
SELECT vq_enqueue('ra_h', '{}', '2000-01-02', job_id => 'superuser-backdated') IS NOT NULL AS enqueued;
SELECT job_id, scheduled_at FROM vq.job WHERE job_id IN ('granted-backdated', 'superuser-backdated') ORDER BY job_id;
SELECT pg_temp.claim_order() AS claim_order;

-- 3. refused (VQ008), nothing written
SELECT count(*) AS jobs_before FROM vq.job WHERE queue = 'ra_q';
SELECT vq_enqueue('ra_h', '{}', 'infinity');
\echo :SQLSTATE
SELECT vq_enqueue('ra_h', '{}', '-infinity');
\echo :SQLSTATE
SELECT vq_enqueue_many('ra_h', ARRAY['{}'::jsonb], '-infinity');
\echo :SQLSTATE
SELECT vq_enqueue_many('ra_h', ARRAY['{}'::jsonb], 'infinity');
\echo :SQLSTATE
SELECT vq_enqueue_in('ra_h', '{}', '178000000 years');
\echo :SQLSTATE
SELECT vq_enqueue_in('ra_h', '{}', '-178000000 years');
\echo :SQLSTATE
SELECT vq_enqueue_in('ra_h', '{}', '-7000 years');
\echo :SQLSTATE
SELECT vq_enqueue('ra_h', '{}', job_id => 'w', unique_for => '178000000 years');
\echo :SQLSTATE
SET ROLE ra_tenant;
SELECT vq_enqueue('ra_h', '{}', '-infinity');
\echo :SQLSTATE
RESET ROLE;
SELECT count(*) AS jobs_after FROM vq.job WHERE queue = 'ra_q';
SELECT count(*) AS outbox_before FROM vq.outbox;
SELECT vq_outbox_publish('ra_h', '{}', 'infinity');
\echo :SQLSTATE
SELECT vq_outbox_publish('ra_h', '{}', '-infinity');
\echo :SQLSTATE
SELECT vq_outbox_publish_to('NOTIFY', 'ra_channel', '{}', '-infinity');
\echo :SQLSTATE
SELECT count(*) AS outbox_after FROM vq.outbox;
-- the far ends of the range are fine
SELECT vq_enqueue('ra_h', '{}', '294276-12-31', job_id => 'far-future') IS NOT NULL AS far_future;
SELECT vq_enqueue_in('ra_h', '{}', '1000 years', job_id => 'in-1000-years') IS NOT NULL AS in_1000_years;

-- 4. monitoring survives an infinite time written directly
UPDATE vq.job SET scheduled_at = '-infinity' WHERE job_id = 'superuser-backdated';
SELECT queue, due, oldest_due_age > interval '20 years' AS oldest_due_is_2000 FROM vq.queue_stats WHERE queue = 'ra_q';
SELECT m ~ '^vq_oldest_due_seconds\{queue="ra_q",scope="all"\} [0-9.]+$' AS oldest_due_line
  FROM vq_metrics() m WHERE m LIKE 'vq_oldest_due_seconds{queue="ra_q",%';

-- Clean up (roles are cluster-wide).
SET client_min_messages = warning;
DELETE FROM vq.job WHERE queue = 'ra_q';
SELECT vq_unregister_handler('ra_h');
SELECT vq_drop_queue('ra_q');
REVOKE ALL ON FUNCTION public.ra_fn(jsonb) FROM ra_tenant, ra_granted;
DROP FUNCTION public.ra_fn(jsonb);
DROP ROLE ra_tenant, ra_granted;
RESET client_min_messages;

-- scripts/demo.sql: a short walk through vq_job, run by ./scripts/run against database vq_demo.
\set ON_ERROR_STOP 1
\pset footer off

\echo '== configuration: a queue for e-mails and a contract override, in the seed''s JSON shape'
SELECT vq_configure('{
  "queues":    {"emails": {"sleepDelayMs": 2000, "maxConcurrentJobs": 10, "backoffStrategy": "exponential",
                           "backoffBaseDelayMs": 10000, "backoffMaxDelayMs": 600000}},
  "contracts": {"send-welcome-email": {"maxAttempts": 5}}
}');
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy, backoff_base_delay_ms,
       backoff_max_delay_ms, instances
  FROM vq.queue ORDER BY name;

\echo '== a PL/pgSQL handler, registered with contract defaults (queue emails, priority 10)'
CREATE FUNCTION public.send_welcome_email(payload jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'welcome % (attempt % of %)', payload ->> 'email', ctx.attempt_number + 1, ctx.max_attempts;
END
$$;
SELECT vq_register_handler('send-welcome-email', 'public.send_welcome_email(jsonb, vq.job_context)',
                           queue => 'emails', priority => 10);
SELECT vq_register_notify_handler('deliver-webhook', 'webhooks');
SELECT * FROM vq.handler_settings ORDER BY name;

\echo '== enqueue in the application''s own transaction: now, in an hour, and idempotently by job_id'
BEGIN;
SELECT vq_context_set('tenant', '{"id": 42}');
SELECT vq_enqueue('send-welcome-email', '{"email": "ada@example.com"}') IS NOT NULL AS enqueued_now;
SELECT vq_enqueue_in('send-welcome-email', '{"email": "bob@example.com"}', interval '1 hour') IS NOT NULL AS enqueued_later;
SELECT vq_enqueue('deliver-webhook', '{"order": 7}', job_id => 'webhook-order-7') IS NOT NULL AS enqueued_once;
SELECT vq_enqueue('deliver-webhook', '{"order": 7}', job_id => 'webhook-order-7')
     = (SELECT execution_id FROM vq.job WHERE job_id = 'webhook-order-7') AS same_job_returned;
SELECT cardinality(vq_enqueue_many('send-welcome-email',
                                   ARRAY['{"email": "c@example.com"}', '{"email": "d@example.com"}']::jsonb[])) AS batch_size;
COMMIT;

\echo '== a rolled-back enqueue leaves nothing'
BEGIN;
SELECT vq_enqueue('send-welcome-email', '{"email": "never@example.com"}') IS NOT NULL AS enqueued;
ROLLBACK;

\echo '== the job rows'
SELECT job_id ~ '^delayed-' AS generated_job_id, handler, handler_address, queue, priority,
       max_attempts, state, attempt_number, scheduled_at > now() + interval '59 minutes' AS in_an_hour,
       payload, metadata, enqueued_by
  FROM vq.job ORDER BY created_at, scheduled_at, payload::text;

\echo '== resolution and the backoff table of queue emails'
SELECT * FROM vq_resolve_target('send-welcome-email');
SELECT n AS attempt, vq_backoff_delay(q.backoff_strategy, q.backoff_base_delay_ms, q.backoff_max_delay_ms, n) AS retry_delay
  FROM vq.queue q, generate_series(0, 6) n WHERE q.name = 'emails';

\echo '== a validation error (the message lists the registered handlers)'
\set ON_ERROR_STOP 0
SELECT vq_enqueue('send-welcome-mail', '{}');
\echo 'SQLSTATE' :LAST_ERROR_SQLSTATE

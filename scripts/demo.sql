-- scripts/demo.sql: a short walk through vq_job, run by ./scripts/run against database vq_demo.
\set ON_ERROR_STOP 1
\pset footer off

\echo '== configuration: a queue for e-mails and a contract override, in vq_configure''s JSON shape'
SELECT vq_configure('{
  "queues":    {"emails": {"sleepDelayMs": 2000, "maxConcurrentJobs": 10, "backoffStrategy": "exponential",
                           "backoffBaseDelayMs": 10000, "backoffMaxDelayMs": 600000}},
  "contracts": {"send-welcome-email": {"maxAttempts": 5}}
}');
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy, backoff_base_delay_ms,
       backoff_max_delay_ms, instances
  FROM vq.queue ORDER BY name;

\echo '== PL/pgSQL handlers, registered with contract defaults; one that always fails'
CREATE TABLE public.sent_emails (email text, attempt int, sent_at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.send_welcome_email(payload jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'sending welcome e-mail', jsonb_build_object('to', payload ->> 'email'));
    INSERT INTO public.sent_emails (email, attempt) VALUES (payload ->> 'email', ctx.attempt_number);
END
$$;
CREATE FUNCTION public.charge_card(payload jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('WARN', 'card gateway unreachable');
    RAISE EXCEPTION 'card % declined', payload ->> 'card';
END
$$;
SELECT vq_create_queue('payments', sleep_delay_ms => 500, backoff_strategy => 'FIXED', backoff_base_delay_ms => 300);
SELECT vq_register_handler('send-welcome-email', 'public.send_welcome_email(jsonb, vq.job_context)',
                           queue => 'emails', priority => 10);
SELECT vq_register_handler('charge-card', 'public.charge_card(jsonb)', queue => 'payments', max_attempts => 3);
SELECT vq_register_notify_handler('deliver-webhook', 'webhooks');
SELECT * FROM vq.handler_settings ORDER BY name;

\echo '== enqueue in the application''s own transaction: now, in 2 seconds, idempotently, in a batch, and a failing one'
BEGIN;
SELECT vq_context_set('tenant', '{"id": 42}');
SELECT vq_enqueue('send-welcome-email', '{"email": "ada@example.com"}') IS NOT NULL AS enqueued_now;
SELECT vq_enqueue_in('send-welcome-email', '{"email": "bob@example.com"}', interval '2 seconds') IS NOT NULL AS enqueued_later;
SELECT vq_enqueue('send-welcome-email', '{"email": "eve@example.com"}', job_id => 'welcome-eve') IS NOT NULL AS enqueued_once;
SELECT vq_enqueue('send-welcome-email', '{"email": "eve@example.com"}', job_id => 'welcome-eve')
     = (SELECT execution_id FROM vq.job WHERE job_id = 'welcome-eve') AS same_job_returned;
SELECT cardinality(vq_enqueue_many('send-welcome-email',
                                   ARRAY['{"email": "c@example.com"}', '{"email": "d@example.com"}']::jsonb[])) AS batch_size;
SELECT vq_enqueue('charge-card', '{"card": "4000-0000-0000-0002"}') IS NOT NULL AS enqueued_failing;
COMMIT;
SELECT vq_context_clear();

\echo '== a rolled-back enqueue leaves nothing'
BEGIN;
SELECT vq_enqueue('send-welcome-email', '{"email": "never@example.com"}') IS NOT NULL AS enqueued;
ROLLBACK;

\echo '== waiting (at most 15 s) for the background workers to finish every job'
DO $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '15 seconds';
BEGIN
    WHILE EXISTS (SELECT 1 FROM vq.job WHERE state IN ('ENQUEUED', 'RUNNING')) LOOP
        IF clock_timestamp() > deadline THEN
            RAISE EXCEPTION 'jobs still unfinished after 15 s';
        END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
END
$$;

\echo '== the job rows'
SELECT handler, payload, state, attempt_number, max_attempts, queue, priority,
       round(extract(epoch FROM finished_at - scheduled_at) * 1000) AS ms_after_due, last_error, metadata
  FROM vq.job ORDER BY created_at, scheduled_at, payload::text;

\echo '== what the handlers did, and their logs'
SELECT email, attempt FROM public.sent_emails ORDER BY sent_at;
SELECT j.handler, l.attempt_number, l.level, l.message, l.fields
  FROM vq.job_log l JOIN vq.job j USING (execution_id) ORDER BY l.id;

\echo '== every state transition of the failing job: three attempts, then DEAD_LETTER'
SELECT t.attempt_number, t.kind, t.from_state, t.to_state, t.error
  FROM vq.job_transition t JOIN vq.job j USING (execution_id)
 WHERE j.handler = 'charge-card' ORDER BY t.id;
SELECT handler, attempt_number, last_error FROM vq.dead_letters;

\echo '== resolution and the backoff table of queue emails'
SELECT * FROM vq_resolve_target('send-welcome-email');
SELECT n AS attempt, vq_backoff_delay(q.backoff_strategy, q.backoff_base_delay_ms, q.backoff_max_delay_ms, n) AS retry_delay
  FROM vq.queue q, generate_series(0, 6) n WHERE q.name = 'emails';

\echo '== a validation error (the message lists the registered handlers)'
\set ON_ERROR_STOP 0
SELECT vq_enqueue('send-welcome-mail', '{}');
\echo 'SQLSTATE' :LAST_ERROR_SQLSTATE

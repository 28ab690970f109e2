-- Operations and the handler API outside a handler: vq_cancel, pause/resume,
-- vq_log / progress / cancellation called from a plain session, the views.
-- (The workers serve no database during pg_regress: these rows stay put.)
\set SHOW_CONTEXT never
CREATE FUNCTION public.ops_h(p jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT vq_register_handler('ops_h', 'public.ops_h(jsonb)');

-- vq_cancel: an ENQUEUED job becomes CANCELLED with one CANCELLED transition.
SELECT vq_enqueue('ops_h', '{"n": 1}', now() + interval '1 hour') AS id1 \gset
SELECT vq_cancel(:'id1');
SELECT state, finished_at IS NOT NULL AS finished FROM vq.job WHERE execution_id = :'id1';
SELECT kind, from_state, to_state, attempt_number FROM vq.job_transition WHERE execution_id = :'id1';
-- A second cancel reports the state and writes nothing more.
SELECT vq_cancel(:'id1');
SELECT count(*) AS transitions FROM vq.job_transition WHERE execution_id = :'id1';
-- The cancelled job no longer holds its job_id.
SELECT vq_enqueue('ops_h', '{}', now() + interval '1 hour', job_id => 'ops-key') AS id2 \gset
SELECT vq_cancel(:'id2');
SELECT vq_enqueue('ops_h', '{}', now() + interval '1 hour', job_id => 'ops-key') AS id4 \gset
SELECT :'id4' <> :'id2' AS new_job;
-- Unknown job: NULL.
SELECT vq_cancel('00000000-0000-0000-0000-000000000000') IS NULL AS unknown_is_null;
-- A RUNNING job (claimed visibly) gets cancel_requested.
UPDATE vq.job SET state = 'RUNNING' WHERE execution_id = :'id4';
SELECT vq_cancel(:'id4');
SELECT state, cancel_requested FROM vq.job WHERE execution_id = :'id4';
SELECT count(*) AS transitions FROM vq.job_transition WHERE execution_id = :'id4';
UPDATE vq.job SET state = 'COMPLETED' WHERE execution_id = :'id4';

-- Only members of the enqueuing role may cancel; others learn nothing.
CREATE ROLE ops_a;
CREATE ROLE ops_b;
GRANT EXECUTE ON FUNCTION public.ops_h(jsonb) TO ops_a;
SET ROLE ops_a;
SELECT vq_enqueue('ops_h', '{}', now() + interval '1 hour') AS id3 \gset
RESET ROLE;
SET ROLE ops_b;
SELECT vq_cancel(:'id3') IS NULL AS not_visible_to_b;
RESET ROLE;
SELECT state FROM vq.job WHERE execution_id = :'id3';
SET ROLE ops_a;
SELECT vq_cancel(:'id3');
RESET ROLE;

-- The handler API needs a running handler.
SELECT vq_log('INFO', 'hello');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_progress_set_total(3);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_progress_add();
\echo :LAST_ERROR_SQLSTATE
SELECT vq_job_cancelled();
\echo :LAST_ERROR_SQLSTATE

-- Pause and resume.
SELECT vq_pause_queue('default');
SELECT paused FROM vq.queue WHERE name = 'default';
SELECT vq_resume_queue('default');
SELECT paused FROM vq.queue WHERE name = 'default';
SELECT vq_pause_queue('ops_nosuch');
\echo :LAST_ERROR_SQLSTATE
SET ROLE ops_b;
SELECT vq_pause_queue('default');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- The views exist and are empty here.
SELECT count(*) FROM vq.running_jobs;
SELECT count(*) FROM vq.dead_letters;

-- Re-drive: a dead letter gets fresh attempts (one REDRIVEN transition); others are untouched.
SELECT vq_enqueue('ops_h', '{"n": 9}', now() + interval '1 hour', job_id => 'ops-dead') AS id5 \gset
UPDATE vq.job SET state = 'DEAD_LETTER', attempt_number = 2, finished_at = now() WHERE execution_id = :'id5';
SELECT vq_redrive(:'id5'::uuid) AS redriven;
SELECT state, attempt_number, finished_at IS NULL AS unfinished, scheduled_at <= now() AS due
  FROM vq.job WHERE execution_id = :'id5';
SELECT kind, from_state, to_state, attempt_number FROM vq.job_transition WHERE execution_id = :'id5';
SELECT vq_redrive(:'id5'::uuid) AS redriven_again;
-- A bare literal resolves to the filter form: an execution id there is refused, not a no-op.
SELECT vq_redrive('00000000-0000-0000-0000-0000000000aa');
-- By filter; a dead letter whose job_id an unfinished job now holds stays dead-lettered.
UPDATE vq.job SET state = 'DEAD_LETTER', finished_at = now() WHERE execution_id = :'id5';
SELECT vq_enqueue('ops_h', '{"n": 10}', now() + interval '1 hour', job_id => 'ops-dead') IS NOT NULL AS holder;
SELECT vq_redrive(handler => 'ops_h') AS redriven_by_filter;
SELECT state FROM vq.job WHERE execution_id = :'id5';
SET ROLE ops_b;
SELECT vq_redrive(handler => 'ops_h');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- Queue statistics and metrics (counts only: ages vary).
SELECT queue, due, scheduled, running, completed, dead_letter, cancelled
  FROM vq.queue_stats WHERE queue = 'default';
SELECT line FROM vq_metrics() AS line WHERE line LIKE 'vq_jobs{queue="default"%' ORDER BY line;

-- Clean up.
DELETE FROM vq.job_transition_data WHERE execution_id IN (SELECT execution_id FROM vq.job WHERE handler = 'ops_h');
DELETE FROM vq.job WHERE handler = 'ops_h';
SELECT vq_unregister_handler('ops_h');
DROP FUNCTION public.ops_h(jsonb);
DROP ROLE ops_a;
DROP ROLE ops_b;

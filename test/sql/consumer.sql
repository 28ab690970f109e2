-- The consumer side of NOTIFY handlers, called by hand: vq_take, vq_pull, vq_complete, vq_fail
-- and vq_job_payload on jobs announced by hand (the workers serve no database during
-- pg_regress: an executor's announcement is simulated by marking the row RUNNING with no
-- worker_pid, as dispatch does).
\set SHOW_CONTEXT never
-- Ignored replies return false with a WARNING that names the (random) execution id: the
-- WARNING texts are checked by test/scenarios/notify_consumer_auth.sh, not here.
SET client_min_messages = error;
SELECT (vq_create_queue('cq_consumer', backoff_base_delay_ms => 1000)).name;
SELECT vq_register_notify_handler('cons_h', 'cons_ch', queue => 'cq_consumer', max_attempts => 2);
CREATE FUNCTION public.cons_fn(p jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT vq_register_handler('cons_fn', 'public.cons_fn(jsonb)');

-- Announce: what an executor does to a due job of a NOTIFY handler.
CREATE FUNCTION pg_temp.announce(id uuid) RETURNS void LANGUAGE sql AS $$
    UPDATE vq.job SET state = 'RUNNING', started_at = now(), worker_pid = NULL WHERE execution_id = id;
$$;

-- Bad arguments.
SELECT * FROM vq_take(NULL);
SELECT * FROM vq_pull(NULL);
SELECT * FROM vq_pull('cons_h', 0);
SELECT * FROM vq_pull('cons_h', 10001);
SELECT * FROM vq_pull('no_such_handler');
SELECT * FROM vq_pull('cons_fn');
SELECT vq_complete(NULL);
-- Unknown ids: no row from vq_take; replies are errors that name the id.
SELECT count(*) AS taken FROM vq_take('00000000-0000-0000-0000-000000000000');
SELECT vq_complete('00000000-0000-0000-0000-000000000000');
SELECT vq_fail('00000000-0000-0000-0000-000000000000', 'x');

-- A job that is only ENQUEUED is not taken, pulled or answered.
SELECT vq_enqueue('cons_h', '{"n": 1}', job_id => 'cons-1') AS id1 \gset
SELECT count(*) AS taken FROM vq_take(:'id1');
SELECT count(*) AS pulled FROM vq_pull('cons_h', 10);
SELECT vq_complete(:'id1');

-- Announced: taken once, at its attempt only; a pull then finds nothing.
SELECT pg_temp.announce(:'id1');
SELECT count(*) AS taken_at_attempt_1 FROM vq_take(:'id1', 1);
SELECT execution_id = :'id1' AS same_id, job_id, handler, attempt, payload FROM vq_take(:'id1', 0);
SELECT consumer_claimed_at IS NOT NULL AS claimed FROM vq.job WHERE execution_id = :'id1';
SELECT count(*) AS taken_again FROM vq_take(:'id1', 0);
SELECT count(*) AS pulled FROM vq_pull('cons_h', 10);
SELECT vq_job_payload(:'id1');
-- Completed: one COMPLETED transition; a second reply and a late take are ignored.
SELECT vq_complete(:'id1', 0);
SELECT state, attempt_number, finished_at IS NOT NULL AS finished FROM vq.job WHERE execution_id = :'id1';
-- (the WARNING says why; its DETAIL names the job)
SET client_min_messages = warning;
\set VERBOSITY terse
SELECT vq_complete(:'id1', 0);
SELECT vq_fail(:'id1', 'too late', 0);
\set VERBOSITY default
SET client_min_messages = error;
SELECT count(*) AS taken_after FROM vq_take(:'id1');
SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY at, kind) AS history
  FROM vq.job_transition WHERE execution_id = :'id1';

-- vq_pull takes announced jobs in priority, then scheduled_at order; vq_take then finds them taken.
SELECT vq_enqueue('cons_h', '{"n": 2}', job_id => 'cons-2') AS id2 \gset
SELECT vq_enqueue('cons_h', '{"n": 3}', priority => 5, job_id => 'cons-3') AS id3 \gset
SELECT pg_temp.announce(:'id2'), pg_temp.announce(:'id3');
SELECT job_id, attempt, payload FROM vq_pull('cons_h', 1);
SELECT job_id, attempt, payload FROM vq_pull('cons_h', 10);
SELECT count(*) AS taken FROM vq_take(:'id2');
-- A failure with an attempt left re-enqueues after the backoff; the last attempt dead-letters.
SELECT vq_fail(:'id2', 'boom', 0);
SELECT state, attempt_number, last_error, consumer_claimed_at IS NULL AS unclaimed,
       scheduled_at > now() AS backed_off
  FROM vq.job WHERE execution_id = :'id2';
SELECT pg_temp.announce(:'id2');
SELECT attempt FROM vq_take(:'id2', 1);
SELECT vq_fail(:'id2', 'boom again', 1);
SELECT state, attempt_number, last_error FROM vq.job WHERE execution_id = :'id2';
SELECT vq_complete(:'id3');
SELECT state FROM vq.job WHERE execution_id = :'id3';

-- A role that did not enqueue the job and holds no consumer grant learns nothing.
CREATE ROLE regress_cons_stranger;
CREATE ROLE regress_cons_worker;
SELECT vq_enqueue('cons_h', '{"secret": true}', job_id => 'cons-4') AS id4 \gset
SELECT pg_temp.announce(:'id4');
SET ROLE regress_cons_stranger;
SELECT count(*) AS taken FROM vq_take(:'id4');
SELECT count(*) AS pulled FROM vq_pull('cons_h', 10);
SELECT vq_job_payload(:'id4') IS NULL AS no_payload;
RESET ROLE;
SELECT consumer_claimed_at IS NULL AS untouched FROM vq.job WHERE execution_id = :'id4';
-- Granted as a consumer of the handler: takes and completes it.
SELECT vq_grant_consumer('cons_h', 'regress_cons_worker');
SET ROLE regress_cons_worker;
SELECT job_id, payload FROM vq_take(:'id4');
SELECT vq_complete(:'id4');
RESET ROLE;
SELECT state FROM vq.job WHERE execution_id = :'id4';
SELECT vq_revoke_consumer('cons_h', 'regress_cons_worker');
DROP ROLE regress_cons_stranger;
DROP ROLE regress_cons_worker;

-- Clean up: the other files share this database and list handlers, queues and dead letters.
DELETE FROM vq.job_transition_data t USING vq.job j
 WHERE t.execution_id = j.execution_id AND j.handler IN ('cons_h', 'cons_fn');
DELETE FROM vq.job WHERE handler IN ('cons_h', 'cons_fn');
SELECT vq_unregister_handler('cons_h'), vq_unregister_handler('cons_fn');
SELECT vq_drop_queue('cq_consumer');
DROP FUNCTION public.cons_fn(jsonb);

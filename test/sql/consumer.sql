-- The protocol of workers outside the server, called by hand: vq_take_jobs, vq_reply_jobs,
-- vq_extend_leases, vq_log_jobs, vq_progress_jobs, and the single-job forms vq_pull,
-- vq_complete, vq_fail, vq_job_payload (the workers serve no database during pg_regress: no
-- executor relays wake-ups or expires leases here; test/scenarios cover those).
\set SHOW_CONTEXT never
-- Ignored single-job replies return false with a WARNING that names the (random) execution
-- id: the WARNING texts are checked by the consumer scenarios, not here.
SET client_min_messages = error;
SELECT (vq_create_queue('cq_consumer', backoff_base_delay_ms => 1000, max_concurrent_jobs => 100)).name;
SELECT vq_register_notify_handler('cons_h', 'cons_ch', queue => 'cq_consumer', max_attempts => 2);
SELECT vq_register_notify_handler('cons_g', 'cons_ch', queue => 'cq_consumer');
CREATE FUNCTION public.cons_fn(p jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT vq_register_handler('cons_fn', 'public.cons_fn(jsonb)');

-- The arrays of the held jobs of a handler, for replies by hand.
CREATE FUNCTION pg_temp.held(h text, OUT ids uuid[], OUT attempts int[]) LANGUAGE sql AS $$
    SELECT coalesce(array_agg(execution_id ORDER BY job_id), '{}'), coalesce(array_agg(attempt_number ORDER BY job_id), '{}')
      FROM vq.job WHERE handler = h AND state = 'RUNNING';
$$;

-- Bad arguments.
SELECT * FROM vq_take_jobs(NULL);
SELECT * FROM vq_take_jobs('{}');
SELECT * FROM vq_take_jobs(ARRAY[NULL]::text[]);
SELECT * FROM vq_take_jobs(ARRAY['cons_h', 'cons_h']);
SELECT * FROM vq_take_jobs(ARRAY['bad name']);
SELECT * FROM vq_take_jobs(ARRAY['no_such_handler']);
SELECT * FROM vq_take_jobs(ARRAY['cons_fn']);
SELECT * FROM vq_take_jobs(ARRAY['cons_h'], 0);
SELECT * FROM vq_take_jobs(ARRAY['cons_h'], 10001);
SELECT * FROM vq_take_jobs(ARRAY['cons_h'], 1, '10 ms');
SELECT * FROM vq_take_jobs(ARRAY['cons_h'], 1, '25 hours');
SELECT * FROM vq_take_jobs(ARRAY['cons_h'], 1, 'infinity');
SELECT * FROM vq_reply_jobs(NULL, '{}');
SELECT * FROM vq_reply_jobs('{}', NULL);
SELECT * FROM vq_reply_jobs('{00000000-0000-0000-0000-000000000000}', '{}');
SELECT * FROM vq_reply_jobs('{00000000-0000-0000-0000-000000000000}', '{NULL}');
SELECT * FROM vq_reply_jobs('{00000000-0000-0000-0000-000000000000}', '{0}', '{done}');
SELECT * FROM vq_reply_jobs('{00000000-0000-0000-0000-000000000000}', '{0}', '{retry}', NULL, '{infinity}');
SELECT * FROM vq_extend_leases('{00000000-0000-0000-0000-000000000000}', '{0}', '0 s');
SELECT vq_log_jobs('{00000000-0000-0000-0000-000000000000}', '{0}', '{LOUD}', '{x}');
SELECT vq_log_jobs('{00000000-0000-0000-0000-000000000000}', '{0}', '{INFO}', '{NULL}');
SELECT vq_progress_jobs('{00000000-0000-0000-0000-000000000000}', '{0}', '{1,2}', NULL, NULL);
SELECT * FROM vq_pull(NULL);
SELECT * FROM vq_pull('cons_h', 0);
SELECT * FROM vq_pull('cons_fn');
SELECT vq_complete(NULL);
-- vq_take (0.1.0) is gone.
SELECT count(*) FROM pg_proc WHERE proname = 'vq_take';
-- Unknown ids: ignored rows (not told apart from other roles' jobs); single replies are errors.
SELECT * FROM vq_reply_jobs('{00000000-0000-0000-0000-000000000000}', '{0}');
SELECT * FROM vq_extend_leases('{00000000-0000-0000-0000-000000000000}', '{0}');
SELECT vq_log_jobs('{00000000-0000-0000-0000-000000000000}', '{0}', '{INFO}', '{x}') AS lines;
SELECT vq_complete('00000000-0000-0000-0000-000000000000');
SELECT vq_fail('00000000-0000-0000-0000-000000000000', 'x');
-- A take in a transaction of its own commits without waiting for its WAL flush; in the
-- caller's transaction block it leaves the commit as it is.
BEGIN;
SELECT count(*) FROM vq_take_jobs(ARRAY['cons_h']);
SHOW synchronous_commit;
ROLLBACK;
-- In a transaction that keeps its snapshot, a take is refused.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM vq_take_jobs(ARRAY['cons_h']);
ROLLBACK;

-- Takes: due jobs only, priority first, then due time; each once; RUNNING under a lease.
SELECT vq_enqueue('cons_h', '{"n": 1}', job_id => 'cons-1') AS id1 \gset
SELECT vq_enqueue('cons_h', '{"n": 2}', job_id => 'cons-2', priority => 5) AS id2 \gset
SELECT vq_enqueue('cons_h', '{"n": 3}', job_id => 'cons-3', run_at => now() + interval '1 hour') AS id3 \gset
SELECT vq_enqueue('cons_g', '{"n": 4}', job_id => 'cons-4', priority => 2) AS id4 \gset
SELECT job_id, attempt, handler, payload, queue, priority, max_attempts,
       lease_until BETWEEN now() + interval '59 s' AND now() + interval '61 s' AS leased_a_minute
  FROM vq_take_jobs(ARRAY['cons_h', 'cons_g'], 2, '1 minute');
SELECT job_id, attempt FROM vq_take_jobs(ARRAY['cons_h', 'cons_g'], 10);
SELECT count(*) AS none_left FROM vq_take_jobs(ARRAY['cons_h', 'cons_g'], 10);
SELECT job_id, state, started_at IS NOT NULL AS started, lease_until IS NOT NULL AS leased
  FROM vq.job WHERE handler IN ('cons_h', 'cons_g') ORDER BY job_id;
-- The lease asked for, or vq.execution_timeout_ms.
SELECT job_id, lease_until - started_at AS lease,
       lease_until - started_at = current_setting('vq.execution_timeout_ms')::interval AS default_lease
  FROM vq.job WHERE job_id IN ('cons-1', 'cons-4') ORDER BY job_id;
SELECT job_id, executor_pid, lease_until IS NOT NULL AS leased FROM vq.running_jobs ORDER BY job_id;
SELECT vq_job_payload(:'id1');

-- Leases extended, cancellation seen; logs and progress kept on the job.
SELECT count(*) AS extended, bool_or(cancel_requested) AS cancel_asked,
       min(e.lease_until) > now() + interval '59 min' AS an_hour
  FROM pg_temp.held('cons_h') h, vq_extend_leases(h.ids, h.attempts, '1 hour') e;
SELECT vq_cancel(:'id1');
SELECT execution_id = :'id1' AS is_id1, cancel_requested
  FROM pg_temp.held('cons_h') h, vq_extend_leases(h.ids, h.attempts) e ORDER BY 1;
SELECT vq_log_jobs(h.ids, h.attempts, array_fill('warning'::text, ARRAY[2]), '{one,two}',
                   ARRAY['{"k": 1}', NULL]::jsonb[]) AS lines
  FROM pg_temp.held('cons_h') h;
SELECT vq_progress_jobs(h.ids, h.attempts, '{10,20}', '{3,NULL}', NULL) AS updated FROM pg_temp.held('cons_h') h;
SELECT j.job_id, l.level, l.message, l.fields FROM vq.job_log l JOIN vq.job j USING (execution_id)
 WHERE j.handler = 'cons_h' ORDER BY j.job_id;
SELECT job_id, progress_total, progress_succeeded, progress_failed FROM vq.running_jobs
 WHERE handler = 'cons_h' ORDER BY job_id;

-- Replies: cons-1 (cancel asked) ends CANCELLED whatever it says; cons-2 fails (a retry after
-- the backoff); cons-4 completes. A second reply, or one for another attempt, is ignored.
SELECT * FROM vq_reply_jobs(ARRAY[:'id1', :'id2', :'id4']::uuid[], '{0,0,0}', '{complete,fail,complete}',
                            '{NULL,boom,NULL}');
SELECT job_id, ignored FROM vq_reply_jobs(ARRAY[:'id1', :'id2', :'id4']::uuid[], '{0,0,1}') r
  JOIN vq.job USING (execution_id) ORDER BY job_id;
SELECT job_id, state, attempt_number, last_error, scheduled_at > now() AS backed_off,
       lease_until IS NULL AS no_lease, progress_total
  FROM vq.job WHERE job_id IN ('cons-1', 'cons-2', 'cons-4') ORDER BY job_id;
-- The history: a completion a worker took implies its CLAIMED and COMPLETED transitions;
-- the other endings store them.
SELECT j.job_id, string_agg(t.kind || ':' || t.attempt_number || ':' || t.from_state || '>' || t.to_state,
                            ', ' ORDER BY t.at, t.id) AS history
  FROM vq.job_transition t JOIN vq.job j USING (execution_id)
 WHERE j.job_id IN ('cons-1', 'cons-2', 'cons-4') GROUP BY j.job_id ORDER BY j.job_id;

-- Retry at a chosen time, release (no attempt consumed), and a retry out of attempts.
UPDATE vq.job SET scheduled_at = now() - interval '1 s' WHERE execution_id = :'id2';
SELECT job_id, attempt FROM vq_take_jobs(ARRAY['cons_h']);
SELECT * FROM vq_reply_jobs(ARRAY[:'id2']::uuid[], '{1}', '{release}');
SELECT state, attempt_number, started_at IS NULL AS not_started, lease_until IS NULL AS no_lease
  FROM vq.job WHERE execution_id = :'id2';
SELECT job_id, attempt FROM vq_take_jobs(ARRAY['cons_h']);
SELECT * FROM vq_reply_jobs(ARRAY[:'id2']::uuid[], '{1}', '{retry}', '{later}', ARRAY[now() + interval '1 day']);
SELECT state, attempt_number, last_error FROM vq.job WHERE execution_id = :'id2';
-- vq_pull and vq_complete / vq_fail: the single-job forms.
UPDATE vq.job SET scheduled_at = now() - interval '1 s' WHERE execution_id = :'id3';
SELECT job_id, attempt, payload, cancel_requested FROM vq_pull('cons_h', 5);
SELECT vq_fail(:'id3', 'boom', 0);
SELECT state, attempt_number FROM vq.job WHERE execution_id = :'id3';
SELECT vq_complete(:'id3', 0) AS late_reply;

-- A role that did not enqueue the jobs and holds no consumer grant takes and learns nothing.
CREATE ROLE regress_cons_stranger;
CREATE ROLE regress_cons_worker;
SELECT vq_enqueue('cons_h', '{"secret": true}', job_id => 'cons-5') AS id5 \gset
SET ROLE regress_cons_stranger;
SELECT count(*) AS taken FROM vq_take_jobs(ARRAY['cons_h'], 10);
SELECT vq_job_payload(:'id5') IS NULL AS no_payload;
RESET ROLE;
SELECT vq_take_jobs(ARRAY['cons_h']) IS NOT NULL AS taken_by_owner;
SET ROLE regress_cons_stranger;
SELECT ignored FROM vq_reply_jobs(ARRAY[:'id5']::uuid[], '{0}');
SELECT count(*) AS extended FROM vq_extend_leases(ARRAY[:'id5']::uuid[], '{0}');
SELECT vq_log_jobs(ARRAY[:'id5']::uuid[], '{0}', '{INFO}', '{sneaky}') AS lines;
RESET ROLE;
SELECT state FROM vq.job WHERE execution_id = :'id5';
-- Granted as a consumer of the handler: replies for it.
SELECT vq_grant_consumer('cons_h', 'regress_cons_worker');
SET ROLE regress_cons_worker;
SELECT * FROM vq_reply_jobs(ARRAY[:'id5']::uuid[], '{0}');
RESET ROLE;
SELECT state FROM vq.job WHERE execution_id = :'id5';
SELECT vq_revoke_consumer('cons_h', 'regress_cons_worker');
DROP ROLE regress_cons_stranger;
DROP ROLE regress_cons_worker;

-- A queue's capacity bounds what takes hold; a paused queue gives nothing.
SELECT (vq_alter_queue('cq_consumer', max_concurrent_jobs => 2)).max_concurrent_jobs;
SELECT count(*) FROM (SELECT vq_enqueue('cons_g', jsonb_build_object('n', i)) FROM generate_series(1, 5) i) e;
SELECT count(*) AS taken FROM vq_take_jobs(ARRAY['cons_g'], 10);
SELECT count(*) AS taken_at_capacity FROM vq_take_jobs(ARRAY['cons_g'], 10);
SELECT count(*) AS ignored FROM pg_temp.held('cons_g') h, vq_reply_jobs(h.ids, h.attempts);
SELECT vq_pause_queue('cq_consumer');
SELECT count(*) AS taken_paused FROM vq_take_jobs(ARRAY['cons_g'], 10);
SELECT vq_resume_queue('cq_consumer');
SELECT count(*) AS taken_resumed FROM vq_take_jobs(ARRAY['cons_g'], 10);

-- Clean up: the other files share this database and list handlers, queues and dead letters.
DELETE FROM vq.job_log l USING vq.job j WHERE l.execution_id = j.execution_id AND j.handler IN ('cons_h', 'cons_g');
DELETE FROM vq.job_transition_data t USING vq.job j
 WHERE t.execution_id = j.execution_id AND j.handler IN ('cons_h', 'cons_g', 'cons_fn');
DELETE FROM vq.job WHERE handler IN ('cons_h', 'cons_g', 'cons_fn');
SELECT vq_unregister_handler('cons_h'), vq_unregister_handler('cons_g'), vq_unregister_handler('cons_fn');
SELECT vq_drop_queue('cq_consumer');
DROP FUNCTION public.cons_fn(jsonb);

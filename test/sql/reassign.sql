-- reassign.sql: vq_reassign_jobs is all or nothing, and job_id windows move with the jobs.
--   1. when the receiving role holds an unfinished job with the job_id of one of the giving
--      role's, nothing changes hands: VQ201, the message says how many ids collide, the
--      detail lists them (at most 10), the hint says what to do;
--   2. once the collisions are gone, every unfinished job and PENDING outbox row moves;
--   3. the job_id windows (unique_for) of the moved jobs move with them: the receiving role's
--      enqueue of such an id returns the moved job; where the receiving role has a live
--      window of its own for the id, that one stays (and the giver's is dropped); an ended
--      one of the receiver's gives way; a window of a finished job stays with its role;
--   4. a role given to itself: nothing to do (0);
--   5. vq_redrive keeps a dead letter whose job_id an unfinished job holds, but no longer
--      swallows any other unique violation.
\set SHOW_CONTEXT never
\set later '2999-01-01 00:00:00+00'
SET client_min_messages = warning;
CREATE ROLE rs_from;
CREATE ROLE rs_to;
CREATE FUNCTION public.rs_fn(jsonb) RETURNS void LANGUAGE sql AS '';
GRANT EXECUTE ON FUNCTION public.rs_fn(jsonb) TO rs_from, rs_to;
SELECT vq_register_handler('rs_h', 'public.rs_fn(jsonb)');
RESET client_min_messages;
CREATE FUNCTION pg_temp.jobs_by_role() RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(r || ':' || n, ' ' ORDER BY r)
      FROM (SELECT enqueued_by::text AS r, count(*) AS n FROM vq.job
             WHERE handler = 'rs_h' AND state = 'ENQUEUED' GROUP BY 1) s;
$$;

-- 1. collisions: nothing moves
SET ROLE rs_from;
SELECT count(vq_enqueue('rs_h', '{}', :'later', job_id => 'k' || g)) AS enqueued FROM generate_series(1, 14) g;
SELECT vq_outbox_publish('rs_h', '{}', :'later') IS NOT NULL AS published;
RESET ROLE;
SET ROLE rs_to;
SELECT count(vq_enqueue('rs_h', '{}', :'later', job_id => 'k' || g)) AS enqueued FROM generate_series(2, 13) g;
RESET ROLE;
SELECT vq_reassign_jobs('rs_from', 'rs_to');
\echo :SQLSTATE
SELECT pg_temp.jobs_by_role() AS jobs,
       (SELECT count(*) FROM vq.outbox WHERE destination = 'rs_h' AND published_by = 'rs_from'::regrole) AS rows_of_rs_from;

-- 2. the receiver's colliding jobs cancelled: everything moves
SELECT count(vq_cancel(execution_id)) AS cancelled FROM vq.job WHERE enqueued_by = 'rs_to'::regrole AND state = 'ENQUEUED';
SELECT vq_reassign_jobs('rs_from', 'rs_to') AS reassigned;
SELECT pg_temp.jobs_by_role() AS jobs,
       (SELECT count(*) FROM vq.outbox WHERE destination = 'rs_h' AND published_by = 'rs_to'::regrole) AS rows_of_rs_to;

-- 3. windows
SET ROLE rs_from;
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w1', unique_for => '1 hour') AS w1 \gset
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w2', unique_for => '1 hour') AS w2 \gset
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w3', unique_for => '1 hour') AS w3 \gset
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w4', unique_for => '1 hour') AS w4 \gset
RESET ROLE;
SELECT vq_cancel(:'w4') AS w4_finished;
SET ROLE rs_to;
-- a window of its own for w2 (its job finished), and an ended one for w3
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w2', unique_for => '1 hour') AS to_w2 \gset
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w3', unique_for => '1 hour') AS to_w3 \gset
RESET ROLE;
SELECT vq_cancel(:'to_w2') AS to_w2_finished, vq_cancel(:'to_w3') AS to_w3_finished;
UPDATE vq.job_id_window SET until = now() - interval '1 second' WHERE execution_id = :'to_w3';
SELECT vq_reassign_jobs('rs_from', 'rs_to') AS reassigned;
SELECT w.job_id, w.enqueued_by::regrole AS window_of,
       CASE w.execution_id WHEN :'w1' THEN 'w1 (moved)' WHEN :'w2' THEN 'w2 (moved)' WHEN :'w3' THEN 'w3 (moved)'
                           WHEN :'w4' THEN 'w4 (finished, of rs_from)' WHEN :'to_w2' THEN 'rs_to''s own w2'
                           WHEN :'to_w3' THEN 'rs_to''s own w3' END AS holds
  FROM vq.job_id_window w
 WHERE w.enqueued_by IN ('rs_from'::regrole, 'rs_to'::regrole) ORDER BY w.job_id, 2;
SET ROLE rs_to;
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w1', unique_for => '1 hour') = :'w1' AS w1_returns_moved_job;
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w3', unique_for => '1 hour') = :'w3' AS w3_returns_moved_job;
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'w2', unique_for => '1 hour') = :'to_w2' AS w2_returns_own_job;
RESET ROLE;

-- 4. to itself
SELECT vq_reassign_jobs('rs_to', 'rs_to') AS to_itself;

-- 5. vq_redrive: a held job_id keeps the dead letter; any other unique violation is raised
SET ROLE rs_to;
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'd1') AS d1 \gset
RESET ROLE;
UPDATE vq.job SET state = 'DEAD_LETTER', finished_at = now() WHERE execution_id = :'d1';
SET ROLE rs_to;
SELECT vq_enqueue('rs_h', '{}', :'later', job_id => 'd1') <> :'d1' AS new_holder_of_d1;
RESET ROLE;
SELECT vq_redrive(:'d1'::uuid) AS redriven_while_held;
-- (a row of vq.job_active with the dead letter's execution_id: not the job_id case)
INSERT INTO vq.job_active SELECT execution_id, 'ENQUEUED', priority, attempt_number, max_attempts, scheduled_at,
       created_at, updated_at, enqueued_by, queue, 'd1-copy', handler, handler_address, handler_function, payload,
       metadata FROM vq.job_finished WHERE execution_id = :'d1';
\set VERBOSITY terse
SELECT vq_redrive(:'d1'::uuid);
\echo :SQLSTATE
\set VERBOSITY default

-- Clean up (roles are cluster-wide).
SET client_min_messages = warning;
DELETE FROM vq.job WHERE handler = 'rs_h';
DELETE FROM vq.outbox WHERE destination = 'rs_h';
DELETE FROM vq.job_id_window WHERE enqueued_by IN ('rs_from'::regrole, 'rs_to'::regrole);
SELECT vq_unregister_handler('rs_h');
REVOKE ALL ON FUNCTION public.rs_fn(jsonb) FROM rs_from, rs_to;
DROP FUNCTION public.rs_fn(jsonb);
DROP ROLE rs_from, rs_to;
RESET client_min_messages;

-- roles.sql: a role and its unfinished work stay consistent.
--   1. DROP ROLE of a role with unfinished jobs or PENDING outbox rows in this database is
--      refused (2BP01) with the counts and a hint naming vq_reassign_jobs;
--   2. a role without CREATEROLE gets PostgreSQL's own error, learning nothing about the jobs;
--   3. vq_reassign_jobs (not executable by PUBLIC) hands the jobs and rows to another role;
--      DROP ROLE then succeeds, and the jobs run as the new role;
--   4. a role with only finished jobs can be dropped.
\set SHOW_CONTEXT never
\set later '2999-01-01 00:00:00+00'

CREATE ROLE rj_gone;
CREATE ROLE rj_heir;
CREATE ROLE rj_plain;       -- no CREATEROLE
CREATE ROLE rj_done;
CREATE FUNCTION rj_noop(jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('rj_h', 'rj_noop(jsonb)');

SET ROLE rj_gone;
SELECT count(*) AS enqueued FROM (
    SELECT vq_enqueue('rj_h', '{}', :'later') UNION ALL SELECT vq_enqueue('rj_h', '{}', :'later')) e;
SELECT vq_outbox_publish('rj_h', '{}', :'later') IS NOT NULL AS published;
RESET ROLE;

-- 1. refused, with the counts
DROP ROLE rj_gone;
\echo :LAST_ERROR_SQLSTATE
SELECT rolname FROM pg_roles WHERE rolname = 'rj_gone';

-- 2. a role that may not drop roles gets PostgreSQL's error
SET ROLE rj_plain;
DROP ROLE rj_gone;
SELECT vq_reassign_jobs('rj_gone', 'rj_plain');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- 3. reassigned, then dropped
SELECT vq_reassign_jobs('rj_gone', 'rj_heir') AS reassigned;
SELECT enqueued_by::text, count(*) FROM vq.job WHERE handler = 'rj_h' GROUP BY 1;
SELECT published_by::text, count(*) FROM vq.outbox WHERE destination = 'rj_h' GROUP BY 1;
DROP ROLE rj_gone;
SELECT vq_reassign_jobs(NULL, 'rj_heir');
\echo :LAST_ERROR_SQLSTATE

-- 4. finished jobs do not hold a role
SET ROLE rj_done;
SELECT vq_enqueue('rj_h', '{}', :'later') AS done_id \gset
RESET ROLE;
SELECT vq_cancel(:'done_id');
DROP ROLE rj_done;
SELECT count(*) AS rj_done_left FROM pg_roles WHERE rolname = 'rj_done';

-- Clean up (roles are cluster-wide).
SET client_min_messages = warning;
DELETE FROM vq.job WHERE handler = 'rj_h';
DELETE FROM vq.outbox WHERE destination = 'rj_h';
SELECT vq_unregister_handler('rj_h');
DROP FUNCTION rj_noop(jsonb);
DROP ROLE rj_heir, rj_plain;
RESET client_min_messages;

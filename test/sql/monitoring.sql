-- Monitoring: counts without payloads are visible to pg_monitor members and to roles granted
-- vq.all_job_counts() / vq.all_outbox_counts() (scope 'all'); every other role counts the jobs
-- and outbox rows it may see (scope 'own'); rows (payloads) stay per role.
-- (The workers serve no database during pg_regress: these rows stay put.)
\set SHOW_CONTEXT never
CREATE ROLE mon_tenant;      -- enqueues 3 due jobs and 1 scheduled, publishes 1 outbox row
CREATE ROLE mon_other;       -- enqueues 2 due jobs (one then dead-lettered), publishes 2 rows
CREATE ROLE mon_monitor;     -- a member of pg_monitor (as postgres_exporter usually is)
CREATE ROLE mon_granted;     -- granted EXECUTE on the two counting functions
CREATE ROLE mon_nothing;     -- nothing at all
GRANT pg_monitor TO mon_monitor;
GRANT EXECUTE ON FUNCTION vq.all_job_counts(), vq.all_outbox_counts() TO mon_granted;
SELECT vq_create_queue('mon_q') IS NOT NULL AS queue;
CREATE FUNCTION public.mon_h(p jsonb) RETURNS void LANGUAGE sql AS 'SELECT';
SELECT vq_register_handler('mon_h', 'public.mon_h(jsonb)', queue => 'mon_q');
SET ROLE mon_tenant;
SELECT count(vq_enqueue('mon_h', '{"secret": "tenant"}')) AS due FROM generate_series(1, 3);
SELECT vq_enqueue('mon_h', '{"secret": "tenant"}', now() + interval '1 hour') IS NOT NULL AS scheduled;
SELECT vq_outbox_publish('mon_h', '{"secret": "tenant"}', now() + interval '1 hour') IS NOT NULL AS published;
SET ROLE mon_other;
SELECT count(vq_enqueue('mon_h', '{"secret": "other"}')) AS due FROM generate_series(1, 2);
SELECT count(vq_outbox_publish('mon_h', '{"secret": "other"}', now() + interval '1 hour')) AS published
  FROM generate_series(1, 2);
RESET ROLE;
UPDATE vq.job SET state = 'DEAD_LETTER', finished_at = now()
 WHERE execution_id = (SELECT execution_id FROM vq.job WHERE handler = 'mon_h' AND enqueued_by = 'mon_other'::regrole
                        ORDER BY execution_id LIMIT 1);
-- What every outbox row counts, as the superuser sees it (other tests may have left some).
SELECT string_agg(status || '=' || n, ',' ORDER BY status) AS outbox_all
  FROM (SELECT status, count(*) AS n FROM vq.outbox GROUP BY status) o \gset

-- The superuser: every job (scope all).
SELECT queue, due, scheduled, running, completed, dead_letter, cancelled, scope
  FROM vq.queue_stats WHERE queue = 'mon_q';
-- A pg_monitor member: every count, no row.
SET ROLE mon_monitor;
SELECT queue, due, scheduled, running, completed, dead_letter, cancelled, scope
  FROM vq.queue_stats WHERE queue = 'mon_q';
SELECT regexp_replace(line, '^(vq_oldest_due_seconds.*) [0-9.]+$', '\1 <age>') AS line
  FROM vq_metrics() AS line WHERE line LIKE '%queue="mon_q"%' ORDER BY line;
SELECT string_agg(status || '=' || n, ',' ORDER BY status) = :'outbox_all' AS outbox_counts_all,
       bool_and(scope = 'all') AS scope_all
  FROM vq.outbox_counts();
SELECT count(*) FILTER (WHERE line LIKE 'vq_outbox_rows{%,scope="all"} %') = count(*) AS outbox_lines_all
  FROM vq_metrics() AS line WHERE line LIKE 'vq_outbox_rows%';
SELECT (SELECT count(*) FROM vq.job WHERE handler = 'mon_h') AS job_rows,
       (SELECT count(*) FROM vq.outbox WHERE destination = 'mon_h') AS outbox_rows,
       (SELECT count(*) FROM vq.dead_letters WHERE handler = 'mon_h') AS dead_letter_rows;
RESET ROLE;
-- A role granted the two counting functions: the same.
SET ROLE mon_granted;
SELECT queue, due, scheduled, running, completed, dead_letter, cancelled, scope
  FROM vq.queue_stats WHERE queue = 'mon_q';
SELECT line FROM vq_metrics() AS line WHERE line LIKE 'vq_jobs{queue="mon_q",state="due"%';
SELECT string_agg(status || '=' || n, ',' ORDER BY status) = :'outbox_all' AS outbox_counts_all
  FROM vq.outbox_counts();
SELECT count(*) AS job_rows FROM vq.job WHERE handler = 'mon_h';
RESET ROLE;
-- A tenant: its own jobs only, and says so.
SET ROLE mon_tenant;
SELECT queue, due, scheduled, running, completed, dead_letter, cancelled, scope
  FROM vq.queue_stats WHERE queue = 'mon_q';
SELECT regexp_replace(line, '^(vq_oldest_due_seconds.*) [0-9.]+$', '\1 <age>') AS line
  FROM vq_metrics() AS line WHERE line LIKE '%queue="mon_q"%' ORDER BY line;
SELECT status, n, scope FROM vq.outbox_counts();
SELECT count(*) AS own_job_rows FROM vq.job WHERE handler = 'mon_h';
SELECT vq.all_job_counts();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE mon_other;
SELECT queue, due, scheduled, dead_letter, scope FROM vq.queue_stats WHERE queue = 'mon_q';
RESET ROLE;
-- A role with nothing: zeros, scope own; the counting functions are closed to it.
SET ROLE mon_nothing;
SELECT queue, due, scheduled, running, completed, dead_letter, cancelled, scope
  FROM vq.queue_stats WHERE queue = 'mon_q';
SELECT line FROM vq_metrics() AS line WHERE line LIKE 'vq_jobs{queue="mon_q",state="due"%';
SELECT count(*) AS outbox_lines FROM vq_metrics() AS line WHERE line LIKE 'vq_outbox_rows%';
SELECT vq.all_job_counts();
\echo :LAST_ERROR_SQLSTATE
SELECT vq.all_outbox_counts();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- Revoking the grant (or the membership) brings the caller back to its own counts.
REVOKE EXECUTE ON FUNCTION vq.all_job_counts(), vq.all_outbox_counts() FROM mon_granted;
SET ROLE mon_granted;
SELECT queue, due, scope FROM vq.queue_stats WHERE queue = 'mon_q';
RESET ROLE;

-- Clean up.
DELETE FROM vq.job WHERE handler = 'mon_h';
DELETE FROM vq.outbox WHERE destination = 'mon_h';
SELECT vq_unregister_handler('mon_h');
SELECT vq_drop_queue('mon_q');
DROP FUNCTION public.mon_h(jsonb);
DROP ROLE mon_tenant, mon_other, mon_monitor, mon_granted, mon_nothing;

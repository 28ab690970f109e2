-- matrix.sql (pgTAP): who may do what, cell by cell. Roles: a superuser (here also the
-- extension owner), a queue administrator (granted the queue functions), the owner of a
-- handler function, an enqueuer (EXECUTE on the function, a producer grant on the NOTIFY
-- handler, a queue grant), a consumer of the NOTIFY handler, a monitoring role (pg_monitor),
-- and an unrelated role. Each action is run as each role and must give the listed result:
-- a value, or ERROR with a SQLSTATE. README's Security section summarises the same table.
-- One transaction, rolled back (roles included).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS vq_job;
RESET client_min_messages;

BEGIN;
SET LOCAL client_min_messages = error;   -- (the ignored replies' WARNINGs)

CREATE ROLE m_qadmin;
CREATE ROLE m_howner;
CREATE ROLE m_enq;
CREATE ROLE m_cons;
CREATE ROLE m_mon IN ROLE pg_monitor;
CREATE ROLE m_stranger;
CREATE ROLE m_other;        -- only a grantee in the "grant" row
SELECT current_user AS m_super \gset
GRANT EXECUTE ON FUNCTION vq_create_queue(text, integer, integer, text, integer, integer, integer),
                         vq_alter_queue(text, integer, integer, text, integer, integer, integer),
                         vq_drop_queue(text) TO m_qadmin;

CREATE FUNCTION public.m_fn(jsonb) RETURNS void LANGUAGE sql AS '';
ALTER FUNCTION public.m_fn(jsonb) OWNER TO m_howner;
REVOKE EXECUTE ON FUNCTION public.m_fn(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.m_fn(jsonb) TO m_enq;
CREATE FUNCTION public.m_pub(jsonb) RETURNS void LANGUAGE sql AS '';   -- EXECUTE for everyone
SELECT vq_create_queue('m_q') IS NOT NULL AS q1, vq_create_queue('m_q2') IS NOT NULL AS q2;
SELECT vq_register_handler('m_h', 'public.m_fn(jsonb)', queue => 'm_q');
SELECT vq_register_handler('m_p', 'public.m_pub(jsonb)', queue => 'm_q');
SELECT vq_register_notify_handler('m_n', 'm_channel', queue => 'm_q');
SELECT vq_grant_producer('m_n', 'm_enq');
SELECT vq_grant_queue('m_q2', 'm_enq');
SELECT vq_grant_consumer('m_n', 'm_cons');

-- the enqueuer's jobs (far in the future: no worker runs them), one cancelled (a transition)
SET ROLE m_enq;
SELECT vq_enqueue('m_n', '{"secret": 1}', '2999-01-01') AS m_notify \gset
SELECT vq_enqueue('m_h', '{}', '2999-01-01') AS m_cancelled \gset
SELECT vq_enqueue('m_h', '{}', '2999-01-01') AS m_target \gset
SELECT vq_outbox_publish('m_h', '{}', '2999-01-01') AS m_row \gset
RESET ROLE;
SELECT vq_cancel(:'m_cancelled') AS cancelled;

-- run an action as a role: its first column as text, or 'ERROR <sqlstate>'
CREATE FUNCTION m_run(r text, q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v text;
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', r);
    BEGIN
        EXECUTE q INTO v;
        v := coalesce(v, 'NULL');
    EXCEPTION WHEN OTHERS THEN
        v := 'ERROR ' || SQLSTATE;
    END;
    RESET ROLE;
    RETURN v;
END $$;

CREATE TEMP TABLE m_cells (ord serial, action text, sql text, super text, qadmin text, howner text,
                           enq text, cons text, mon text, stranger text);
INSERT INTO m_cells (action, sql, super, qadmin, howner, enq, cons, mon, stranger) VALUES
  ('enqueue, function handler',
   $$SELECT (vq_enqueue('m_h', '{}', '2999-01-01') IS NOT NULL)::text$$,
   'true', 'ERROR 42501', 'true', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('enqueue, NOTIFY handler',
   $$SELECT (vq_enqueue('m_n', '{}', '2999-01-01') IS NOT NULL)::text$$,
   'true', 'ERROR 42501', 'ERROR 42501', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('enqueue into another queue than the handler''s',
   $$SELECT (vq_enqueue('m_p', '{}', '2999-01-01', queue => 'm_q2') IS NOT NULL)::text$$,
   'true', 'ERROR 42501', 'ERROR 42501', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('enqueue with a priority above the handler''s',
   $$SELECT (vq_enqueue('m_p', '{}', '2999-01-01', queue => 'm_q2', priority => 9) IS NOT NULL)::text$$,
   'true', 'ERROR 42501', 'ERROR 42501', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('publish to the outbox, function handler',
   $$SELECT (vq_outbox_publish('m_h', '{}', '2999-01-01') IS NOT NULL)::text$$,
   'true', 'ERROR 42501', 'true', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('publish to the outbox, NOTIFY handler',
   $$SELECT (vq_outbox_publish('m_n', '{}', '2999-01-01') IS NOT NULL)::text$$,
   'true', 'ERROR 42501', 'ERROR 42501', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('configure a queue',
   $$SELECT (vq_alter_queue('m_q', sleep_delay_ms => 5000) IS NOT NULL)::text$$,
   'true', 'true', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('register a handler',
   $$SELECT vq_register_handler('m_new_' || md5(random()::text), 'public.m_pub(jsonb)')::text$$,
   '', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('grant consumers, producers, queues',
   $$SELECT vq_grant_consumer('m_n', 'm_other')::text$$,
   '', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('read the enqueuer''s jobs',
   format($$SELECT count(*)::text FROM vq.job WHERE execution_id IN ('%s', '%s')$$, :'m_notify', :'m_target'),
   '2', '0', '0', '2', '0', '0', '0'),
  ('read a NOTIFY job''s payload',
   format($$SELECT (vq_job_payload('%s') IS NOT NULL)::text$$, :'m_notify'),
   'true', 'false', 'false', 'true', 'true', 'false', 'false'),
  ('read transitions',
   format($$SELECT count(*)::text FROM vq.job_transition WHERE execution_id = '%s'$$, :'m_cancelled'),
   '1', '0', '0', '1', '0', '0', '0'),
  ('read logs',
   format($$SELECT count(*)::text FROM vq.job_log WHERE execution_id = '%s'$$, :'m_cancelled'),
   '0', '0', '0', '0', '0', '0', '0'),
  ('read outbox rows',
   format($$SELECT count(*)::text FROM vq.outbox WHERE id = %s$$, :'m_row'),
   '1', '0', '0', '1', '0', '0', '0'),
  ('queue statistics: every job (scope all), or the jobs the role may see (scope own)',
   $$SELECT scope || CASE WHEN scope = 'own' THEN ':' || (scheduled
               = (SELECT count(*) FROM vq.job j WHERE j.queue = 'm_q' AND j.state = 'ENQUEUED'
                  AND pg_has_role(current_user, j.enqueued_by, 'USAGE')))::text ELSE '' END
       FROM vq.queue_stats WHERE queue = 'm_q'$$,
   'all', 'own:true', 'own:true', 'own:true', 'own:true', 'all', 'own:true'),
  ('reply to a NOTIFY job (not running: ignored, false)',
   format($$SELECT vq_complete('%s')::text$$, :'m_notify'),
   'false', 'ERROR VQ010', 'ERROR VQ010', 'false', 'false', 'ERROR VQ010', 'ERROR VQ010'),
  ('pull a NOTIFY handler''s announced jobs',
   $$SELECT count(*)::text FROM vq_pull('m_n', 10)$$,
   '0', '0', '0', '0', '0', '0', '0'),
  ('redrive dead letters',
   $$SELECT vq_redrive(gen_random_uuid())::text$$,
   '0', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('register an interceptor and a transition listener',
   $$SELECT (vq_unregister_interceptor('m_none') OR vq_unregister_transition_listener('m_none'))::text$$,
   'false', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('reassign a role''s jobs',
   $$SELECT vq_reassign_jobs('m_stranger', 'm_stranger')::text$$,
   '0', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501', 'ERROR 42501'),
  ('cancel the enqueuer''s job',
   format($$SELECT vq_cancel('%s')$$, :'m_target'),
   'CANCELLED', 'NULL', 'NULL', 'CANCELLED', 'NULL', 'NULL', 'NULL');

SELECT plan((SELECT count(*)::int * 7 FROM m_cells));
-- (the cancel row last: the non-members first, so that the job is still ENQUEUED for them)
SELECT is(m_run(r.role, c.sql), r.expect, format('%s: %s', r.label, c.action))
  FROM m_cells c
 CROSS JOIN LATERAL (VALUES (1, 'm_qadmin', 'queue admin', c.qadmin), (2, 'm_howner', 'handler owner', c.howner),
                            (3, 'm_cons', 'consumer', c.cons), (4, 'm_mon', 'monitoring', c.mon),
                            (5, 'm_stranger', 'unrelated role', c.stranger), (6, 'm_enq', 'enqueuer', c.enq),
                            (7, :'m_super', 'superuser', c.super)) AS r(n, role, label, expect)
 ORDER BY c.ord, r.n;

SELECT * FROM finish();
ROLLBACK;

-- privileges.sql (pgTAP): the privilege matrix: who may write which table of schema vq, who
-- may execute which function (PUBLIC, a plain role, a role granted some configuration
-- functions), row-level security on vq.job, and the hygiene of the extension's SECURITY
-- DEFINER and SQL functions. What the calls return or raise (enqueue without EXECUTE on the
-- handler function, enqueued_by, job_id leaks, a hijacked search_path) is in
-- test/sql/security.sql. One transaction, rolled back (roles included).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS vq_job;
RESET client_min_messages;

BEGIN;
SELECT plan(99);

-- Fixtures. Jobs are scheduled far ahead so that no worker runs them during the test.
CREATE ROLE tap_a;
CREATE ROLE tap_b;
CREATE ROLE tap_c;          -- becomes a member of tap_a
CREATE ROLE tap_admin;      -- a non-superuser granted some configuration functions
CREATE FUNCTION public.tap_noop(jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('tap_h', 'public.tap_noop(jsonb)') AS registered \gset
CREATE TEMP TABLE tap_tables (t text, col text);
INSERT INTO tap_tables VALUES ('job', 'state'), ('queue', 'paused'), ('handler', 'priority'),
    ('contract_override', 'priority'), ('job_transition_data', 'error'), ('job_log', 'message'), ('outbox', 'status');
GRANT SELECT ON tap_tables TO PUBLIC;

------------------------------------------------------------------------------
-- The allow-list (1): every object of the extension PUBLIC may use, exactly. A new
-- function, table, view or sequence is closed to PUBLIC unless it is added here.
------------------------------------------------------------------------------
SELECT set_eq($$
    SELECT 'function ' || p.oid::regprocedure::text
      FROM pg_proc p
      JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
     WHERE has_function_privilege('public', p.oid, 'EXECUTE')
    UNION ALL
    SELECT 'relation ' || c.oid::regclass::text || ' ' || priv
      FROM pg_class c
      JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
     CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS priv
     WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND has_table_privilege('public', c.oid, priv)
    UNION ALL
    SELECT 'sequence ' || c.oid::regclass::text
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'vq'
     WHERE c.relkind = 'S' AND (has_sequence_privilege('public', c.oid, 'USAGE')
                                OR has_sequence_privilege('public', c.oid, 'SELECT'))
  $$, $$ VALUES
    -- enqueue, resolution, backoff table, durable context, outbox
    ('function vq_enqueue(text,jsonb,timestamp with time zone,text,integer,integer,text,jsonb,interval)'),
    ('function vq_enqueue_in(text,jsonb,interval,text,integer,integer,text,jsonb,interval)'),
    ('function vq_enqueue_many(text,jsonb[],timestamp with time zone,text,integer,integer,text[],jsonb)'),
    ('function vq_resolve_target(text)'), ('function vq_supported_target_ids()'),
    ('function vq_backoff_delay(text,integer,integer,integer)'),
    ('function vq_context()'), ('function vq_context_clear(text,boolean)'), ('function vq_context_set(text,jsonb,boolean)'),
    ('function vq_outbox_publish(text,jsonb,timestamp with time zone,jsonb)'),
    ('function vq_outbox_publish_to(text,text,jsonb,timestamp with time zone,jsonb)'),
    -- inside a handler
    ('function vq_log(text,text,jsonb)'), ('function vq_job_cancelled()'),
    ('function vq_progress_add(bigint,bigint)'), ('function vq_progress_set_total(bigint)'),
    -- workers outside the server (each call checks who is asking)
    ('function vq_take_jobs(text[],integer,interval)'),
    ('function vq_reply_jobs(uuid[],integer[],text[],text[],timestamp with time zone[])'),
    ('function vq_extend_leases(uuid[],integer[],interval)'),
    ('function vq_log_jobs(uuid[],integer[],text[],text[],jsonb[])'),
    ('function vq_progress_jobs(uuid[],integer[],bigint[],bigint[],bigint[])'),
    ('function vq_pull(text,integer)'), ('function vq_job_payload(uuid)'),
    ('function vq_complete(uuid,integer)'), ('function vq_fail(uuid,text,integer)'),
    -- operations on one's own jobs (row visibility by role)
    ('function vq_cancel(uuid)'), ('function vq_metrics()'), ('function vq.running_jobs_now()'),
    -- counts for monitoring (of the jobs and outbox rows the caller may see, or of all of them
    -- for a caller granted vq.all_job_counts() / vq.all_outbox_counts())
    ('function vq.job_counts()'), ('function vq.visible_job_counts()'),
    ('function vq.outbox_counts()'), ('function vq.visible_outbox_counts()'),
    -- reading: configuration for everyone; jobs, history, logs, outbox under row security
    ('relation vq.queue SELECT'), ('relation vq.handler SELECT'), ('relation vq.contract_override SELECT'),
    ('relation vq.consumer_grant SELECT'), ('relation vq.producer_grant SELECT'),
    ('relation vq.queue_grant SELECT'), ('relation vq.destination SELECT'),
    ('relation vq.handler_settings SELECT'),
    ('relation vq.job SELECT'), ('relation vq.job_transition SELECT'), ('relation vq.job_transition_data SELECT'),
    ('relation vq.job_log SELECT'), ('relation vq.outbox SELECT'),
    ('relation vq.running_jobs SELECT'), ('relation vq.queue_stats SELECT'), ('relation vq.dead_letters SELECT'),
    -- what pg_dump reads, so that a role that is no superuser can dump (rows under row security)
    ('relation vq.interceptor SELECT'), ('relation vq.transition_listener SELECT'),
    ('relation vq.job_active SELECT'), ('relation vq.job_finished SELECT'), ('relation vq.job_id_window SELECT'),
    ('relation vq.callback_event SELECT'),
    ('sequence vq.job_transition_data_id_seq'), ('sequence vq.job_log_id_seq'), ('sequence vq.outbox_id_seq'),
    ('sequence vq.callback_event_id_seq')
  $$, 'PUBLIC may use exactly the allow-listed objects of vq_job');

------------------------------------------------------------------------------
-- Table privileges (7 + 1 + 28 = 36)
------------------------------------------------------------------------------
SELECT table_privs_are('vq', t, 'tap_a', ARRAY['SELECT'],
                       format('a plain role may only SELECT from vq.%s', t))
  FROM tap_tables ORDER BY t;
SELECT is_empty($$
    SELECT c.relname || ' ' || p.priv
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'vq'
     CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) AS p(priv)
     WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND has_table_privilege('public', c.oid, p.priv)
     UNION ALL
    SELECT c.relname || ' ' || p.priv
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'vq'
     CROSS JOIN unnest(ARRAY['USAGE', 'UPDATE']) AS p(priv)
     WHERE CASE WHEN c.relkind = 'S' THEN has_sequence_privilege('public', c.oid, p.priv) END
  $$, 'PUBLIC holds no write privilege on any relation or sequence in schema vq');

SET ROLE tap_a;
SELECT throws_ok(CASE op
                     WHEN 'INSERT' THEN format('INSERT INTO vq.%I DEFAULT VALUES', t)
                     WHEN 'UPDATE' THEN format('UPDATE vq.%I SET %I = %I', t, col, col)
                     WHEN 'DELETE' THEN format('DELETE FROM vq.%I', t)
                     ELSE format('TRUNCATE vq.%I', t) END,
                 '42501', format('permission denied for table %s', t),
                 format('%s on vq.%s as a plain role fails with 42501', op, t))
  FROM tap_tables CROSS JOIN unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS op
 ORDER BY t, op;
RESET ROLE;

------------------------------------------------------------------------------
-- Function privileges (20 + 1 + 9 + 11 + 9 = 50)
------------------------------------------------------------------------------
-- What PUBLIC may execute: the enqueue, resolution and context API; no configuration.
SELECT is(has_function_privilege('public', f, 'EXECUTE'), may,
          format('PUBLIC %s execute %s', CASE WHEN may THEN 'may' ELSE 'may not' END, f))
  FROM (VALUES
    ('vq_register_handler(text, regprocedure, text, integer, integer, integer, interval)', false),
    ('vq_register_notify_handler(text, text, text, integer, integer, interval)', false),
    ('vq_register_handlers(jsonb)', false),
    ('vq_unregister_handler(text)', false),
    ('vq_configure(jsonb)', false),
    ('vq_create_queue(text, integer, integer, text, integer, integer, integer)', false),
    ('vq_alter_queue(text, integer, integer, text, integer, integer, integer)', false),
    ('vq_drop_queue(text)', false),
    ('vq_set_contract_override(text, text, integer, integer)', false),
    ('vq_drop_contract_override(text)', false),
    ('vq.registry_changed()', false),
    ('vq_enqueue(text, jsonb, timestamptz, text, integer, integer, text, jsonb, interval)', true),
    ('vq_enqueue_in(text, jsonb, interval, text, integer, integer, text, jsonb, interval)', true),
    ('vq_enqueue_many(text, jsonb[], timestamptz, text, integer, integer, text[], jsonb)', true),
    ('vq_resolve_target(text)', true),
    ('vq_supported_target_ids()', true),
    ('vq_backoff_delay(text, integer, integer, integer)', true),
    ('vq_context_set(text, jsonb, boolean)', true),
    ('vq_context_clear(text, boolean)', true),
    ('vq_context()', true)) AS v(f, may);
SELECT is_empty($$
    SELECT p.oid::regprocedure::text
      FROM pg_proc p
      JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
     WHERE p.prosecdef AND has_function_privilege('public', p.oid, 'EXECUTE')
  $$, 'no SECURITY DEFINER function of vq_job is executable by PUBLIC');

SET ROLE tap_b;
SELECT results_eq($$SELECT handler_name, queue, priority, max_attempts FROM vq_resolve_target('tap_h')$$,
                  $$VALUES ('tap_h'::text, 'default'::text, 0, 3)$$, 'a plain role can call vq_resolve_target');
SELECT ok('tap_h' IN (SELECT vq_supported_target_ids()), 'a plain role can call vq_supported_target_ids');
SELECT is(vq_backoff_delay('FIXED', 1500, 60000, 4), interval '1.5 seconds', 'a plain role can call vq_backoff_delay');
SELECT lives_ok($$SELECT vq_context_set('tap', '{"k": 1}')$$, 'a plain role can call vq_context_set');
SELECT is(vq_context(), '{"tap": {"k": 1}}'::jsonb, 'a plain role can call vq_context');
SELECT lives_ok($$SELECT vq_context_clear('tap')$$, 'a plain role can call vq_context_clear(namespace)');
SELECT lives_ok($$SELECT vq_context_clear()$$, 'a plain role can call vq_context_clear()');
SELECT is(vq_context(), '{}'::jsonb, 'the context is empty again');
SELECT isnt_empty($$SELECT 1 FROM vq.handler_settings WHERE name = 'tap_h'$$, 'a plain role can read vq.handler_settings');
SELECT throws_ok(call, '42501', format('permission denied for function %s', fn),
                 format('a plain role cannot call %s (42501)', fn))
  FROM (VALUES
    ('vq_register_handler', $$SELECT vq_register_handler('tap_evil', 'public.tap_noop(jsonb)')$$),
    ('vq_register_notify_handler', $$SELECT vq_register_notify_handler('tap_evil', 'tap_chan')$$),
    ('vq_register_handlers', $$SELECT vq_register_handlers('[{"name": "tap_evil", "channel": "tap_chan"}]')$$),
    ('vq_unregister_handler', $$SELECT vq_unregister_handler('tap_h')$$),
    ('vq_configure', $$SELECT vq_configure('{"queues": {"tap_q_evil": {}}}')$$),
    ('vq_create_queue', $$SELECT vq_create_queue('tap_q_evil')$$),
    ('vq_alter_queue', $$SELECT vq_alter_queue('default', sleep_delay_ms => 1)$$),
    ('vq_drop_queue', $$SELECT vq_drop_queue('default')$$),
    ('vq_set_contract_override', $$SELECT vq_set_contract_override('tap_h', max_attempts => 1)$$),
    ('vq_drop_contract_override', $$SELECT vq_drop_contract_override('tap_h')$$),
    ('raise_violations', $$SELECT vq.raise_violations(ARRAY['x'], 'VQ101', 'x')$$)) AS v(fn, call);
RESET ROLE;

-- A role granted EXECUTE on some configuration functions may call those, and only those.
GRANT EXECUTE ON FUNCTION vq_register_handler(text, regprocedure, text, integer, integer, integer, interval),
                          vq_register_notify_handler(text, text, text, integer, integer, interval),
                          vq_register_handlers(jsonb),
                          vq_unregister_handler(text),
                          vq_create_queue(text, integer, integer, text, integer, integer, integer),
                          vq_drop_queue(text),
                          vq_configure(jsonb)
   TO tap_admin;
SET ROLE tap_admin;
SELECT lives_ok($$SELECT vq_create_queue('tap_q_granted', instances => 2)$$, 'vq_create_queue works once granted');
SELECT lives_ok($$SELECT vq_configure('{"queues": {"tap_q_granted": {"instances": 4}}}')$$,
                'vq_configure works once granted');
SELECT is((SELECT instances FROM vq.queue WHERE name = 'tap_q_granted'), 4, 'the granted role''s vq_configure took effect');
SELECT lives_ok($$SELECT vq_register_handler('tap_granted_f', 'public.tap_noop(jsonb)', 'tap_q_granted')$$,
                'vq_register_handler works once granted');
SELECT lives_ok($$SELECT vq_register_notify_handler('tap_granted_n', 'tap_chan')$$,
                'vq_register_notify_handler works once granted');
SELECT lives_ok($$SELECT vq_register_handlers('[{"name": "tap_granted_b", "channel": "tap_chan"}]')$$,
                'vq_register_handlers works once granted');
SELECT is(ARRAY[vq_unregister_handler('tap_granted_f'), vq_unregister_handler('tap_granted_n'),
                vq_unregister_handler('tap_granted_b')], ARRAY[true, true, true],
          'vq_unregister_handler works once granted');
SELECT lives_ok($$SELECT vq_drop_queue('tap_q_granted')$$, 'vq_drop_queue works once granted');
SELECT throws_ok($$SELECT vq_alter_queue('default', sleep_delay_ms => 1)$$, '42501',
                 'permission denied for function vq_alter_queue', 'the grant covers only what was granted');
RESET ROLE;

------------------------------------------------------------------------------
-- SECURITY DEFINER and SQL function hygiene (3)
------------------------------------------------------------------------------
SELECT ok((SELECT count(*) FROM pg_proc p
             JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
             JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
            WHERE p.prosecdef) > 0,
          'the extension has SECURITY DEFINER functions to check');
SELECT is_empty($$
    SELECT p.oid::regprocedure::text
      FROM pg_proc p
      JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
     WHERE p.prosecdef
       AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%')
  $$, 'every SECURITY DEFINER function of vq_job pins search_path');
SELECT is_empty($$
    SELECT p.oid::regprocedure::text || ' ' || coalesce(p.proconfig::text, '(no settings)')
      FROM pg_proc p
      JOIN pg_language l ON l.oid = p.prolang AND l.lanname IN ('sql', 'plpgsql')
      JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
      JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
     WHERE NOT EXISTS (
             SELECT 1 FROM unnest(p.proconfig) c
              WHERE c LIKE 'search\_path=%'
                AND NOT EXISTS (SELECT 1 FROM regexp_split_to_table(substr(c, 13), '\s*,\s*') s(sch)
                                 WHERE btrim(s.sch, '"') NOT IN ('pg_catalog', 'pg_temp', 'vq'))
                AND (c NOT LIKE '%pg\_temp%' OR c ~ 'pg_temp"?\s*$'))
  $$, 'every SQL and PL/pgSQL function of vq_job pins a search_path of pg_catalog, vq and (last) pg_temp only');

------------------------------------------------------------------------------
-- Row-level security (1 + 8 = 9)
------------------------------------------------------------------------------
SELECT is_empty($$SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'vq' AND c.relname IN ('job', 'job_active', 'job_finished', 'job_transition_data',
                                                            'job_log', 'outbox', 'job_id_window', 'interceptor',
                                                            'transition_listener', 'callback_event')
                     AND NOT c.relrowsecurity$$,
                'row-level security is enabled on the tables of jobs, history, logs, outbox rows, job_id windows and callbacks');
-- Jobs of tap_a, tap_b and tap_c (a member of tap_a); tap_admin enqueues nothing.
GRANT tap_a TO tap_c;
SET ROLE tap_a;
SELECT count(vq_enqueue('tap_h', '{}', '2999-01-01', job_id => j)) AS a_jobs FROM unnest(ARRAY['tap-a-1', 'tap-a-2']) j \gset
SET ROLE tap_b;
SELECT vq_enqueue('tap_h', '{}', '2999-01-01', job_id => 'tap-b-1') AS b_job \gset
SET ROLE tap_c;
SELECT vq_enqueue('tap_h', '{}', '2999-01-01', job_id => 'tap-c-1', unique_for => interval '1 day') AS c_job \gset
RESET ROLE;

SET ROLE tap_a;
SELECT results_eq($$SELECT job_id FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-a-1', 'tap-a-2'],
                  'tap_a sees only its own jobs (not those of tap_c, its member)');
SET ROLE tap_b;
SELECT results_eq($$SELECT job_id FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-b-1'],
                  'tap_b sees only its own jobs');
SET ROLE tap_c;
SELECT results_eq($$SELECT job_id FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-a-1', 'tap-a-2', 'tap-c-1'],
                  'tap_c, a member of tap_a, sees tap_a''s jobs and its own');
SET ROLE tap_admin;
SELECT is_empty($$SELECT 1 FROM vq.job WHERE handler = 'tap_h'$$, 'a role that enqueued nothing sees nothing');
-- the partitions and the windows, read directly (as pg_dump does), show what vq.job shows
SET ROLE tap_a;
SELECT results_eq($$SELECT job_id FROM vq.job_active WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-a-1', 'tap-a-2'], 'tap_a sees only its own jobs in vq.job_active');
SELECT is_empty($$SELECT 1 FROM vq.job_id_window$$, 'tap_a sees no job_id window of tap_c, its member');
SET ROLE tap_c;
SELECT results_eq($$SELECT job_id FROM vq.job_id_window$$, ARRAY['tap-c-1'], 'tap_c sees its own job_id window');
RESET ROLE;
SELECT is((SELECT count(*) FROM vq.job WHERE handler = 'tap_h'), 4::bigint, 'the superuser sees every job');

SELECT * FROM finish();
ROLLBACK;

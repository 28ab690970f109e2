-- privileges.sql (pgTAP): table and function privileges, EXECUTE on handler functions,
-- enqueued_by, row-level security, SECURITY DEFINER hygiene, a search_path hijack and
-- cross-role leaks through job_id. Everything runs in one transaction that is rolled back
-- (roles included).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS vq_job;
RESET client_min_messages;

BEGIN;
SELECT plan(100);

-- Fixtures. Jobs are scheduled far ahead so that no worker runs them during the test.
CREATE ROLE tap_a;
CREATE ROLE tap_b;
CREATE ROLE tap_c;
CREATE ROLE tap_admin;
CREATE FUNCTION public.tap_noop(jsonb) RETURNS void LANGUAGE sql AS '';
REVOKE EXECUTE ON FUNCTION public.tap_noop(jsonb) FROM PUBLIC;
SELECT vq_register_handler('tap_h', 'public.tap_noop(jsonb)') AS registered \gset
CREATE TEMP TABLE tap_tables (t text, col text);
INSERT INTO tap_tables VALUES ('job', 'state'), ('queue', 'paused'), ('handler', 'priority'),
    ('contract_override', 'priority'), ('job_transition', 'error'), ('job_log', 'message'), ('outbox', 'status');
GRANT SELECT ON tap_tables TO PUBLIC;

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
    SELECT c.relname || ' USAGE'
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'vq'
     WHERE CASE WHEN c.relkind = 'S' THEN has_sequence_privilege('public', c.oid, 'USAGE') END
  $$, 'PUBLIC holds no write privilege on any relation in schema vq');

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
-- EXECUTE on the handler function; enqueued_by (4 + 1 + 3 + 3 + 1 + 2 + 2 = 16)
------------------------------------------------------------------------------
SET ROLE tap_b;
SELECT throws_ok($$SELECT vq_enqueue('tap_h', '{}')$$, '42501',
                 'permission denied to enqueue a job for handler "tap_h"',
                 'vq_enqueue without EXECUTE on the handler function fails with 42501 naming the handler');
SELECT throws_ok($$SELECT vq_enqueue_in('tap_h', '{}', '1 hour')$$, '42501',
                 'permission denied to enqueue a job for handler "tap_h"',
                 'vq_enqueue_in without EXECUTE fails with 42501');
SELECT throws_ok($$SELECT vq_enqueue_many('tap_h', ARRAY['{}']::jsonb[])$$, '42501',
                 'permission denied to enqueue a job for handler "tap_h"',
                 'vq_enqueue_many without EXECUTE fails with 42501');
SELECT throws_ok($$SELECT vq_enqueue('tap_h', '{}', job_id => 'tap-denied')$$, '42501',
                 'permission denied to enqueue a job for handler "tap_h"',
                 'vq_enqueue with a job_id without EXECUTE fails with 42501');
RESET ROLE;
SELECT is((SELECT count(*) FROM vq.job WHERE handler = 'tap_h'), 0::bigint,
          'refused enqueues wrote nothing');

GRANT EXECUTE ON FUNCTION public.tap_noop(jsonb) TO tap_a, tap_b;
SET ROLE tap_b;
SELECT lives_ok($$SELECT vq_enqueue('tap_h', '{"by": "b"}', '2999-01-01', job_id => 'tap-b-1')$$,
                'after GRANT EXECUTE the role can enqueue');
SELECT lives_ok($$SELECT vq_enqueue_in('tap_h', '{"by": "b"}', '1000 years', job_id => 'tap-b-2')$$,
                'after GRANT EXECUTE the role can vq_enqueue_in');
SELECT lives_ok($$SELECT vq_enqueue_many('tap_h', ARRAY['{"by": "b"}']::jsonb[], '2999-01-01', job_ids => ARRAY['tap-b-3'])$$,
                'after GRANT EXECUTE the role can vq_enqueue_many');
RESET ROLE;
SET ROLE tap_a;
SELECT vq_enqueue('tap_h', '{"by": "a"}', '2999-01-01', job_id => 'tap-a-1') AS tap_a_1 \gset
SELECT vq_enqueue('tap_h', '{"by": "a"}', '2999-01-01', job_id => 'tap-a-2') AS tap_a_2 \gset
RESET ROLE;
CREATE FUNCTION public.tap_enqueue_as_owner(job text) RETURNS uuid
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$ SELECT vq_enqueue('tap_h', '{"by": "definer"}', '2999-01-01', job_id => job) $$;
ALTER FUNCTION public.tap_enqueue_as_owner(text) OWNER TO tap_a;
SET ROLE tap_b;
SELECT tap_enqueue_as_owner('tap-a-3') AS tap_a_3 \gset
RESET ROLE;

SELECT results_eq(
    $$SELECT job_id, enqueued_by::text FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
    $$VALUES ('tap-a-1', 'tap_a'), ('tap-a-2', 'tap_a'), ('tap-a-3', 'tap_a'),
             ('tap-b-1', 'tap_b'), ('tap-b-2', 'tap_b'), ('tap-b-3', 'tap_b')$$,
    'enqueued_by is current_user: the SET ROLE role, or the owner inside a SECURITY DEFINER function');
SELECT is_empty($$SELECT 1 FROM vq.job WHERE handler = 'tap_h' AND enqueued_by = session_user::regrole$$,
                'no job is attributed to the session user (the superuser)');
SELECT is_empty($$SELECT 1 FROM vq.job j, pg_extension e
                   WHERE j.handler = 'tap_h' AND e.extname = 'vq_job' AND j.enqueued_by = e.extowner::regrole$$,
                'no job is attributed to the extension owner');
-- SET ROLE chains: tap_c, a member of tap_a, enqueues as itself and as tap_a.
SET ROLE tap_c;
SELECT throws_ok($$SELECT vq_enqueue('tap_h', '{}', '2999-01-01', job_id => 'tap-c-1')$$, '42501',
                 'permission denied to enqueue a job for handler "tap_h"',
                 'a role that is not (yet) a member of a granted role cannot enqueue');
RESET ROLE;
GRANT tap_a TO tap_c;
SET ROLE tap_c;
SELECT lives_ok($$SELECT vq_enqueue('tap_h', '{"by": "c"}', '2999-01-01', job_id => 'tap-c-1')$$,
                'a member of a role holding EXECUTE can enqueue');
SET ROLE tap_a;
SELECT lives_ok($$SELECT vq_enqueue('tap_h', '{"by": "c as a"}', '2999-01-01', job_id => 'tap-a-4')$$,
                'after SET ROLE to the granted role it can enqueue');
RESET ROLE;
SELECT is((SELECT enqueued_by::text FROM vq.job WHERE job_id = 'tap-c-1'), 'tap_c', 'tap_c''s own job is tap_c''s');
SELECT is((SELECT enqueued_by::text FROM vq.job WHERE job_id = 'tap-a-4'), 'tap_a', 'a job enqueued after SET ROLE tap_a is tap_a''s');

------------------------------------------------------------------------------
-- Row-level security (1 + 5 = 6)
------------------------------------------------------------------------------
SELECT is_empty($$SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                   WHERE n.nspname = 'vq' AND c.relname IN ('job', 'job_transition', 'job_log', 'outbox')
                     AND NOT c.relrowsecurity$$,
                'row-level security is enabled on job, job_transition, job_log and outbox');
SET ROLE tap_a;
SELECT results_eq($$SELECT job_id FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-a-1', 'tap-a-2', 'tap-a-3', 'tap-a-4'],
                  'tap_a sees only its own jobs (not those of tap_c, its member)');
SET ROLE tap_b;
SELECT results_eq($$SELECT job_id FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-b-1', 'tap-b-2', 'tap-b-3'],
                  'tap_b sees only its own jobs');
SET ROLE tap_c;
SELECT results_eq($$SELECT job_id FROM vq.job WHERE handler = 'tap_h' ORDER BY job_id$$,
                  ARRAY['tap-a-1', 'tap-a-2', 'tap-a-3', 'tap-a-4', 'tap-c-1'],
                  'tap_c, a member of tap_a, sees tap_a''s jobs and its own');
SET ROLE tap_admin;
SELECT is_empty($$SELECT 1 FROM vq.job WHERE handler = 'tap_h'$$, 'a role that enqueued nothing sees nothing');
RESET ROLE;
SELECT is((SELECT count(*) FROM vq.job WHERE handler = 'tap_h'), 8::bigint, 'the superuser sees every job');

------------------------------------------------------------------------------
-- Function privileges of a plain role (9 + 11 = 20)
------------------------------------------------------------------------------
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
SELECT throws_ok(call, '42501', NULL, format('a plain role cannot call %s (42501)', split_part(substr(call, 8), '(', 1)))
  FROM unnest(ARRAY[
    $$SELECT vq_register_handler('tap_evil', 'public.tap_noop(jsonb)')$$,
    $$SELECT vq_register_notify_handler('tap_evil', 'tap_chan')$$,
    $$SELECT vq_register_handlers('[{"name": "tap_evil", "channel": "tap_chan"}]')$$,
    $$SELECT vq_unregister_handler('tap_h')$$,
    $$SELECT vq_configure('{"queues": {"tap_q_evil": {}}}')$$,
    $$SELECT vq_create_queue('tap_q_evil')$$,
    $$SELECT vq_alter_queue('default', sleep_delay_ms => 1)$$,
    $$SELECT vq_drop_queue('default')$$,
    $$SELECT vq_set_contract_override('tap_h', max_attempts => 1)$$,
    $$SELECT vq_drop_contract_override('tap_h')$$,
    $$SELECT vq.raise_violations(ARRAY['x'], 'VQ101', 'x')$$]) AS call;
RESET ROLE;

------------------------------------------------------------------------------
-- SECURITY DEFINER hygiene (2)
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

------------------------------------------------------------------------------
-- search_path hijack (14). Results go through psql variables: while the hostile schema is
-- first on search_path, pgTAP's own unqualified operators would be hijacked too.
------------------------------------------------------------------------------
CREATE SCHEMA tap_hijack;
GRANT USAGE ON SCHEMA tap_hijack TO PUBLIC;
CREATE TABLE tap_hijack.ran (what text);
GRANT INSERT ON tap_hijack.ran TO PUBLIC;
-- Each trap records that it ran (in case an error would be swallowed) and raises.
CREATE FUNCTION tap_hijack.trap(what text) RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO tap_hijack.ran VALUES (what);
    RAISE EXCEPTION 'hijacked: %', what;
END $$;
CREATE FUNCTION tap_hijack.now() RETURNS timestamptz LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('now()'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('clock_timestamp()'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.upper(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('upper(text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.format(text, VARIADIC text[]) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('format(text, text[])'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.jsonb_typeof(jsonb) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('jsonb_typeof(jsonb)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.jsonb_object_keys(jsonb) RETURNS SETOF text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('jsonb_object_keys(jsonb)'); END $$;
CREATE FUNCTION tap_hijack.to_regprocedure(text) RETURNS regprocedure LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('to_regprocedure(text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.quote_literal(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('quote_literal(text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.array_to_string(text[], text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('array_to_string(text[], text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('pg_has_role(name, oid, text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('gen_random_uuid()'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.op_bool(text, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('operator on (text, text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.op_concat(text, text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('|| (text, text)'); RETURN NULL; END $$;
CREATE FUNCTION tap_hijack.op_state_eq(vq.job_state, vq.job_state) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM tap_hijack.trap('= (vq.job_state, vq.job_state)'); RETURN NULL; END $$;
CREATE OPERATOR tap_hijack.=  (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_hijack.op_bool);
CREATE OPERATOR tap_hijack.~  (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_hijack.op_bool);
CREATE OPERATOR tap_hijack.!~ (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_hijack.op_bool);
CREATE OPERATOR tap_hijack.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = tap_hijack.op_concat);
CREATE OPERATOR tap_hijack.=  (LEFTARG = vq.job_state, RIGHTARG = vq.job_state, FUNCTION = tap_hijack.op_state_eq);
CREATE FUNCTION public.tap_hj_fn(jsonb) RETURNS void LANGUAGE sql AS '';
GRANT EXECUTE ON FUNCTION vq_create_queue(text, integer, integer, text, integer, integer, integer),
                          vq_register_handler(text, regprocedure, text, integer, integer),
                          vq_configure(jsonb)
   TO tap_admin;

SET search_path = tap_hijack, pg_catalog, public;
-- as the superuser
SELECT (vq_create_queue('tap_q_su', backoff_strategy => 'fixed')).backoff_strategy AS su_strategy \gset
SELECT vq_register_handler('tap_hj_su', 'public.tap_hj_fn(jsonb)', queue => 'tap_q_su', priority => 2) AS su_registered \gset
SELECT vq_configure('{"contracts": {"tap_hj_su": {"maxAttempts": 6}}}') AS su_configured \gset
SELECT vq_enqueue('tap_hj_su', '{"n": 1}', '2999-01-01', job_id => 'tap-hj-su') AS su_id \gset
SELECT vq_enqueue('tap_hj_su', '{"n": 1}', '2999-01-01', job_id => 'tap-hj-su') AS su_id_again \gset
SELECT max_attempts AS su_resolved_max_attempts FROM vq_resolve_target('tap_hj_su') \gset
-- as plain roles
SET ROLE tap_admin;
SELECT (vq_create_queue('tap_q_pl', backoff_strategy => 'exponential')).backoff_strategy AS pl_strategy \gset
SELECT vq_register_handler('tap_hj_pl', 'public.tap_hj_fn(jsonb)', queue => 'tap_q_pl', priority => 2) AS pl_registered \gset
SELECT vq_configure('{"contracts": {"tap_hj_pl": {"maxAttempts": 6}}}') AS pl_configured \gset
SET ROLE tap_a;
SELECT vq_context_set('tenant', '{"id": 7}') AS pl_context_set \gset
SELECT vq_enqueue('tap_hj_pl', '{"n": 1}', '2999-01-01', job_id => 'tap-hj-pl') AS pl_id \gset
SELECT vq_enqueue_many('tap_hj_pl', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[], '2999-01-01', job_ids => ARRAY['tap-hj-pl', NULL]) AS pl_ids \gset
SELECT vq_enqueue_in('tap_hj_pl', '{"n": 4}', '1000 years') IS NOT NULL AS pl_enqueued_in \gset
SELECT max_attempts AS pl_resolved_max_attempts FROM vq_resolve_target('tap_hj_pl') \gset
SELECT vq_context() AS pl_context \gset
SELECT vq_context_clear() AS pl_context_cleared \gset
RESET ROLE;
RESET search_path;

SELECT is(:'su_strategy'::text, 'FIXED', 'superuser, hijacked search_path: vq_create_queue normalises the strategy');
SELECT is(:'pl_strategy'::text, 'EXPONENTIAL', 'plain role, hijacked search_path: vq_create_queue normalises the strategy');
SELECT is(:'pl_context'::jsonb, '{"tenant": {"id": 7}}'::jsonb, 'plain role, hijacked search_path: vq_context_set/vq_context work');
SELECT is(:'su_id'::uuid, :'su_id_again'::uuid, 'superuser, hijacked search_path: job_id stays idempotent');
SELECT is((:'pl_ids'::uuid[])[1], :'pl_id'::uuid, 'plain role, hijacked search_path: vq_enqueue_many returns the holder of a job_id');
SELECT ok(:'pl_enqueued_in', 'plain role, hijacked search_path: vq_enqueue_in succeeds');
SELECT is(:'su_resolved_max_attempts'::int, 6, 'superuser, hijacked search_path: vq_resolve_target applies the override');
SELECT is(:'pl_resolved_max_attempts'::int, 6, 'plain role, hijacked search_path: vq_resolve_target applies the override');
SELECT results_eq($$SELECT name, backoff_strategy FROM vq.queue WHERE name IN ('tap_q_su', 'tap_q_pl') ORDER BY name$$,
                  $$VALUES ('tap_q_pl'::text, 'EXPONENTIAL'::text), ('tap_q_su', 'FIXED')$$,
                  'the queues were stored as configured');
SELECT results_eq($$SELECT name, address, queue, priority FROM vq.handler WHERE name IN ('tap_hj_su', 'tap_hj_pl') ORDER BY name$$,
                  $$VALUES ('tap_hj_pl'::text, 'public.tap_hj_fn(jsonb)'::text, 'tap_q_pl'::text, 2),
                           ('tap_hj_su', 'public.tap_hj_fn(jsonb)', 'tap_q_su', 2)$$,
                  'the handlers were stored as registered');
SELECT results_eq($$SELECT handler, max_attempts FROM vq.contract_override WHERE handler IN ('tap_hj_su', 'tap_hj_pl') ORDER BY handler$$,
                  $$VALUES ('tap_hj_pl'::text, 6), ('tap_hj_su', 6)$$,
                  'the contract overrides were stored as configured');
SELECT results_eq($$SELECT payload ->> 'n', queue, priority, max_attempts, enqueued_by::text, metadata
                      FROM vq.job WHERE handler = 'tap_hj_pl' ORDER BY 1$$,
                  $$VALUES ('1'::text, 'tap_q_pl'::text, 2, 6, 'tap_a'::text, '{"tenant": {"id": 7}}'::jsonb),
                           ('3', 'tap_q_pl', 2, 6, 'tap_a', '{"tenant": {"id": 7}}'),
                           ('4', 'tap_q_pl', 2, 6, 'tap_a', '{"tenant": {"id": 7}}')$$,
                  'plain role, hijacked search_path: the jobs carry the effective settings and the context');
SELECT is((SELECT count(*) FROM vq.job WHERE handler = 'tap_hj_su'), 1::bigint,
          'superuser, hijacked search_path: one job for the idempotent pair');
SELECT is_empty($$SELECT what FROM tap_hijack.ran$$, 'no hijack object ever ran');

------------------------------------------------------------------------------
-- Cross-role leaks through job_id (6)
------------------------------------------------------------------------------
-- tap_b enqueues the job_id that tap_a's unfinished (and, to tap_b, invisible) job holds.
-- Whatever happens (an error, or a job of its own), tap_b must not learn tap_a's execution_id.
SELECT set_config('tap.a_execution_id', execution_id::text, true) AS a_execution_id FROM vq.job WHERE job_id = 'tap-a-1' \gset
CREATE FUNCTION public.tap_learns_a_id(call text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    a_id text := current_setting('tap.a_execution_id');
    result text;
    msg text;
    det text;
    hnt text;
BEGIN
    EXECUTE call INTO result;
    RETURN result LIKE '%' || a_id || '%';
EXCEPTION WHEN others THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL, hnt = PG_EXCEPTION_HINT;
    RETURN concat_ws(' ', msg, det, hnt) LIKE '%' || a_id || '%';
END
$$;
SET ROLE tap_b;
SELECT ok(NOT tap_learns_a_id($$SELECT vq_enqueue('tap_h', '{"by": "b"}', job_id => 'tap-a-1')::text$$),
          'vq_enqueue by another role with a held job_id does not reveal the holder''s execution_id');
SELECT ok(NOT tap_learns_a_id($$SELECT vq_enqueue_in('tap_h', '{"by": "b"}', '1 hour', job_id => 'tap-a-1')::text$$),
          'vq_enqueue_in by another role with a held job_id does not reveal the holder''s execution_id');
SELECT ok(NOT tap_learns_a_id($$SELECT vq_enqueue_many('tap_h', ARRAY['{"by": "b"}']::jsonb[], job_ids => ARRAY['tap-a-1'])::text$$),
          'vq_enqueue_many by another role with a held job_id does not reveal the holder''s execution_id');
SELECT throws_ok($$SELECT vq_enqueue('tap_h', '{"by": "b"}', job_id => 'tap-a-1')$$, '42501',
                 'job_id "tap-a-1" is held by an unfinished job of another role',
                 'another role''s held job_id is refused with 42501, naming only the job_id');
SET ROLE tap_c;
SELECT is(vq_enqueue('tap_h', '{"by": "c"}', job_id => 'tap-a-1'), current_setting('tap.a_execution_id')::uuid,
          'a member of the holder''s role gets the holder''s execution_id');
RESET ROLE;
SELECT results_eq($$SELECT enqueued_by::text, payload ->> 'by', state::text FROM vq.job
                     WHERE job_id = 'tap-a-1'$$,
                  $$VALUES ('tap_a'::text, 'a'::text, 'ENQUEUED'::text)$$,
                  'the holder''s job is untouched and the only one holding its job_id');

SELECT * FROM finish();
ROLLBACK;

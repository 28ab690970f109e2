-- security.sql: what a role gets back from the extension's security checks:
--   1. enqueue requires EXECUTE on the handler function (42501 with its DETAIL), and
--      enqueued_by is current_user (SET ROLE, role membership, SECURITY DEFINER);
--   2. an enqueue never hands one role another role's execution_id;
--   3. a hostile schema ahead of pg_catalog on the caller's search_path changes nothing.
-- The privilege matrix (table and function privileges, row-level security, SECURITY DEFINER
-- hygiene) is tested in test/pgtap/privileges.sql.
\set SHOW_CONTEXT never
-- Jobs are enqueued far in the future so that no worker ever runs them during the test.
\set later '2999-01-01 00:00:00+00'

CREATE ROLE sec_a;
CREATE ROLE sec_b;
CREATE ROLE sec_c;          -- becomes a member of sec_a
CREATE ROLE sec_admin;      -- a non-superuser granted the configuration functions

------------------------------------------------------------------------------
-- 1. EXECUTE on the handler function, and enqueued_by.
------------------------------------------------------------------------------
CREATE FUNCTION sec_noop(jsonb) RETURNS void LANGUAGE sql AS '';
REVOKE EXECUTE ON FUNCTION sec_noop(jsonb) FROM PUBLIC;
SELECT vq_register_handler('sec_h', 'sec_noop(jsonb)');

SET ROLE sec_b;
SELECT vq_enqueue('sec_h', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_in('sec_h', '{}', '1 hour');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('sec_h', ARRAY['{}', '{}']::jsonb[]);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('sec_h', '{}', job_id => 'sec-denied');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) AS jobs_after_denied_enqueues FROM vq.job WHERE handler = 'sec_h';

GRANT EXECUTE ON FUNCTION sec_noop(jsonb) TO sec_a, sec_b;
SET ROLE sec_b;
SELECT vq_enqueue('sec_h', '{"by": "b"}', :'later', job_id => 'sec-b-1') IS NOT NULL AS enqueued;
SELECT vq_enqueue_in('sec_h', '{"by": "b"}', '1 hour', job_id => 'sec-b-2') IS NOT NULL AS enqueued;
SELECT cardinality(vq_enqueue_many('sec_h', ARRAY['{"by": "b"}']::jsonb[], :'later', job_ids => ARRAY['sec-b-3'])) AS enqueued;
RESET ROLE;
-- SET ROLE from a superuser session: enqueued_by is the role set, not the session user.
SET ROLE sec_a;
SELECT vq_enqueue('sec_h', '{"by": "a"}', :'later', job_id => 'sec-a-1') IS NOT NULL AS enqueued;
SELECT vq_enqueue('sec_h', '{"by": "a"}', :'later', job_id => 'sec-a-2') IS NOT NULL AS enqueued;
RESET ROLE;
-- sec_c has no grant of its own yet; as a member of sec_a it inherits sec_a's EXECUTE.
SET ROLE sec_c;
SELECT vq_enqueue('sec_h', '{"by": "c"}', job_id => 'sec-c-1');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT sec_a TO sec_c;
SET ROLE sec_c;
SELECT vq_enqueue('sec_h', '{"by": "c"}', :'later', job_id => 'sec-c-1') IS NOT NULL AS enqueued;
-- SET ROLE to a role it is a member of: enqueued_by follows current_user.
SET ROLE sec_a;
SELECT vq_enqueue('sec_h', '{"by": "c as a"}', :'later', job_id => 'sec-a-3') IS NOT NULL AS enqueued;
RESET ROLE;
-- Inside a SECURITY DEFINER function owned by sec_a, called by sec_b, current_user is sec_a.
CREATE FUNCTION sec_enqueue_as_owner(job text) RETURNS uuid
    LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public
    AS $$ SELECT vq_enqueue('sec_h', '{"by": "definer"}', '2999-01-01 00:00:00+00', job_id => job) $$;
ALTER FUNCTION sec_enqueue_as_owner(text) OWNER TO sec_a;
SET ROLE sec_b;
SELECT sec_enqueue_as_owner('sec-a-4') IS NOT NULL AS enqueued;
RESET ROLE;
SELECT job_id, enqueued_by, payload ->> 'by' AS payload_by,
       enqueued_by = session_user::regrole AS by_session_user,
       enqueued_by = (SELECT extowner FROM pg_extension WHERE extname = 'vq_job')::regrole AS by_extension_owner
  FROM vq.job WHERE handler = 'sec_h' ORDER BY job_id;

------------------------------------------------------------------------------
-- 2. An enqueue never hands one role another role's data.
------------------------------------------------------------------------------
-- sec_a's unfinished job holds job_id 'sec-a-1'. sec_b, who cannot see that job, enqueues the
-- same job_id: job ids are scoped to the enqueuing role, so sec_b gets a job of its own and
-- must not learn sec_a's execution_id: not as the return value, not in an error message,
-- detail or hint.
SELECT set_config('sec.a_execution_id', execution_id::text, false) IS NOT NULL AS noted
  FROM vq.job WHERE job_id = 'sec-a-1';
CREATE FUNCTION sec_learns_a_id(call text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    a_id text := current_setting('sec.a_execution_id');
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
SET ROLE sec_b;
SELECT sec_learns_a_id($$SELECT vq_enqueue('sec_h', '{"by": "b"}', job_id => 'sec-a-1')::text$$) AS leaked_by_vq_enqueue;
SELECT sec_learns_a_id($$SELECT vq_enqueue_in('sec_h', '{"by": "b"}', '1 hour', job_id => 'sec-a-1')::text$$) AS leaked_by_vq_enqueue_in;
SELECT sec_learns_a_id($$SELECT vq_enqueue_many('sec_h', ARRAY['{"by": "b"}']::jsonb[], job_ids => ARRAY['sec-a-1'])::text$$) AS leaked_by_vq_enqueue_many;
-- What sec_b does get: its own job under that id, the same one every time (idempotent within
-- its role), in a batch too.
SELECT set_config('sec.b_execution_id', vq_enqueue('sec_h', '{"by": "b"}', job_id => 'sec-a-1')::text, false)
       <> current_setting('sec.a_execution_id') AS b_got_its_own;
SELECT (vq_enqueue_many('sec_h', ARRAY['{"by": "b"}', '{"by": "b"}']::jsonb[], job_ids => ARRAY['sec-b-new', 'sec-a-1']))[2]
       = current_setting('sec.b_execution_id')::uuid AS b_batch_gets_its_own;
-- A member of sec_a enqueues as itself (enqueued_by = sec_c): a job of its own too.
SET ROLE sec_c;
SELECT vq_enqueue('sec_h', '{"by": "c"}', job_id => 'sec-a-1') <> current_setting('sec.a_execution_id')::uuid AS member_gets_its_own;
RESET ROLE;
-- sec_a's job is untouched; each role holds 'sec-a-1' once.
SELECT enqueued_by, count(*) AS rows_holding_sec_a_1 FROM vq.job WHERE job_id = 'sec-a-1' GROUP BY 1 ORDER BY 1;
SELECT job_id, enqueued_by, payload ->> 'by' AS payload_by, state
  FROM vq.job WHERE execution_id = current_setting('sec.a_execution_id')::uuid;

------------------------------------------------------------------------------
-- 2b. Producing is a privilege: a NOTIFY handler needs a producer grant (its consumer runs
-- what the payload says); another queue, a priority or max_attempts above the handler's needs
-- a grant on the queue the job goes to. Superusers need neither. Outbox publishes likewise.
------------------------------------------------------------------------------
SELECT vq_register_notify_handler('sec_n', 'sec_channel');
SELECT vq_create_queue('sec_other') IS NOT NULL AS created;
SET ROLE sec_b;
SELECT vq_enqueue('sec_n', '{}', :'later');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('sec_n', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('sec_h', '{}', :'later', queue => 'sec_other');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('sec_h', '{}', :'later', priority => 5);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('sec_h', ARRAY['{}']::jsonb[], :'later', max_attempts => 10);
\echo :LAST_ERROR_SQLSTATE
-- what the handler would choose anyway, or less, needs nothing
SELECT vq_enqueue('sec_h', '{}', :'later', queue => 'default', priority => -1, max_attempts => 2) IS NOT NULL AS own_line;
SELECT vq_grant_producer('sec_n', 'sec_b');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT vq_grant_producer('sec_n', 'sec_b');
SELECT vq_grant_queue('sec_other', 'sec_b');
SELECT vq_grant_queue('default', 'sec_b');
SET ROLE sec_b;
SELECT vq_enqueue('sec_n', '{}', :'later') IS NOT NULL AS granted_producer;
SELECT vq_outbox_publish('sec_n', '{}', :'later') IS NOT NULL AS granted_publish;
SELECT vq_enqueue('sec_h', '{}', :'later', queue => 'sec_other') IS NOT NULL AS granted_queue;
SELECT vq_enqueue('sec_h', '{}', :'later', priority => 5, max_attempts => 10) IS NOT NULL AS granted_priority;
RESET ROLE;
SELECT vq_revoke_producer('sec_n', 'sec_b'), vq_revoke_queue('sec_other', 'sec_b'), vq_revoke_queue('default', 'sec_b');
SET ROLE sec_b;
SELECT vq_enqueue('sec_n', '{}', :'later');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DELETE FROM vq.outbox WHERE destination = 'sec_n';

------------------------------------------------------------------------------
-- 3. search_path hijack: objects named like the catalog's, ahead of pg_catalog.
------------------------------------------------------------------------------
CREATE SCHEMA sec_hijack;
GRANT USAGE ON SCHEMA sec_hijack TO PUBLIC;
-- Each trap records that it ran (in case the extension swallowed its error) and raises.
CREATE TABLE sec_hijack.ran (what text);
GRANT INSERT ON sec_hijack.ran TO PUBLIC;
CREATE FUNCTION sec_hijack.boom(what text) RETURNS void LANGUAGE plpgsql
    SET search_path = pg_catalog AS $$
BEGIN
    INSERT INTO sec_hijack.ran VALUES (what);
    RAISE EXCEPTION 'hijacked: %', what;
END $$;
-- Functions.
CREATE FUNCTION sec_hijack.now() RETURNS timestamptz LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('now()'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('clock_timestamp()'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.upper(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('upper(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.lower(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('lower(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.format(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('format(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.format(text, VARIADIC text[]) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('format(text, VARIADIC text[])'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.jsonb_typeof(jsonb) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('jsonb_typeof(jsonb)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.jsonb_object_keys(jsonb) RETURNS SETOF text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('jsonb_object_keys(jsonb)'); END $$;
CREATE FUNCTION sec_hijack.jsonb_each(jsonb, OUT key text, OUT value jsonb) RETURNS SETOF record LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('jsonb_each(jsonb)'); END $$;
CREATE FUNCTION sec_hijack.jsonb_array_elements(jsonb) RETURNS SETOF jsonb LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('jsonb_array_elements(jsonb)'); END $$;
CREATE FUNCTION sec_hijack.to_regprocedure(text) RETURNS regprocedure LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('to_regprocedure(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.quote_literal(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('quote_literal(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.quote_ident(text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('quote_ident(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.array_to_string(text[], text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('array_to_string(text[], text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.cardinality(text[]) RETURNS integer LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('cardinality(text[])'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.octet_length(text) RETURNS integer LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('octet_length(text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.pg_has_role(name, oid, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('pg_has_role(name, oid, text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.gen_random_uuid() RETURNS uuid LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('gen_random_uuid()'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.unnest(uuid[]) RETURNS SETOF uuid LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('unnest(uuid[])'); END $$;
CREATE FUNCTION sec_hijack.unnest(text[]) RETURNS SETOF text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('unnest(text[])'); END $$;
CREATE FUNCTION sec_hijack.unnest(jsonb[]) RETURNS SETOF jsonb LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('unnest(jsonb[])'); END $$;
-- Operators, each backed by a function that raises.
CREATE FUNCTION sec_hijack.op_bool(text, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('operator on (text, text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_concat(text, text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('|| (text, text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_append(text[], text) RETURNS text[] LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('|| (text[], text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_state_eq(vq.job_state, vq.job_state) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('= (vq.job_state, vq.job_state)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_uuid_eq(uuid, uuid) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('= (uuid, uuid)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_int_eq(integer, integer) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('= (integer, integer)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_exists(jsonb, text) RETURNS boolean LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('? (jsonb, text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_get_text(jsonb, text) RETURNS text LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('->> (jsonb, text)'); RETURN NULL; END $$;
CREATE FUNCTION sec_hijack.op_get(jsonb, text) RETURNS jsonb LANGUAGE plpgsql AS
    $$ BEGIN PERFORM sec_hijack.boom('-> (jsonb, text)'); RETURN NULL; END $$;
CREATE OPERATOR sec_hijack.=   (LEFTARG = text, RIGHTARG = text, FUNCTION = sec_hijack.op_bool);
CREATE OPERATOR sec_hijack.<>  (LEFTARG = text, RIGHTARG = text, FUNCTION = sec_hijack.op_bool);
CREATE OPERATOR sec_hijack.~   (LEFTARG = text, RIGHTARG = text, FUNCTION = sec_hijack.op_bool);
CREATE OPERATOR sec_hijack.!~  (LEFTARG = text, RIGHTARG = text, FUNCTION = sec_hijack.op_bool);
CREATE OPERATOR sec_hijack.||  (LEFTARG = text, RIGHTARG = text, FUNCTION = sec_hijack.op_concat);
CREATE OPERATOR sec_hijack.||  (LEFTARG = text[], RIGHTARG = text, FUNCTION = sec_hijack.op_append);
CREATE OPERATOR sec_hijack.=   (LEFTARG = vq.job_state, RIGHTARG = vq.job_state, FUNCTION = sec_hijack.op_state_eq);
CREATE OPERATOR sec_hijack.=   (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = sec_hijack.op_uuid_eq);
CREATE OPERATOR sec_hijack.=   (LEFTARG = integer, RIGHTARG = integer, FUNCTION = sec_hijack.op_int_eq);
CREATE OPERATOR sec_hijack.?   (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = sec_hijack.op_exists);
CREATE OPERATOR sec_hijack.->> (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = sec_hijack.op_get_text);
CREATE OPERATOR sec_hijack.->  (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = sec_hijack.op_get);
-- The trap works: unqualified names in the caller's own SQL do resolve to it.
SET search_path = sec_hijack, pg_catalog, public;
SELECT 'a'::text = 'a'::text;
\echo :LAST_ERROR_SQLSTATE
SELECT now();
\echo :LAST_ERROR_SQLSTATE
SELECT format('%s', 'x'::text);
\echo :LAST_ERROR_SQLSTATE
RESET search_path;

CREATE FUNCTION public.sec_hj_fn(jsonb) RETURNS void LANGUAGE sql AS '';
GRANT EXECUTE ON FUNCTION
    vq_register_handler(text, regprocedure, text, integer, integer, integer, interval),
    vq_register_handlers(jsonb),
    vq_unregister_handler(text),
    vq_configure(jsonb),
    vq_create_queue(text, integer, integer, text, integer, integer, integer),
    vq_alter_queue(text, integer, integer, text, integer, integer, integer),
    vq_drop_queue(text),
    vq_set_contract_override(text, text, integer, integer)
  TO sec_admin;

-- The same block runs twice, each time in a fresh session (plans and the registry cache are
-- then built under the hostile search_path): as the superuser (suffix su), and as plain roles
-- (suffix pl: configuration by sec_admin, enqueues and reads by sec_a). Calls print results
-- whose display needs no operator; checks that compare values run after RESET search_path.

-- 3a. as the superuser
\c -
\set sfx su
\set cfg_role NONE
\set run_role NONE
----- hijack block (keep the two copies identical) -----
\set q sec_q_ :sfx
\set qtmp sec_qtmp_ :sfx
\set h sec_hj_ :sfx
\set h2 sec_hj2_ :sfx
\set h3 sec_hj3_ :sfx
\set jid sec-hj- :sfx
\set handlers '[{"name": "' :h2 '", "function": "public.sec_hj_fn(jsonb)", "maxAttempts": 4}, {"name": "' :h3 '", "channel": "sec_chan"}]'
\set config '{"queues": {"' :q '": {"sleepDelayMs": 2000}}, "contracts": {"' :h2 '": {"priority": 4}}}'
SET search_path = sec_hijack, pg_catalog, public;
SET ROLE :cfg_role;
SELECT (vq_create_queue(:'q', sleep_delay_ms => 1000, backoff_strategy => 'exponential')).backoff_strategy;
SELECT (vq_create_queue(:'qtmp')).name;
SELECT (vq_alter_queue(:'q', max_concurrent_jobs => 7, backoff_strategy => 'Exponential')).max_concurrent_jobs;
SELECT vq_drop_queue(:'qtmp');
SELECT vq_register_handler(:'h', 'public.sec_hj_fn(jsonb)', queue => :'q', priority => 3);
SELECT vq_register_handlers(:'handlers');
SELECT vq_set_contract_override(:'h', max_attempts => 9);
SELECT vq_configure(:'config');
SET ROLE :run_role;
SELECT * FROM vq_resolve_target(:'h');
SELECT t FROM vq_supported_target_ids() AS t WHERE t LIKE 'sec\_hj%' ORDER BY 1;
SELECT vq_backoff_delay('EXPONENTIAL', 1000, 60000, 3), vq_backoff_delay('linear', 1000, 60000, 3);
SELECT vq_context_set('tenant', '{"id": 7}');
SELECT vq_enqueue(:'h', '{"n": 1}', :'later', job_id => :'jid') AS id1 \gset
SELECT vq_enqueue(:'h', '{"n": 1}', :'later', job_id => :'jid') AS id1_again \gset
SELECT vq_enqueue_in(:'h', '{"n": 2}', '1 hour') IS NOT NULL AS enqueued;
SELECT vq_enqueue_many(:'h', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[], :'later', job_ids => ARRAY[:'jid', NULL]) AS ids3 \gset
SELECT vq_enqueue_many(:'h2', ARRAY['{"n": 5}', '{"n": 6}']::jsonb[], :'later') IS NOT NULL AS enqueued;
SELECT vq_context();
SELECT vq_context_clear();
SELECT name, kind, queue, priority, max_attempts, is_contract
  FROM vq.handler_settings WHERE name LIKE 'sec\_hj%' ORDER BY name;
SET ROLE :cfg_role;
SELECT vq_unregister_handler(:'h3');
RESET ROLE;
RESET search_path;
-- Checks (normal search_path).
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy
  FROM vq.queue WHERE name IN (:'q', :'qtmp') ORDER BY name;
SELECT name, kind, fn, address, queue, priority, max_attempts
  FROM vq.handler WHERE name IN (:'h', :'h2', :'h3') ORDER BY name;
SELECT handler, queue, priority, max_attempts
  FROM vq.contract_override WHERE handler IN (:'h', :'h2') ORDER BY handler;
SELECT :'id1'::uuid = :'id1_again'::uuid AS idempotent,
       (:'ids3'::uuid[])[1] = :'id1'::uuid AS batch_returned_holder,
       (:'ids3'::uuid[])[2] <> :'id1'::uuid AS batch_inserted_other;
SELECT handler, payload ->> 'n' AS n, job_id = :'jid' AS is_jid, job_id LIKE 'delayed-%' AS generated_id,
       state, queue, priority, max_attempts, metadata,
       CASE WHEN enqueued_by = session_user::regrole THEN 'session user' ELSE enqueued_by::text END AS enqueued_by,
       CASE WHEN scheduled_at = :'later' THEN 'later'
            WHEN scheduled_at BETWEEN now() + interval '50 minutes' AND now() + interval '70 minutes' THEN 'in an hour'
            ELSE scheduled_at::text END AS due
  FROM vq.job WHERE handler IN (:'h', :'h2') ORDER BY handler, n;
----- end of hijack block -----

-- 3b. as plain roles
\c -
\set sfx pl
\set cfg_role sec_admin
\set run_role sec_a
----- hijack block (keep the two copies identical) -----
\set q sec_q_ :sfx
\set qtmp sec_qtmp_ :sfx
\set h sec_hj_ :sfx
\set h2 sec_hj2_ :sfx
\set h3 sec_hj3_ :sfx
\set jid sec-hj- :sfx
\set handlers '[{"name": "' :h2 '", "function": "public.sec_hj_fn(jsonb)", "maxAttempts": 4}, {"name": "' :h3 '", "channel": "sec_chan"}]'
\set config '{"queues": {"' :q '": {"sleepDelayMs": 2000}}, "contracts": {"' :h2 '": {"priority": 4}}}'
SET search_path = sec_hijack, pg_catalog, public;
SET ROLE :cfg_role;
SELECT (vq_create_queue(:'q', sleep_delay_ms => 1000, backoff_strategy => 'exponential')).backoff_strategy;
SELECT (vq_create_queue(:'qtmp')).name;
SELECT (vq_alter_queue(:'q', max_concurrent_jobs => 7, backoff_strategy => 'Exponential')).max_concurrent_jobs;
SELECT vq_drop_queue(:'qtmp');
SELECT vq_register_handler(:'h', 'public.sec_hj_fn(jsonb)', queue => :'q', priority => 3);
SELECT vq_register_handlers(:'handlers');
SELECT vq_set_contract_override(:'h', max_attempts => 9);
SELECT vq_configure(:'config');
SET ROLE :run_role;
SELECT * FROM vq_resolve_target(:'h');
SELECT t FROM vq_supported_target_ids() AS t WHERE t LIKE 'sec\_hj%' ORDER BY 1;
SELECT vq_backoff_delay('EXPONENTIAL', 1000, 60000, 3), vq_backoff_delay('linear', 1000, 60000, 3);
SELECT vq_context_set('tenant', '{"id": 7}');
SELECT vq_enqueue(:'h', '{"n": 1}', :'later', job_id => :'jid') AS id1 \gset
SELECT vq_enqueue(:'h', '{"n": 1}', :'later', job_id => :'jid') AS id1_again \gset
SELECT vq_enqueue_in(:'h', '{"n": 2}', '1 hour') IS NOT NULL AS enqueued;
SELECT vq_enqueue_many(:'h', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[], :'later', job_ids => ARRAY[:'jid', NULL]) AS ids3 \gset
SELECT vq_enqueue_many(:'h2', ARRAY['{"n": 5}', '{"n": 6}']::jsonb[], :'later') IS NOT NULL AS enqueued;
SELECT vq_context();
SELECT vq_context_clear();
SELECT name, kind, queue, priority, max_attempts, is_contract
  FROM vq.handler_settings WHERE name LIKE 'sec\_hj%' ORDER BY name;
SET ROLE :cfg_role;
SELECT vq_unregister_handler(:'h3');
RESET ROLE;
RESET search_path;
-- Checks (normal search_path).
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy
  FROM vq.queue WHERE name IN (:'q', :'qtmp') ORDER BY name;
SELECT name, kind, fn, address, queue, priority, max_attempts
  FROM vq.handler WHERE name IN (:'h', :'h2', :'h3') ORDER BY name;
SELECT handler, queue, priority, max_attempts
  FROM vq.contract_override WHERE handler IN (:'h', :'h2') ORDER BY handler;
SELECT :'id1'::uuid = :'id1_again'::uuid AS idempotent,
       (:'ids3'::uuid[])[1] = :'id1'::uuid AS batch_returned_holder,
       (:'ids3'::uuid[])[2] <> :'id1'::uuid AS batch_inserted_other;
SELECT handler, payload ->> 'n' AS n, job_id = :'jid' AS is_jid, job_id LIKE 'delayed-%' AS generated_id,
       state, queue, priority, max_attempts, metadata,
       CASE WHEN enqueued_by = session_user::regrole THEN 'session user' ELSE enqueued_by::text END AS enqueued_by,
       CASE WHEN scheduled_at = :'later' THEN 'later'
            WHEN scheduled_at BETWEEN now() + interval '50 minutes' AND now() + interval '70 minutes' THEN 'in an hour'
            ELSE scheduled_at::text END AS due
  FROM vq.job WHERE handler IN (:'h', :'h2') ORDER BY handler, n;
----- end of hijack block -----

-- No hijack object ran, not even one whose error was swallowed.
SELECT what AS hijack_objects_that_ran FROM sec_hijack.ran;

------------------------------------------------------------------------------
-- Clean up (roles are cluster-wide).
------------------------------------------------------------------------------
SET client_min_messages = warning;
DELETE FROM vq.job WHERE handler LIKE 'sec\_%';
SELECT vq_unregister_handler(h) FROM unnest(ARRAY['sec_h', 'sec_n', 'sec_hj_su', 'sec_hj2_su', 'sec_hj_pl', 'sec_hj2_pl']) AS h;
SELECT vq_drop_contract_override(h) FROM unnest(ARRAY['sec_hj_su', 'sec_hj2_su', 'sec_hj_pl', 'sec_hj2_pl']) AS h;
SELECT vq_drop_queue(q) FROM unnest(ARRAY['sec_q_su', 'sec_q_pl', 'sec_other']) AS q;
DROP SCHEMA sec_hijack CASCADE;
DROP FUNCTION sec_noop(jsonb), sec_hj_fn(jsonb), sec_learns_a_id(text);
DROP OWNED BY sec_a, sec_b, sec_c, sec_admin;
DROP ROLE sec_a, sec_b, sec_c, sec_admin;
RESET client_min_messages;

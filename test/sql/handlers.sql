-- handlers.sql: handler registration, shown as output: vq_register_handler /
-- vq_register_notify_handler / vq_unregister_handler, their errors (VQ102, with messages),
-- the stored rows, the vq.handler_settings view, and a valid vq_register_handlers set.
-- Elsewhere: the precedence rule (test/pgtap/precedence.sql), bulk-registration violation
-- lists (test/pgtap/registration.sql), function privileges (test/pgtap/privileges.sql).
\set SHOW_CONTEXT never

CREATE SCHEMA hd;
CREATE FUNCTION hd.h_one(jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.h_ctx(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.h_ret(jsonb) RETURNS jsonb LANGUAGE sql AS 'SELECT $1';
-- Signatures a handler cannot have.
CREATE FUNCTION hd.b_text(text) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.b_json(json) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.b_none() RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.b_three(jsonb, vq.job_context, integer) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.b_jt(jsonb, text) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION hd.b_swapped(vq.job_context, jsonb) RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE hd.b_proc(jsonb) LANGUAGE sql AS '';
CREATE FUNCTION hd.b_srf(jsonb) RETURNS SETOF integer LANGUAGE sql AS 'SELECT 1';
CREATE AGGREGATE hd.b_agg(jsonb) (SFUNC = jsonb_concat, STYPE = jsonb);
SELECT (vq_create_queue('hd.q')).name, (vq_create_queue('hd.q2')).name;

-- A handler row without its timestamp.
CREATE VIEW pg_temp.hs AS
SELECT name, kind, address, takes_context, channel, queue, priority, max_attempts
  FROM vq.handler;

-------------------------------------------------------------------------------
-- Function handlers: (jsonb) and (jsonb, vq.job_context), plain and contract.
-------------------------------------------------------------------------------
SELECT vq_register_handler('hd.plain', 'hd.h_one(jsonb)');
SELECT vq_register_handler('hd.ctx', 'hd.h_ctx(jsonb, vq.job_context)');
SELECT vq_register_handler('hd.ret', 'hd.h_ret(jsonb)');
SELECT vq_register_handler('hd.contract', 'hd.h_ctx(jsonb, vq.job_context)', 'hd.q', 5, 9);
SELECT vq_register_handler('hd.partial', 'hd.h_one(jsonb)', priority => 2);
SELECT vq_register_handler('hd.limits-1', 'hd.h_one(jsonb)', max_attempts => 1);
SELECT vq_register_handler('hd.limits_1000', 'hd.h_one(jsonb)', max_attempts => 1000);
SELECT vq_register_handler(repeat('h', 128), 'hd.h_one(jsonb)');
SELECT * FROM pg_temp.hs WHERE kind = 'function' ORDER BY name;

-- Rejected signatures: VQ102 naming the handler and the function.
SELECT vq_register_handler('hd.bad', 'hd.b_text(text)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_json(json)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_none()');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_three(jsonb, vq.job_context, integer)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_jt(jsonb, text)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_swapped(vq.job_context, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_proc(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_srf(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.b_agg(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', NULL);
\echo :LAST_ERROR_SQLSTATE

-- Names must match ^[a-zA-Z0-9._-]{1,128}$: empty, a space, 129 characters,
-- non-ASCII, a trailing newline, NULL.
SELECT vq_register_handler('', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd bad', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler(repeat('h', 129), 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.héllo', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler(E'hd.newline\n', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler(NULL, 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd bad', 'hd_chan');
\echo :LAST_ERROR_SQLSTATE

-- Contract defaults: unknown queue, max_attempts outside [1, 1000].
SELECT vq_register_handler('hd.bad', 'hd.h_one(jsonb)', 'hd.nosuchq');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.h_one(jsonb)', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.h_one(jsonb)', max_attempts => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.bad', 'hd.h_one(jsonb)', max_attempts => 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd.bad', 'hd_chan', 'hd.nosuchq', 1, 1001);
\echo :LAST_ERROR_SQLSTATE
-- All the violations of one registration at once.
SELECT vq_register_handler('hd bad', 'hd.b_text(text)', 'hd.nosuchq', 1, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS registered FROM vq.handler WHERE name LIKE 'hd%bad%' OR name IN ('', 'hd.héllo');

-------------------------------------------------------------------------------
-- NOTIFY handlers.
-------------------------------------------------------------------------------
SELECT vq_register_notify_handler('hd.notify', 'hd_chan');
SELECT vq_register_notify_handler('hd.notify-contract', 'hd_chan', 'hd.q2', -1, 4);
SELECT vq_register_notify_handler('hd.notify63', repeat('c', 63));
SELECT name, kind, address = 'notify:' || channel AS address_ok, takes_context, octet_length(channel),
       queue, priority, max_attempts
  FROM pg_temp.hs WHERE kind = 'notify' ORDER BY name;
-- Channel: empty, 64 bytes, 64 bytes in 32 characters, NULL.
SELECT vq_register_notify_handler('hd.badchan', '');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd.badchan', repeat('c', 64));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd.badchan', repeat('é', 32));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd.badchan', NULL);
\echo :LAST_ERROR_SQLSTATE

-- Names are unique across both kinds.
SELECT vq_register_handler('hd.plain', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd.plain', 'hd_chan');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hd.notify', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hd.notify', 'hd_other');
\echo :LAST_ERROR_SQLSTATE
SELECT name, kind, address FROM vq.handler WHERE name IN ('hd.plain', 'hd.notify') ORDER BY name;

-------------------------------------------------------------------------------
-- vq_unregister_handler: true when it was registered; the name is free again.
-------------------------------------------------------------------------------
SELECT vq_unregister_handler('hd.ret');
SELECT vq_unregister_handler('hd.ret');
SELECT vq_unregister_handler('hd.never-registered');
SELECT vq_unregister_handler(NULL);
SELECT vq_register_notify_handler('hd.ret', 'hd_chan');
SELECT name, kind FROM vq.handler WHERE name = 'hd.ret';
SELECT vq_unregister_handler('hd.ret');
SELECT vq_unregister_handler(repeat('h', 128));
SELECT count(*) FROM vq.handler WHERE name IN ('hd.ret', repeat('h', 128));

-------------------------------------------------------------------------------
-- vq.handler_settings: one row per registered handler, with its kind, whether it
-- declares defaults (is_contract) and its effective settings.
-------------------------------------------------------------------------------
SELECT name, kind, queue, priority, max_attempts, is_contract
  FROM vq.handler_settings WHERE name LIKE 'hd.%' ORDER BY name;
-- An override does not make a handler a contract; an override of a handler that is not
-- registered shows nowhere.
SELECT vq_set_contract_override('hd.plain', 'hd.q2', 8);
SELECT vq_set_contract_override('hd.unregistered', 'hd.q', 1, 1);
SELECT name, is_contract FROM vq.handler_settings WHERE name IN ('hd.plain', 'hd.unregistered');
-- The view and the C resolver agree.
SELECT count(*) AS disagreements
  FROM vq.handler_settings s, LATERAL vq_resolve_target(s.name) r
 WHERE s.name LIKE 'hd.%'
   AND (r.handler_address, r.queue, r.priority, r.max_attempts)
       IS DISTINCT FROM (s.address, s.queue, s.priority, s.max_attempts);
SELECT vq_drop_contract_override('hd.plain'), vq_drop_contract_override('hd.unregistered');

-------------------------------------------------------------------------------
-- Bulk registration: vq_register_handlers(jsonb array) returns the count.
-------------------------------------------------------------------------------
SELECT vq_register_handlers('[
  {"name": "hb_f1", "function": "hd.h_one(jsonb)"},
  {"name": "hb_f2", "function": "hd.h_ctx(jsonb, vq.job_context)", "queue": "hd.q", "priority": 4, "maxAttempts": 7},
  {"name": "hb_n1", "channel": "hb_chan"},
  {"name": "hb_n2", "channel": "hb_chan2", "maxAttempts": 1}]');
SELECT * FROM pg_temp.hs WHERE name LIKE 'hb%' ORDER BY name;
SELECT name, queue, priority, max_attempts, is_contract
  FROM vq.handler_settings WHERE name LIKE 'hb%' ORDER BY name;
SELECT vq_register_handlers('[]');
-- Function names are resolved as vq_register_handler's regprocedure argument is: with the
-- caller's search_path (here hd and vq), as the caller; the address stored is qualified.
BEGIN;
SET LOCAL search_path = hd, vq, public;
SELECT vq_register_handler('hb_r0', 'h_one(jsonb)');
SELECT vq_register_handlers('[{"name": "hb_r1", "function": "h_one(jsonb)"},
                              {"name": "hb_r2", "function": "h_ctx(jsonb, job_context)"}]');
COMMIT;
SELECT name, address, takes_context FROM vq.handler WHERE name LIKE 'hb_r%' ORDER BY name;
-- Not on the caller's search_path: "does not exist", as for regprocedure input; an unknown type
-- is an invalid signature. Both are violations of their element (VQ102).
SELECT vq_register_handlers('[{"name": "hb_r3", "function": "h_one(jsonb)"},
                              {"name": "hb_r4", "function": "hd.h_ctx(jsonb, job_context)"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handler('hb_r3', 'h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
-- The caller's search_path is in effect for the lookup only: the registration itself still
-- runs with its own (a function of the caller's schema named like a catalog one changes nothing).
CREATE FUNCTION hd.jsonb_typeof(jsonb) RETURNS text LANGUAGE sql AS $$SELECT 'hijacked'$$;
BEGIN;
SET LOCAL search_path = hd, pg_catalog, public;
SELECT vq_register_handlers('[{"name": "hb_r5", "function": "h_one(jsonb)"}]');
SHOW search_path;
COMMIT;
SELECT name, address FROM vq.handler WHERE name = 'hb_r5';
DROP FUNCTION hd.jsonb_typeof(jsonb);
-- Not an array (of objects).
SELECT vq_register_handlers('{"name": "hb_x", "channel": "hb_chan"}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handlers(NULL);
\echo :LAST_ERROR_SQLSTATE

-- Clean up.
SELECT count(*) AS unregistered FROM vq.handler h, LATERAL vq_unregister_handler(h.name) u
 WHERE (h.name LIKE 'hd.%' OR h.name LIKE 'hb%') AND u;
SELECT vq_drop_queue('hd.q'), vq_drop_queue('hd.q2');
SET client_min_messages = warning;
DROP SCHEMA hd CASCADE;
RESET client_min_messages;
SELECT count(*) AS left_over FROM vq.handler WHERE name LIKE 'hd.%' OR name LIKE 'hb%';

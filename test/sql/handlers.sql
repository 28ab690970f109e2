-- Handler registration: vq_register_handler / vq_register_notify_handler /
-- vq_unregister_handler and their validation (VQ102), the vq.handler_settings
-- view (override > handler default > framework default), bulk registration
-- with vq_register_handlers (every violation in one error, all or nothing),
-- and the privileges of these functions (not executable by PUBLIC).
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

-- Runs vq_register_handlers(set); returns its SQLSTATE, the head of its message
-- and one row per violation (the error detail, or the message when there is no
-- detail), ordered by element, so the whole list can be compared.
CREATE FUNCTION pg_temp.bulk_violations(handlers jsonb) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
    n int;
    st text;
    msg text;
    det text;
BEGIN
    n := vq_register_handlers(handlers);
    RETURN NEXT format('registered %s', n);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN NEXT 'sqlstate: ' || st;
    IF coalesce(det, '') <> '' THEN
        RETURN NEXT 'message: ' || substring(msg FROM '^[^:]*: [0-9]+ violations');
    END IF;
    RETURN QUERY
        SELECT l FROM unnest(CASE WHEN coalesce(det, '') = '' THEN ARRAY[msg]
                                  ELSE string_to_array(det, E'\n') END) AS l
         ORDER BY substring(l FROM '^element ([0-9]+)')::int, l COLLATE "C";
END
$$;

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
-- vq.handler_settings: override > handler default > framework default.
-------------------------------------------------------------------------------
SELECT name, kind, queue, priority, max_attempts, is_contract
  FROM vq.handler_settings WHERE name LIKE 'hd.%' ORDER BY name;
-- Overrides, per field.
SELECT vq_set_contract_override('hd.contract', max_attempts => 1);
SELECT vq_set_contract_override('hd.plain', 'hd.q2', 8);
SELECT vq_set_contract_override('hd.partial', priority => -3);
SELECT vq_set_contract_override('hd.notify-contract', 'default', 0, 3);
-- An override of a handler that is not registered shows nowhere.
SELECT vq_set_contract_override('hd.unregistered', 'hd.q', 1, 1);
SELECT name, queue, priority, max_attempts, is_contract
  FROM vq.handler_settings WHERE name LIKE 'hd.%' ORDER BY name;
-- The view and the C resolver agree.
SELECT count(*) AS disagreements
  FROM vq.handler_settings s, LATERAL vq_resolve_target(s.name) r
 WHERE s.name LIKE 'hd.%'
   AND (r.handler_address, r.queue, r.priority, r.max_attempts)
       IS DISTINCT FROM (s.address, s.queue, s.priority, s.max_attempts);
-- Dropping the overrides restores the handler defaults.
SELECT vq_drop_contract_override('hd.contract'), vq_drop_contract_override('hd.plain'),
       vq_drop_contract_override('hd.partial'), vq_drop_contract_override('hd.notify-contract'),
       vq_drop_contract_override('hd.unregistered');
SELECT name, queue, priority, max_attempts
  FROM vq.handler_settings WHERE name IN ('hd.contract', 'hd.plain', 'hd.partial', 'hd.notify-contract')
 ORDER BY name;

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
-- Not an array (of objects).
SELECT vq_register_handlers('{"name": "hb_x", "channel": "hb_chan"}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handlers(NULL);
\echo :LAST_ERROR_SQLSTATE

-- A set with many violations: ONE error (VQ102) whose detail lists every one,
-- and nothing is registered, not even the valid elements 1 and 2.
SELECT vq_register_handler('hb_taken', 'hd.h_one(jsonb)');
SELECT count(*) AS handlers_before FROM vq.handler \gset
SELECT * FROM pg_temp.bulk_violations('[
  {"name": "hb_ok1", "function": "hd.h_one(jsonb)"},
  {"name": "hb_dup", "function": "hd.h_one(jsonb)"},
  {"name": "hb_dup", "channel": "hb_chan"},
  {"name": "hb_taken", "function": "hd.h_one(jsonb)"},
  {"name": "hb bad", "function": "hd.h_one(jsonb)"},
  {"name": "hb_missing", "function": "hd.nosuch(jsonb)"},
  {"name": "hb_sig", "function": "hd.b_text(text)"},
  {"name": "hb_field", "function": "hd.h_one(jsonb)", "colour": "red"},
  {"name": "hb_queue", "channel": "hb_chan", "queue": "hd.nosuchq", "maxAttempts": 0},
  5,
  {"name": "hb_both", "function": "hd.h_one(jsonb)", "channel": "hb_chan"},
  {"name": "hb_prio", "channel": "hb_chan", "priority": "high"},
  {"name": "hb_proc", "function": "hd.b_proc(jsonb)"},
  {"name": "hb_chan", "channel": ""}]');
SELECT count(*) - :handlers_before AS handlers_added FROM vq.handler;
SELECT count(*) AS registered FROM vq.handler WHERE name IN ('hb_ok1', 'hb_dup');

-- An element with several violations reports each of them, including those of
-- an element whose function is missing.
SELECT * FROM pg_temp.bulk_violations('[
  {"name": "hb bad2", "function": "hd.nosuch(jsonb)", "queue": "hd.nosuchq"}]');

-- A function that cannot be parsed or names an unknown type is a violation of
-- its element like any other (VQ102, listed with the rest), not a bare error.
SELECT l LIKE 'sqlstate: %' AS is_code, l
  FROM pg_temp.bulk_violations('[
  {"name": "hb_noparen", "function": "hd.h_one"},
  {"name": "hb_badtype", "function": "hd.h_one(hd.nosuchtype)"},
  {"name": "hb_notext", "function": 5},
  {"name": "hb_dup2", "channel": "hb_chan"},
  {"name": "hb_dup2", "channel": "hb_chan"}]') AS l
 WHERE l LIKE 'sqlstate: %' OR l LIKE 'message: %';
SELECT e AS element,
       EXISTS (SELECT 1 FROM pg_temp.bulk_violations('[
  {"name": "hb_noparen", "function": "hd.h_one"},
  {"name": "hb_badtype", "function": "hd.h_one(hd.nosuchtype)"},
  {"name": "hb_notext", "function": 5},
  {"name": "hb_dup2", "channel": "hb_chan"},
  {"name": "hb_dup2", "channel": "hb_chan"}]') AS l
                WHERE l LIKE format('element %s %%', e)) AS reported
  FROM generate_series(1, 5) AS e;
SELECT count(*) AS registered FROM vq.handler WHERE name LIKE 'hb_no%' OR name IN ('hb_badtype', 'hb_dup2');

-------------------------------------------------------------------------------
-- Privileges: registration is not executable by PUBLIC until granted.
-------------------------------------------------------------------------------
CREATE ROLE vq_handlers_plain;
GRANT USAGE ON SCHEMA hd TO vq_handlers_plain;
SET ROLE vq_handlers_plain;
-- Registrations are readable by everyone ...
SELECT count(*) > 0 AS can_read FROM vq.handler_settings WHERE name LIKE 'hd.%';
-- ... but not changeable.
SELECT vq_register_handler('hp.f', 'hd.h_one(jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_notify_handler('hp.n', 'hp_chan');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_handlers('[{"name": "hp.b", "channel": "hp_chan"}]');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_unregister_handler('hd.plain');
\echo :LAST_ERROR_SQLSTATE
DELETE FROM vq.handler WHERE name = 'hd.plain';
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT EXECUTE ON FUNCTION vq_register_handler(text, regprocedure, text, integer, integer),
                          vq_register_notify_handler(text, text, text, integer, integer),
                          vq_register_handlers(jsonb),
                          vq_unregister_handler(text)
   TO vq_handlers_plain;
SET ROLE vq_handlers_plain;
SELECT vq_register_handler('hp.f', 'hd.h_one(jsonb)');
SELECT vq_register_notify_handler('hp.n', 'hp_chan');
SELECT vq_register_handlers('[{"name": "hp.b", "channel": "hp_chan"}]');
SELECT vq_unregister_handler('hp.f'), vq_unregister_handler('hp.n'), vq_unregister_handler('hp.b');
RESET ROLE;
SELECT count(*) FROM vq.handler WHERE name LIKE 'hp.%';
DROP OWNED BY vq_handlers_plain;
DROP ROLE vq_handlers_plain;

-- Clean up.
SELECT count(*) AS unregistered FROM vq.handler h, LATERAL vq_unregister_handler(h.name) u
 WHERE (h.name LIKE 'hd.%' OR h.name LIKE 'hb%') AND u;
SELECT vq_drop_queue('hd.q'), vq_drop_queue('hd.q2');
SET client_min_messages = warning;
DROP SCHEMA hd CASCADE;
RESET client_min_messages;
SELECT count(*) AS left_over FROM vq.handler WHERE name LIKE 'hd.%' OR name LIKE 'hb%' OR name LIKE 'hp.%';

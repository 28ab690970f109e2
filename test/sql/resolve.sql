-- resolve.sql: target resolution and the backoff table (C).
--   * vq_resolve_target: (target_id, handler_name, handler_address, queue, priority,
--     max_attempts) with effective values for plain, contract, overridden and NOTIFY
--     handlers; errors for unregistered (VQ002) and malformed (VQ001) ids;
--   * vq_supported_target_ids: every registered handler except a function handler whose
--     function was dropped;
--   * vq_backoff_delay: FIXED = base, LINEAR = min(base*(n+1), max),
--     EXPONENTIAL = min(base*2^n, max); strategy case-insensitive; errors 22023.
\set SHOW_CONTEXT never
SET client_min_messages = warning;

-- Fixtures.
CREATE FUNCTION res_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION res_fn2(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION res_gone_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE SCHEMA res_schema;
CREATE FUNCTION res_schema."Odd Name"(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT q.name FROM unnest(ARRAY['res_q1', 'res_q2']) n, vq_create_queue(n) q;
SELECT vq_register_handler('res_plain', 'res_fn(jsonb)');
SELECT vq_register_handler('res_ctx', 'res_fn2(jsonb, vq.job_context)', 'res_q1', 4, 6);
SELECT vq_register_handler('res_partial', 'res_fn(jsonb)', priority => -3);
SELECT vq_register_handler('res_over', 'res_fn(jsonb)', 'res_q1', 4, 6);
SELECT vq_register_handler('res_odd', 'res_schema."Odd Name"(jsonb)');
SELECT vq_register_notify_handler('res_notify', 'res_chan');
SELECT vq_register_notify_handler('res_notify_c', 'res_chan_c', 'res_q2', 8, 1);
SELECT vq_register_handler('res_gone', 'res_gone_fn(jsonb)');
SELECT vq_set_contract_override('res_over', max_attempts => 10);
SELECT vq_set_contract_override('res_notify', 'res_q1', 2);

------------------------------------------------------------------------------
-- vq_resolve_target: effective settings per handler.
------------------------------------------------------------------------------
SELECT r.* FROM unnest(ARRAY['res_plain', 'res_ctx', 'res_partial', 'res_over', 'res_odd',
                             'res_notify', 'res_notify_c', 'res_gone']) WITH ORDINALITY t(id, n),
               vq_resolve_target(t.id) r
 ORDER BY t.n;
-- Resolution and enqueue agree.
SELECT vq_enqueue('res_over') AS id \gset
SELECT (r.queue, r.priority, r.max_attempts, r.handler_address) = (j.queue, j.priority, j.max_attempts, j.handler_address) AS agree
  FROM vq_resolve_target('res_over') r, vq.job j WHERE j.execution_id = :'id';
-- Overrides change the result at once; dropping them reverts.
SELECT vq_set_contract_override('res_plain', 'res_q2', 1, 2);
SELECT queue, priority, max_attempts FROM vq_resolve_target('res_plain');
SELECT vq_set_contract_override('res_plain', priority => 1);
SELECT queue, priority, max_attempts FROM vq_resolve_target('res_plain');
SELECT vq_drop_contract_override('res_plain');
SELECT queue, priority, max_attempts FROM vq_resolve_target('res_plain');
-- Within a transaction, an uncommitted override is seen by that transaction only until rollback.
BEGIN;
SELECT vq_set_contract_override('res_ctx', max_attempts => 1000);
SELECT max_attempts FROM vq_resolve_target('res_ctx');
ROLLBACK;
SELECT max_attempts FROM vq_resolve_target('res_ctx');
-- The function handler whose function is dropped still resolves (it is registered).
DROP FUNCTION res_gone_fn(jsonb);
SELECT * FROM vq_resolve_target('res_gone');
-- Errors: not registered (VQ002, an override alone does not register), malformed (VQ001).
SELECT vq_set_contract_override('res_only_override', priority => 1);
BEGIN;
DELETE FROM vq.handler WHERE name NOT LIKE 'res\_%';
SELECT * FROM vq_resolve_target('res_only_override');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT vq_drop_contract_override('res_only_override');
BEGIN;
DELETE FROM vq.handler;
SELECT * FROM vq_resolve_target('res_plain');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT * FROM vq_resolve_target('bad name');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM vq_resolve_target('');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM vq_resolve_target(repeat('r', 129));
\echo :LAST_ERROR_SQLSTATE
-- STRICT: a NULL target id gives NULL.
SELECT vq_resolve_target(NULL) IS NULL AS null_in_null_out;
-- After unregistering, the id no longer resolves.
SELECT vq_unregister_handler('res_partial');
\set VERBOSITY sqlstate
SELECT * FROM vq_resolve_target('res_partial');
\set VERBOSITY default

------------------------------------------------------------------------------
-- vq_supported_target_ids: every registered handler except dropped-function ones.
------------------------------------------------------------------------------
SELECT id FROM vq_supported_target_ids() id WHERE id LIKE 'res\_%' ORDER BY id;
-- A function re-created under the same signature is a new function: the handler still
-- points at the dropped one until it is registered again.
CREATE FUNCTION res_gone_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT 'res_gone' IN (SELECT vq_supported_target_ids()) AS listed_after_recreate;
SELECT vq_unregister_handler('res_gone'), vq_register_handler('res_gone', 'res_gone_fn(jsonb)');
SELECT 'res_gone' IN (SELECT vq_supported_target_ids()) AS listed_after_reregister;
-- A new registration is listed by the next call, and gone after unregistering.
SELECT vq_register_notify_handler('res_late', 'res_late_chan');
SELECT 'res_late' IN (SELECT vq_supported_target_ids()) AS listed;
SELECT vq_unregister_handler('res_late');
SELECT 'res_late' IN (SELECT vq_supported_target_ids()) AS listed_after_unregister;
-- With no handler registered, the set is empty.
BEGIN;
DELETE FROM vq.handler;
SELECT count(*) AS none FROM vq_supported_target_ids();
ROLLBACK;

------------------------------------------------------------------------------
-- vq_backoff_delay: the backoff table, with base 1000 ms and max 60000 ms.
------------------------------------------------------------------------------
SELECT n AS attempt,
       vq_backoff_delay('FIXED', 1000, 60000, n) AS fixed,
       vq_backoff_delay('LINEAR', 1000, 60000, n) AS linear,
       vq_backoff_delay('EXPONENTIAL', 1000, 60000, n) AS exponential
  FROM unnest(ARRAY[0, 1, 2, 3, 4, 5, 6, 7, 40, 59, 62, 63, 64, 100, 2147483647]) n;
-- The formula, checked over many attempts and several base/max pairs.
SELECT count(*) AS checked,
       count(*) FILTER (WHERE vq_backoff_delay('FIXED', b, m, n) <> b * interval '1 ms') AS fixed_wrong,
       count(*) FILTER (WHERE vq_backoff_delay('LINEAR', b, m, n)
                              <> least(b::numeric * (n + 1), m) * interval '1 ms') AS linear_wrong,
       count(*) FILTER (WHERE vq_backoff_delay('EXPONENTIAL', b, m, n)
                              <> least(b::numeric * power(2::numeric, n), m) * interval '1 ms') AS exponential_wrong
  FROM unnest(ARRAY[1, 7, 1000, 30000, 2147483647]) b,
       unnest(ARRAY[1, 1000, 3600000, 2147483647]) m,
       generate_series(0, 80) n;
-- Defaults of a queue (LINEAR, 30 s, 1 h) and extremes (no overflow).
SELECT vq_backoff_delay('LINEAR', 30000, 3600000, 0) AS first_retry,
       vq_backoff_delay('LINEAR', 30000, 3600000, 119) AS at_cap,
       vq_backoff_delay('LINEAR', 30000, 3600000, 1000) AS capped,
       vq_backoff_delay('LINEAR', 2147483647, 2147483647, 2147483647) AS linear_max,
       vq_backoff_delay('EXPONENTIAL', 2147483647, 2147483647, 2147483647) AS exponential_max,
       vq_backoff_delay('EXPONENTIAL', 1, 2147483647, 30) AS two_to_the_30;
-- A base above the max: FIXED keeps the base, the others are capped.
SELECT vq_backoff_delay('FIXED', 5000, 1000, 3) AS fixed, vq_backoff_delay('LINEAR', 5000, 1000, 0) AS linear,
       vq_backoff_delay('EXPONENTIAL', 5000, 1000, 0) AS exponential;
-- The strategy is case-insensitive.
SELECT vq_backoff_delay('fixed', 1000, 60000, 3) AS fixed, vq_backoff_delay('Linear', 1000, 60000, 3) AS linear,
       vq_backoff_delay('exPonential', 1000, 60000, 3) AS exponential;
-- STRICT: NULL in, NULL out.
SELECT vq_backoff_delay(NULL, 1000, 60000, 0) IS NULL AND vq_backoff_delay('FIXED', 1000, 60000, NULL) IS NULL AS strict;
-- Errors (22023).
SELECT vq_backoff_delay('RANDOM', 1000, 60000, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay('', 1000, 60000, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay(' LINEAR', 1000, 60000, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay('LINEAR', 0, 60000, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay('LINEAR', -5, 60000, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay('LINEAR', 1000, 0, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay('EXPONENTIAL', 1000, -1, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_backoff_delay('FIXED', 1000, 60000, -1);
\echo :LAST_ERROR_SQLSTATE

------------------------------------------------------------------------------
-- Clean up.
------------------------------------------------------------------------------
DELETE FROM vq.job WHERE handler LIKE 'res\_%';
SELECT vq_drop_contract_override(h) FROM unnest(ARRAY['res_over', 'res_notify']) h;
SELECT vq_unregister_handler(name) FROM vq.handler WHERE name LIKE 'res\_%' ORDER BY name;
SELECT vq_drop_queue(n) FROM unnest(ARRAY['res_q1', 'res_q2']) n;
DROP FUNCTION res_fn(jsonb), res_fn2(jsonb, vq.job_context), res_gone_fn(jsonb);
DROP SCHEMA res_schema CASCADE;

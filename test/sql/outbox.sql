-- outbox.sql: what publishing to the transactional outbox writes (the relay is covered by
-- test/scenarios/outbox_relay*.sh; during pg_regress no worker serves this database, so
-- every row stays PENDING).
--   * vq_outbox_publish returns a bigint id (increasing); the stored row: DELAYED_JOB,
--     destination, payload, headers untouched, scheduled_at NULL or as given, PENDING,
--     attempts 0, published_by = current_user;
--   * metadata = {"delivery": {"delayedJob": {queue, priority, maxAttempts}}, "context": ...}
--     with the EFFECTIVE values (contract override > handler default > framework default)
--     and the bound durable context; a later override change leaves the row alone;
--   * errors (before any row is written): bad target VQ001, unregistered VQ002 (listing the
--     registered names), no EXECUTE on the handler function 42501, headers not an object VQ006;
--   * the row joins the caller's transaction (rollback, savepoint rollback);
--   * vq_outbox_publish_to: DELAYED_JOB, NOTIFY (channel validation VQ105), registered
--     types, unknown types VQ105;
--   * vq_register_destination / vq_unregister_destination: validation (VQ105), not
--     executable by PUBLIC;
--   * a plain role publishes (to a handler it may execute) and sees only its own rows (RLS).
-- Table privileges (no role but the owner writes vq.outbox) are in test/pgtap/privileges.sql.
\set SHOW_CONTEXT never
SET client_min_messages = warning;

-- Fixtures.
CREATE FUNCTION ob_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION ob_secret_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
REVOKE EXECUTE ON FUNCTION ob_secret_fn(jsonb) FROM PUBLIC;
SELECT q.name FROM unnest(ARRAY['ob_q1', 'ob_q2']) n, vq_create_queue(n) q;
SELECT vq_register_handler('ob_plain', 'ob_fn(jsonb)');
SELECT vq_register_handler('ob_contract', 'ob_fn(jsonb)', 'ob_q1', 5, 7);
SELECT vq_register_handler('ob_over', 'ob_fn(jsonb)', 'ob_q1', 5, 7);
SELECT vq_set_contract_override('ob_over', 'ob_q2', 9, 2);
SELECT vq_register_handler('ob_partial', 'ob_fn(jsonb)', 'ob_q1', 5, 7);
SELECT vq_set_contract_override('ob_partial', priority => -3);
SELECT vq_register_handler('ob_plain_over', 'ob_fn(jsonb)');
SELECT vq_set_contract_override('ob_plain_over', max_attempts => 11);
SELECT vq_register_notify_handler('ob_notify_h', 'ob_chan_h', 'ob_q2', 1, 4);
SELECT vq_register_handler('ob_secret', 'ob_secret_fn(jsonb)');
-- The snapshot of one outbox row as (queue, priority, maxAttempts).
CREATE FUNCTION ob_snap(row_id bigint) RETURNS TABLE (queue text, priority int, max_attempts int)
    LANGUAGE sql AS $$
    SELECT o.metadata #>> '{delivery,delayedJob,queue}',
           (o.metadata #>> '{delivery,delayedJob,priority}')::int,
           (o.metadata #>> '{delivery,delayedJob,maxAttempts}')::int
      FROM vq.outbox o WHERE o.id = row_id $$;

------------------------------------------------------------------------------
-- vq_outbox_publish returns a bigint id, increasing with each call.
------------------------------------------------------------------------------
SELECT pg_get_function_result('vq_outbox_publish(text, jsonb, timestamptz, jsonb)'::regprocedure) AS result_type;
SELECT vq_outbox_publish('ob_plain', '{"n": 1}') AS id1 \gset
SELECT vq_outbox_publish('ob_plain', '{"n": 2}') AS id2 \gset
SELECT pg_typeof(vq_outbox_publish('ob_plain', '{"n": 3}')) AS returned_type;
SELECT :id2 > :id1 AS increasing,
       (SELECT max(id) FROM vq.outbox) > :id2 AS third_is_larger;

------------------------------------------------------------------------------
-- The stored row (inside a transaction, so now() is the publication's now()).
------------------------------------------------------------------------------
BEGIN;
SELECT vq_outbox_publish('ob_plain', '{"order": 42, "items": [1, 2]}', NULL,
                         '{"traceparent": "00-abc-01", "nested": {"a": [1, null]}, "empty": ""}') AS id \gset
SELECT destination_type, destination, payload, headers, metadata, status, attempts,
       scheduled_at IS NULL AS at_commit,
       published_by = current_user::regrole AS by_current_user,
       next_attempt_at IS NULL AND last_error IS NULL AND published_at IS NULL AS untouched,
       created_at = now() AND updated_at = now() AS created_now
  FROM vq.outbox WHERE id = :id;
COMMIT;
-- scheduled_at as given (past or future), a NULL payload, default and NULL headers.
SELECT vq_outbox_publish('ob_plain', NULL, '2999-01-02 03:04:05+00') AS id_future,
       vq_outbox_publish('ob_plain', '"text"', '2001-02-03 04:05:06+00') AS id_past,
       vq_outbox_publish('ob_plain', '[1, 2]', NULL, NULL) AS id_null_headers \gset
SELECT id = :id_future AS future, payload, headers, scheduled_at
  FROM vq.outbox WHERE id IN (:id_future, :id_past, :id_null_headers) ORDER BY id;
-- Named arguments.
SELECT vq_outbox_publish(target => 'ob_plain', payload => '{"named": true}',
                         headers => '{"h": 1}', scheduled_at => '2999-01-01 00:00:00+00') AS id \gset
SELECT destination, payload, headers, scheduled_at FROM vq.outbox WHERE id = :id;

------------------------------------------------------------------------------
-- The snapshot: effective values per field (override > handler default > framework
-- default), computed at publication time.
------------------------------------------------------------------------------
SELECT h AS target, s.*
  FROM unnest(ARRAY['ob_plain', 'ob_contract', 'ob_over', 'ob_partial', 'ob_plain_over', 'ob_notify_h']) h,
       LATERAL ob_snap(vq_outbox_publish(h, jsonb_build_object('target', h))) s;
-- ...the same values as vq.handler_settings and vq_resolve_target().
SELECT count(*) AS snapshots_differing_from_resolve
  FROM vq.outbox o, LATERAL vq_resolve_target(o.destination) r
 WHERE o.destination LIKE 'ob\_%' AND o.destination_type = 'DELAYED_JOB'
   AND o.metadata -> 'delivery' -> 'delayedJob' <> jsonb_build_object('queue', r.queue, 'priority', r.priority,
                                                                      'maxAttempts', r.max_attempts);
-- The metadata has exactly the keys delivery and context, the snapshot exactly three.
SELECT jsonb_pretty(metadata) AS metadata FROM vq.outbox WHERE id = (SELECT max(id) FROM vq.outbox);
-- An override changed after publication leaves the row alone; the next publication sees it
-- (same session: the registry cache is invalidated).
SELECT vq_outbox_publish('ob_over', '{}') AS id_before \gset
SELECT vq_set_contract_override('ob_over', 'ob_q1', 1, 1);
SELECT vq_outbox_publish('ob_over', '{}') AS id_after \gset
SELECT id = :id_before AS before, s.* FROM unnest(ARRAY[:id_before, :id_after]) id, LATERAL ob_snap(id) s;
-- In one transaction too.
BEGIN;
SELECT vq_set_contract_override('ob_over', 'ob_q2', 2, 2);
SELECT * FROM ob_snap(vq_outbox_publish('ob_over', '{}'));
ROLLBACK;
SELECT * FROM ob_snap(vq_outbox_publish('ob_over', '{}'));
SELECT vq_set_contract_override('ob_over', 'ob_q2', 9, 2);

------------------------------------------------------------------------------
-- Durable context: the context bound when publishing is stored as metadata.context.
------------------------------------------------------------------------------
SELECT vq_outbox_publish('ob_plain', '{}') AS id_noctx \gset
SELECT metadata -> 'context' AS no_context FROM vq.outbox WHERE id = :id_noctx;
SELECT vq_context_set('trace', '{"traceId": "t-1", "span": [1, 2]}');
SELECT vq_context_set('tenant', '"acme"');
SELECT vq_outbox_publish('ob_contract', '{}') AS id_ctx \gset
SELECT metadata FROM vq.outbox WHERE id = :id_ctx;
-- ...for the other destination types too ({"context": ...} only, no delivery snapshot).
SELECT vq_outbox_publish_to('NOTIFY', 'ob_chan', '{}') AS id_ctx_notify \gset
SELECT metadata FROM vq.outbox WHERE id = :id_ctx_notify;
-- Clearing it: the next row has an empty context again.
SELECT vq_context_clear();
SELECT vq_outbox_publish('ob_plain', '{}') AS id_cleared \gset
SELECT metadata -> 'context' AS cleared FROM vq.outbox WHERE id = :id_cleared;
-- The headers never hold the context, and the context never holds the headers.
SELECT vq_context_set('trace', '{"traceId": "t-2"}');
SELECT vq_outbox_publish('ob_plain', '{}', NULL, '{"x-hdr": "v"}') AS id_hc \gset
SELECT headers, metadata FROM vq.outbox WHERE id = :id_hc;
SELECT vq_context_clear();

------------------------------------------------------------------------------
-- The row joins the caller's transaction.
------------------------------------------------------------------------------
BEGIN;
SELECT vq_outbox_publish('ob_plain', '{"rolled": "back"}') AS id_rb \gset
SELECT count(*) AS visible_inside FROM vq.outbox WHERE id = :id_rb;
ROLLBACK;
SELECT count(*) AS after_rollback FROM vq.outbox WHERE id = :id_rb;
BEGIN;
SELECT vq_outbox_publish('ob_plain', '{"kept": 1}') AS id_kept \gset
SAVEPOINT s;
SELECT vq_outbox_publish('ob_plain', '{"kept": 2}') AS id_sp \gset
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT id = :id_kept AS kept, payload FROM vq.outbox WHERE id IN (:id_kept, :id_sp) ORDER BY id;
-- A failing statement later in the transaction takes the row with it.
BEGIN;
SELECT vq_outbox_publish('ob_plain', '{"doomed": true}') AS id_doomed \gset
SELECT 1 / 0;
\echo :LAST_ERROR_SQLSTATE
COMMIT;
SELECT count(*) AS after_failed_transaction FROM vq.outbox WHERE id = :id_doomed;

------------------------------------------------------------------------------
-- Errors, each with its SQLSTATE; none writes a row.
------------------------------------------------------------------------------
SELECT count(*) AS n0 FROM vq.outbox \gset
-- Target: NULL or malformed (VQ001).
SELECT vq_outbox_publish(NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('bad name!', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish(repeat('t', 129), '{}');
\echo :LAST_ERROR_SQLSTATE
-- Not registered (VQ002): the message lists the registered names (the handlers of other
-- test files are hidden by a transaction that is rolled back).
BEGIN;
DELETE FROM vq.handler WHERE name NOT LIKE 'ob\_%';
SELECT vq_outbox_publish('ob_nope', '{}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
DELETE FROM vq.handler;
SELECT vq_outbox_publish('ob_nope', '{}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- An override alone does not register a target.
SELECT vq_set_contract_override('ob_only_override', priority => 1);
SELECT vq_outbox_publish('ob_only_override', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_drop_contract_override('ob_only_override');
-- Headers must be a JSON object (VQ006).
SELECT vq_outbox_publish('ob_plain', '{}', NULL, '[]');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('ob_plain', '{}', NULL, '"x-hdr"');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('ob_plain', '{}', NULL, 'null');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('NOTIFY', 'ob_chan', '{}', NULL, '[1]');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) - :n0 AS rows_written_by_errors FROM vq.outbox;

------------------------------------------------------------------------------
-- vq_outbox_publish_to: DELAYED_JOB, NOTIFY, registered and unknown types.
------------------------------------------------------------------------------
-- DELAYED_JOB: as vq_outbox_publish (snapshot and all).
SELECT vq_outbox_publish_to('DELAYED_JOB', 'ob_over', '{"via": "publish_to"}', '2999-01-01 00:00:00+00',
                            '{"h": true}') AS id_dj \gset
SELECT destination_type, destination, payload, headers, scheduled_at, metadata, status, attempts
  FROM vq.outbox WHERE id = :id_dj;
SELECT vq_outbox_publish_to('DELAYED_JOB', 'ob_nope', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('DELAYED_JOB', 'bad name!', '{}');
\echo :LAST_ERROR_SQLSTATE
-- NOTIFY: the destination is the channel (1 to 63 bytes); no delivery snapshot.
SELECT vq_outbox_publish_to('NOTIFY', 'ob_chan', '{"msg": 1}', NULL, '{"k": "v"}') AS id_n \gset
SELECT destination_type, destination, payload, headers, metadata, status, attempts,
       scheduled_at IS NULL AS at_commit, published_by = current_user::regrole AS by_current_user
  FROM vq.outbox WHERE id = :id_n;
SELECT vq_outbox_publish_to('NOTIFY', repeat('c', 63), '{}') AS id_c63 \gset
SELECT length(destination) FROM vq.outbox WHERE id = :id_c63;
SELECT vq_outbox_publish_to('NOTIFY', repeat('c', 64), '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('NOTIFY', '', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('NOTIFY', NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to(NULL, 'ob_chan', '{}');
\echo :LAST_ERROR_SQLSTATE
-- Unknown types (VQ105); type names are case-sensitive.
SELECT vq_outbox_publish_to('KAFKA', 'topic', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('notify', 'ob_chan', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('ob.webhook', 'https://example.invalid/hook', '{}');
\echo :LAST_ERROR_SQLSTATE

------------------------------------------------------------------------------
-- vq_register_destination: validation, upsert, unregister.
------------------------------------------------------------------------------
CREATE FUNCTION ob_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
    RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('SUCCESS', NULL)::vq.publish_result $$;
CREATE FUNCTION ob_dest2(destination text, payload jsonb, headers jsonb, metadata jsonb)
    RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('SUCCESS', 'two')::vq.publish_result $$;
CREATE FUNCTION ob_dest_3args(destination text, payload jsonb, headers jsonb)
    RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('SUCCESS', NULL)::vq.publish_result $$;
CREATE FUNCTION ob_dest_text(destination text, payload jsonb, headers jsonb, metadata jsonb)
    RETURNS text LANGUAGE sql AS $$ SELECT 'SUCCESS' $$;
CREATE FUNCTION ob_dest_json_dest(destination jsonb, payload jsonb, headers jsonb, metadata jsonb)
    RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('SUCCESS', NULL)::vq.publish_result $$;
CREATE FUNCTION ob_dest_setof(destination text, payload jsonb, headers jsonb, metadata jsonb)
    RETURNS SETOF vq.publish_result LANGUAGE sql AS $$ SELECT ROW('SUCCESS', NULL)::vq.publish_result $$;
CREATE PROCEDURE ob_dest_proc(destination text, payload jsonb, headers jsonb, metadata jsonb)
    LANGUAGE sql AS $$ SELECT 1 $$;
SELECT vq_register_destination('ob.webhook', 'ob_dest(text, jsonb, jsonb, jsonb)');
SELECT type, fn FROM vq.destination WHERE type LIKE 'ob%' ORDER BY type;
-- Registering again replaces the function.
SELECT vq_register_destination('ob.webhook', 'ob_dest2(text, jsonb, jsonb, jsonb)');
SELECT type, fn FROM vq.destination WHERE type LIKE 'ob%' ORDER BY type;
-- Wrong signatures (VQ105).
SELECT vq_register_destination('ob.bad', 'ob_dest_3args(text, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('ob.bad', 'ob_dest_text(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('ob.bad', 'ob_dest_json_dest(jsonb, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('ob.bad', 'ob_dest_setof(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('ob.bad', 'ob_dest_proc(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
-- A NULL function (SQLSTATE only: the message's wording is not the point).
DO $$
BEGIN
    PERFORM vq_register_destination('ob.bad', NULL);
    RAISE NOTICE 'no error';
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'NULL fn rejected with SQLSTATE %', SQLSTATE;
END $$;
-- Reserved and malformed type names (VQ105).
SELECT vq_register_destination('DELAYED_JOB', 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('NOTIFY', 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('bad type', 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination('', 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination(repeat('d', 129), 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_register_destination(NULL, 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT type FROM vq.destination WHERE type LIKE 'ob%' OR type IN ('DELAYED_JOB', 'NOTIFY', 'bad type') ORDER BY type;
-- A registered type can be published to; its row carries {"context": ...} only.
SELECT vq_outbox_publish_to('ob.webhook', 'https://example.invalid/hook', '{"event": "paid"}', NULL,
                            '{"Authorization": "none"}') AS id_w \gset
SELECT destination_type, destination, payload, headers, metadata, status, attempts
  FROM vq.outbox WHERE id = :id_w;
-- Registration is transactional (a rolled-back registration does not exist).
BEGIN;
SELECT vq_register_destination('ob.rolled', 'ob_dest(text, jsonb, jsonb, jsonb)');
SELECT vq_outbox_publish_to('ob.rolled', 'x', '{}') AS id_rolled \gset
SELECT destination_type, status FROM vq.outbox WHERE id = :id_rolled;
ROLLBACK;
SELECT vq_outbox_publish_to('ob.rolled', 'x', '{}');
\echo :LAST_ERROR_SQLSTATE
-- Unregistering: true when it was registered; publishing to it fails afterwards; the rows
-- already published stay.
SELECT vq_register_destination('ob.gone', 'ob_dest(text, jsonb, jsonb, jsonb)');
SELECT vq_outbox_publish_to('ob.gone', 'x', '{}') AS id_gone \gset
SELECT vq_unregister_destination('ob.gone') AS first, vq_unregister_destination('ob.gone') AS second;
SELECT vq_outbox_publish_to('ob.gone', 'x', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT destination_type, status FROM vq.outbox WHERE id = :id_gone;

------------------------------------------------------------------------------
-- Privileges: a plain role.
------------------------------------------------------------------------------
CREATE ROLE ob_role;
CREATE ROLE ob_other;
CREATE ROLE ob_member;
GRANT ob_role TO ob_member;
-- Registration of destinations is not for PUBLIC; publishing is.
SELECT p AS function, has_function_privilege('ob_role', p, 'EXECUTE') AS ob_role_may_execute
  FROM unnest(ARRAY['vq_register_destination(text, regprocedure)', 'vq_unregister_destination(text)',
                    'vq_outbox_publish(text, jsonb, timestamptz, jsonb)',
                    'vq_outbox_publish_to(text, text, jsonb, timestamptz, jsonb)']) p;
SELECT count(*) AS published_by_others FROM vq.outbox WHERE published_by <> 'ob_role'::regrole \gset
SET ROLE ob_role;
SELECT vq_register_destination('ob.mine', 'ob_dest(text, jsonb, jsonb, jsonb)');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_unregister_destination('ob.webhook');
\echo :LAST_ERROR_SQLSTATE
-- Publishing to a handler it may execute, to NOTIFY and to a registered type.
SELECT vq_outbox_publish('ob_contract', '{"by": "ob_role"}') AS id_r1,
       vq_outbox_publish_to('NOTIFY', 'ob_chan', '{"by": "ob_role"}') AS id_r2,
       vq_outbox_publish_to('ob.webhook', 'x', '{"by": "ob_role"}') AS id_r3 \gset
-- It sees exactly its own rows, with published_by = ob_role.
SELECT destination_type, destination, payload, published_by, status, metadata
  FROM vq.outbox ORDER BY id;
-- Not a handler whose function it may not execute (the job would run as ob_role).
SELECT vq_outbox_publish('ob_secret', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish_to('DELAYED_JOB', 'ob_secret', '{}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- With EXECUTE granted, it may publish to that handler.
GRANT EXECUTE ON FUNCTION ob_secret_fn(jsonb) TO ob_role;
SET ROLE ob_role;
SELECT vq_outbox_publish('ob_secret', '{}') AS id_secret \gset
SELECT destination, published_by FROM vq.outbox WHERE id = :id_secret;
RESET ROLE;
-- Another role sees none of them; a member of ob_role sees ob_role's rows.
SET ROLE ob_other;
SELECT count(*) AS ob_other_sees FROM vq.outbox;
RESET ROLE;
SET ROLE ob_member;
SELECT published_by, count(*) AS ob_member_sees FROM vq.outbox GROUP BY 1;
RESET ROLE;
-- The superuser still sees every row: those of other roles, and ob_role's.
SELECT count(*) = :published_by_others AS others_unchanged FROM vq.outbox WHERE published_by <> 'ob_role'::regrole;
SELECT status, attempts FROM vq.outbox WHERE id IN (:id_r1, :id_r2, :id_r3) ORDER BY id;
-- Publishing inside a SECURITY DEFINER function records the function's owner.
CREATE FUNCTION ob_publish_as_owner() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    SET search_path = public, pg_temp
    AS $$ SELECT vq_outbox_publish('ob_secret', '{"via": "definer"}') $$;
ALTER FUNCTION ob_publish_as_owner() OWNER TO ob_role;
REVOKE EXECUTE ON FUNCTION ob_secret_fn(jsonb) FROM ob_role;
-- (ob_role may no longer execute ob_secret_fn: the definer's privileges count, not the caller's)
SELECT ob_publish_as_owner();
\echo :LAST_ERROR_SQLSTATE
GRANT EXECUTE ON FUNCTION ob_secret_fn(jsonb) TO ob_role;
SELECT ob_publish_as_owner() AS id_definer \gset
SELECT destination, payload, published_by FROM vq.outbox WHERE id = :id_definer;

------------------------------------------------------------------------------
-- Everything published here is still PENDING (no worker serves this database).
------------------------------------------------------------------------------
SELECT status, attempts, count(*) > 20 AS many FROM vq.outbox WHERE id >= :id1 GROUP BY 1, 2;

------------------------------------------------------------------------------
-- Clean up (roles are cluster-wide; handlers and queues would show in other files).
------------------------------------------------------------------------------
DELETE FROM vq.outbox WHERE published_by IN ('ob_role'::regrole);
DROP FUNCTION ob_publish_as_owner();
DROP ROLE ob_member;
DROP ROLE ob_other;
REVOKE EXECUTE ON FUNCTION ob_secret_fn(jsonb) FROM ob_role;
DROP ROLE ob_role;
SELECT vq_unregister_destination('ob.webhook');
SELECT count(*) AS unregistered FROM vq.handler h, LATERAL vq_unregister_handler(h.name) u
 WHERE h.name LIKE 'ob\_%';
SELECT vq_drop_contract_override(o.handler) FROM vq.contract_override o WHERE o.handler LIKE 'ob\_%' ORDER BY 1;
DELETE FROM vq.outbox WHERE destination LIKE 'ob%' OR destination IN ('x', 'https://example.invalid/hook')
    OR destination = repeat('c', 63);
SELECT vq_drop_queue(n) FROM unnest(ARRAY['ob_q1', 'ob_q2']) n;

-- enqueue.sql: vq_enqueue / vq_enqueue_in (C).
--   * calls written with untyped literals and named arguments resolve without casts;
--   * the stored row (state, attempt, job_id, handler_address, enqueued_by, times);
--   * every validation error with its SQLSTATE and message, raised before vq.job is
--     touched (shown by a second session holding an ACCESS EXCLUSIVE lock on vq.job);
--   * registry cache invalidation: a settings change made in the enqueuing transaction (and
--     undone by its rollback) or committed by another session is seen by the next enqueue;
--   * vq_enqueue_in resolved at call time; job_id idempotency; durable context; rollback.
-- The precedence rule (argument > contract override > handler default > framework default)
-- is tested in test/pgtap/precedence.sql; the EXECUTE check and enqueued_by across roles in
-- security.sql; vq_enqueue_many in enqueue_batch.sql.
\set SHOW_CONTEXT never
SET client_min_messages = warning;

-- A second session (dblink) for locking and for cross-session configuration changes.
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT format('dbname=%L host=%L port=%s', current_database(),
              split_part(current_setting('unix_socket_directories'), ',', 1),
              current_setting('port')) AS connstr \gset
SELECT dblink_connect('enq_other', :'connstr');

-- Fixtures.
CREATE FUNCTION enq_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION enq_fn2(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION enq_gone_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT q.name FROM unnest(ARRAY['enq_qh', 'enq_qo', 'enq_qa']) n, vq_create_queue(n) q;
SELECT vq_register_handler('enq_plain', 'enq_fn(jsonb)');
SELECT vq_register_handler('enq_ctx', 'enq_fn2(jsonb, vq.job_context)');
SELECT vq_register_handler('enq_contract', 'enq_fn(jsonb)', 'enq_qh', 5, 7);
SELECT vq_register_notify_handler('enq_notify', 'enq_chan');
SELECT vq_register_handler('enq_gone', 'enq_gone_fn(jsonb)');
-- One job's row, and its (queue, priority, max_attempts). Called in FROM on the id a
-- vq_enqueue() returns: volatile SQL functions see the row the argument just inserted.
CREATE FUNCTION enq_job(id uuid) RETURNS vq.job
    LANGUAGE sql AS $$ SELECT * FROM vq.job j WHERE j.execution_id = id $$;
CREATE FUNCTION enq_settings(id uuid) RETURNS TABLE (queue text, priority int, max_attempts int)
    LANGUAGE sql AS $$ SELECT j.queue, j.priority, j.max_attempts FROM vq.job j WHERE j.execution_id = id $$;

------------------------------------------------------------------------------
-- Untyped literals and named arguments resolve to vq_enqueue without casts.
------------------------------------------------------------------------------
SELECT vq_enqueue('enq_plain', '{}') AS id1,
       vq_enqueue('enq_plain', '{}', NULL, NULL, NULL, 5) AS id2,
       vq_enqueue('enq_plain') AS id3,
       vq_enqueue('enq_plain', '{"n": 4}', NULL, NULL, NULL, NULL, NULL, '{"m": 1}') AS id4,
       vq_enqueue(handler => 'enq_plain', payload => '{"n": 5}', max_attempts => 2, priority => -4) AS id5,
       vq_enqueue('enq_plain', max_attempts => 9) AS id6,
       vq_enqueue_in('enq_plain', '{}', '1 hour') AS id7,
       vq_enqueue_in('enq_plain', '{}', NULL, NULL, NULL, 5) AS id8 \gset
SELECT n, payload, priority, max_attempts, metadata
  FROM (VALUES (1, :'id1'::uuid), (2, :'id2'), (3, :'id3'), (4, :'id4'), (5, :'id5'),
               (6, :'id6'), (7, :'id7'), (8, :'id8')) v(n, id)
  JOIN vq.job j ON j.execution_id = v.id ORDER BY n;
-- The function resolved is the only vq_enqueue there is: no ambiguity, no casts.
SELECT p.oid::regprocedure FROM pg_proc p WHERE p.proname IN ('vq_enqueue', 'vq_enqueue_in') ORDER BY 1;

------------------------------------------------------------------------------
-- The stored row.
------------------------------------------------------------------------------
BEGIN;
SELECT vq_enqueue('enq_plain', '{"k": [1, 2]}', NULL, NULL, NULL, NULL, NULL, '{"m": {"x": 1}}') AS id_fn,
       vq_enqueue('enq_ctx', '"text payload"') AS id_fn2,
       vq_enqueue('enq_notify', 'null', NULL, NULL, NULL, NULL, 'enq-own-id') AS id_notify \gset
SELECT handler, state, attempt_number, handler_address, queue, priority, max_attempts, payload, metadata,
       CASE WHEN job_id = 'delayed-' || execution_id THEN 'delayed-<execution_id>' ELSE job_id END AS job_id,
       enqueued_by = current_user::regrole AS by_current_user,
       scheduled_at BETWEEN now() AND clock_timestamp() AS due_now, created_at = now() AS created_now, updated_at = now() AS updated_now,
       started_at IS NULL AND finished_at IS NULL AND worker_pid IS NULL AND last_error IS NULL
         AND NOT cancel_requested AND progress_total IS NULL AS not_started
  FROM vq.job WHERE execution_id IN (:'id_fn', :'id_fn2', :'id_notify') ORDER BY handler;
COMMIT;
-- A NULL payload is stored as SQL NULL; a past run_at is accepted as is.
SELECT vq_enqueue('enq_plain', NULL, '2001-02-03 04:05:06+00') AS id \gset
SELECT payload IS NULL AS null_payload, state, scheduled_at = '2001-02-03 04:05:06+00' AS past_run_at
  FROM vq.job WHERE execution_id = :'id';
-- enqueued_by is the enqueuing role, not the extension owner that writes the row.
CREATE ROLE enq_role;
SET ROLE enq_role;
SELECT vq_enqueue('enq_plain', '{"by": "enq_role"}') AS id \gset
SELECT enqueued_by::text, payload FROM vq.job WHERE execution_id = :'id';
RESET ROLE;

------------------------------------------------------------------------------
-- Validation errors. A second session holds ACCESS EXCLUSIVE on vq.job: a call that
-- touched the table would wait and fail with 55P03; each one below fails with its own
-- code at once, i.e. before any table is touched.
------------------------------------------------------------------------------
SELECT count(*) AS n0 FROM vq.job \gset
SELECT dblink_exec('enq_other', 'BEGIN');
SELECT dblink_exec('enq_other', 'LOCK TABLE vq.job IN ACCESS EXCLUSIVE MODE');
SET lock_timeout = '300ms';
-- Proof that the lock is held: a valid enqueue cannot write.
SELECT vq_enqueue('enq_plain');
\echo :LAST_ERROR_SQLSTATE
-- Handler name: NULL or malformed (VQ001).
SELECT vq_enqueue(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue(NULL, '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('bad name!');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue(repeat('x', 129));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_in('bad/name', '{}', '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- Unregistered handler (VQ002): the message lists the registered names. Run against a
-- known set of handlers (the others are hidden by a transaction that is rolled back).
BEGIN;
DELETE FROM vq.handler WHERE name NOT LIKE 'enq\_%';
SELECT vq_enqueue('enq_nope');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
DELETE FROM vq.handler;
SELECT vq_enqueue('enq_nope', '{}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- More than 20 registered: the first 20 (by name) and "and N more".
BEGIN;
DELETE FROM vq.handler;
SELECT count(vq_register_handler(format('enq_many_%s', lpad(i::text, 2, '0')), 'enq_fn(jsonb)'))
  FROM generate_series(1, 23) i;
SELECT vq_enqueue_in('enq_nope', '{}', '1 minute');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- Exactly 20: no "and N more".
BEGIN;
DELETE FROM vq.handler;
SELECT count(vq_register_handler(format('enq_many_%s', lpad(i::text, 2, '0')), 'enq_fn(jsonb)'))
  FROM generate_series(1, 20) i;
SELECT vq_enqueue('enq_nope');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- max_attempts outside [1, 1000] (VQ003).
SELECT vq_enqueue('enq_plain', '{}', NULL, NULL, NULL, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', NULL, NULL, NULL, 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', max_attempts => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_in('enq_plain', '{}', '1 minute', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
-- Unknown queue (VQ004): from the argument ...
SELECT vq_enqueue('enq_plain', '{}', NULL, 'enq_no_such_queue');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_in('enq_plain', '{}', '1 minute', 'enq_no_such_queue');
\echo :LAST_ERROR_SQLSTATE
-- ... and from the resolved default, when the queue "default" has gone (superuser surgery).
BEGIN;
UPDATE vq.handler SET queue = NULL WHERE queue = 'default';
UPDATE vq.contract_override SET queue = NULL WHERE queue = 'default';
DELETE FROM vq.queue WHERE name = 'default';
SELECT vq_enqueue('enq_plain');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- metadata that is not a JSON object (VQ006).
SELECT vq_enqueue('enq_plain', '{}', metadata => '[1, 2]');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', metadata => '"scalar"');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', metadata => '42');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', metadata => 'null');
\echo :LAST_ERROR_SQLSTATE
-- job_id empty or longer than 255 bytes (VQ007); bytes, not characters.
SELECT vq_enqueue('enq_plain', '{}', job_id => '');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', job_id => repeat('j', 256));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', job_id => repeat('é', 128));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_in('enq_plain', '{}', '1 minute', job_id => '');
\echo :LAST_ERROR_SQLSTATE
-- A payload, metadata or outbox headers larger than vq.max_payload_bytes /
-- vq.max_metadata_bytes (VQ012); settings only a superuser may change.
SET vq.max_payload_bytes = 1024;
SET vq.max_metadata_bytes = 1024;
SELECT vq_enqueue('enq_plain', jsonb_build_object('blob', repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enq_plain', ARRAY['{}'::jsonb, jsonb_build_object('blob', repeat('x', 2000))]);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue('enq_plain', '{}', metadata => jsonb_build_object('m', repeat('y', 2000)));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('enq_plain', jsonb_build_object('blob', repeat('x', 2000)));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_outbox_publish('enq_plain', '{}', headers => jsonb_build_object('h', repeat('z', 2000)));
\echo :LAST_ERROR_SQLSTATE
RESET vq.max_payload_bytes;
RESET vq.max_metadata_bytes;
SET ROLE enq_role;
SET vq.max_payload_bytes = 100000000;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- A function handler whose function was dropped after registration (42883).
DROP FUNCTION enq_gone_fn(jsonb);
SELECT vq_enqueue('enq_gone', '{}');
\echo :LAST_ERROR_SQLSTATE
RESET lock_timeout;
SELECT dblink_exec('enq_other', 'ROLLBACK');
SELECT count(*) = :n0 AS nothing_inserted FROM vq.job;

-- The bounds themselves are accepted, and so are job_ids of exactly 255 bytes.
SELECT * FROM enq_settings(vq_enqueue('enq_plain', '{}', NULL, NULL, NULL, 1));
SELECT * FROM enq_settings(vq_enqueue('enq_plain', '{}', NULL, NULL, NULL, 1000));
SELECT octet_length(job_id), state FROM enq_job(vq_enqueue('enq_plain', job_id => repeat('j', 255)));
SELECT octet_length(job_id), state FROM enq_job(vq_enqueue('enq_plain', job_id => repeat('é', 127) || 'j'));

------------------------------------------------------------------------------
-- Registry cache. enq_contract's defaults are (enq_qh, 5, 7).
------------------------------------------------------------------------------
-- A change inside the enqueuing transaction is seen at once, and forgotten again when that
-- transaction rolls back.
BEGIN;
SELECT 'same transaction' AS "case", * FROM enq_settings(vq_enqueue('enq_contract'));
SELECT vq_set_contract_override('enq_contract', 'enq_qo', 9, 11);
SELECT 'same transaction, after override' AS "case", * FROM enq_settings(vq_enqueue('enq_contract'));
ROLLBACK;
SELECT 'after rollback' AS "case", * FROM enq_settings(vq_enqueue('enq_contract'));
-- A change committed by another session is seen by this session's next enqueue.
SELECT r AS other_session FROM dblink('enq_other', $$SELECT vq_set_contract_override('enq_contract', 'enq_qo', 9, 11)::text$$) AS t(r text);
SELECT 'override by another session' AS "case", * FROM enq_settings(vq_enqueue('enq_contract'));
SELECT r AS other_session FROM dblink('enq_other', $$SELECT vq_drop_contract_override('enq_contract')::text$$) AS t(r text);
SELECT 'dropped by another session' AS "case", * FROM enq_settings(vq_enqueue('enq_contract'));
SELECT r AS other_session FROM dblink('enq_other', $$SELECT vq_register_handler('enq_late', 'enq_fn(jsonb)', 'enq_qa', 1, 2)::text$$) AS t(r text);
SELECT 'registered by another session' AS "case", * FROM enq_settings(vq_enqueue('enq_late'));
SELECT r AS other_session FROM dblink('enq_other', $$SELECT vq_unregister_handler('enq_late')::text$$) AS t(r text);
\set VERBOSITY sqlstate
SELECT vq_enqueue('enq_late');
\set VERBOSITY default

------------------------------------------------------------------------------
-- vq_enqueue_in: due clock_timestamp() + delay at the call, not at transaction start.
------------------------------------------------------------------------------
BEGIN;
SELECT pg_sleep(0.2);
SELECT vq_enqueue_in('enq_plain', '{}', '10 seconds') AS id_in, clock_timestamp() AS after_call \gset
SELECT vq_enqueue_in('enq_plain', '{}', NULL) AS id_now \gset
SELECT scheduled_at - now() >= interval '10.2 seconds' AS resolved_at_call,
       scheduled_at <= :'after_call'::timestamptz + interval '10 seconds' AS not_later_than_call,
       created_at = now() AS created_now
  FROM vq.job WHERE execution_id = :'id_in';
-- NULL delay: due immediately (at the call).
SELECT scheduled_at >= now() + interval '0.2 seconds' AS at_call,
       scheduled_at <= clock_timestamp() AS due
  FROM vq.job WHERE execution_id = :'id_now';
COMMIT;
-- A negative delay is a past due time, like a past run_at.
SELECT scheduled_at < now() - interval '59 minutes' AS past, state
  FROM enq_job(vq_enqueue_in('enq_plain', '{}', '-1 hour'));

------------------------------------------------------------------------------
-- job_id idempotency (sequential).
------------------------------------------------------------------------------
SELECT vq_enqueue('enq_plain', '{"try": 1}', job_id => 'enq-idem') AS first \gset
SELECT vq_enqueue('enq_plain', '{"try": 2}', job_id => 'enq-idem') = :'first' AS same_id;
SELECT vq_enqueue_in('enq_plain', '{"try": 3}', '1 hour', job_id => 'enq-idem') = :'first' AS same_id_in;
-- The key is global among unfinished jobs: another handler gets the holder's id too,
-- and the holder is left as it was.
SELECT vq_enqueue('enq_contract', '{"try": 4}', job_id => 'enq-idem') = :'first' AS same_id_other_handler;
SELECT count(*), min(handler), min(payload::text) FROM vq.job WHERE job_id = 'enq-idem';
-- A RUNNING holder still holds the id.
UPDATE vq.job SET state = 'RUNNING' WHERE execution_id = :'first';
SELECT vq_enqueue('enq_plain', '{"try": 5}', job_id => 'enq-idem') = :'first' AS same_id_running;
-- Once the holder is finished, the id is free: a new row, which then holds it.
UPDATE vq.job SET state = 'COMPLETED' WHERE execution_id = :'first';
SELECT vq_enqueue('enq_plain', '{"try": 6}', job_id => 'enq-idem') AS second \gset
SELECT :'second' <> :'first' AS new_id;
SELECT vq_enqueue('enq_plain', '{"try": 7}', job_id => 'enq-idem') = :'second' AS held_by_second;
SELECT state, payload FROM vq.job WHERE job_id = 'enq-idem' ORDER BY payload ->> 'try';
-- Likewise after DEAD_LETTER and CANCELLED.
UPDATE vq.job SET state = 'DEAD_LETTER' WHERE execution_id = :'second';
SELECT vq_enqueue('enq_plain', '{"try": 8}', job_id => 'enq-idem') AS third \gset
UPDATE vq.job SET state = 'CANCELLED' WHERE execution_id = :'third';
SELECT vq_enqueue('enq_plain', '{"try": 9}', job_id => 'enq-idem') AS fourth \gset
SELECT count(DISTINCT x) AS distinct_ids FROM unnest(ARRAY[:'first', :'second', :'third', :'fourth']::uuid[]) x;
SELECT state, payload FROM vq.job WHERE job_id = 'enq-idem' ORDER BY payload ->> 'try';

------------------------------------------------------------------------------
-- Durable context.
------------------------------------------------------------------------------
SELECT vq_context() AS nothing_bound;
SELECT vq_context_set('tenant', '{"id": 42}'), vq_context_set('trace', '"t-1"');
SELECT vq_context();
-- Merged over the caller's metadata; with no metadata, the context alone.
SELECT metadata FROM enq_job(vq_enqueue('enq_plain', metadata => '{"app": {"v": 1}}'));
SELECT metadata FROM enq_job(vq_enqueue('enq_plain'));
SELECT metadata FROM enq_job(vq_enqueue_in('enq_plain', '{}', '1 minute', metadata => '{}'));
-- A caller namespace that is also bound fails the enqueue; nothing is inserted.
SELECT count(*) AS n0 FROM vq.job \gset
SELECT vq_enqueue('enq_plain', '{}', metadata => '{"tenant": {"id": 7}, "app": 1}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_in('enq_plain', '{}', '1 minute', metadata => '{"trace": null}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) = :n0 AS nothing_inserted FROM vq.job;
-- Setting a bound namespace replaces its value; a NULL value unbinds it.
SELECT vq_context_set('tenant', '{"id": 43}');
SELECT vq_context();
SELECT vq_context_set('trace', NULL);
SELECT vq_context();
SELECT metadata FROM enq_job(vq_enqueue('enq_plain', metadata => '{"trace": "mine"}'));
-- Clearing one namespace, an unbound one (no-op), then everything.
SELECT vq_context_set('trace', '"t-2"');
SELECT vq_context_clear('tenant'), vq_context_clear('not-bound');
SELECT vq_context();
SELECT vq_context_clear();
SELECT vq_context() AS cleared;
SELECT metadata FROM enq_job(vq_enqueue('enq_plain'));
-- The namespace must be a non-empty string (VQ008).
SELECT vq_context_set('', '1');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_context_set(NULL, '1');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_context() AS still_empty;
-- Binding is session state that follows the transaction, like SET: a rollback undoes it.
BEGIN;
SELECT vq_context_set('rolled_back', 'true');
ROLLBACK;
SELECT vq_context() AS after_rollback;
SELECT vq_context_clear();
-- The transaction-local form (is_local => true, as set_config(name, value, true)): bound
-- for the rest of the transaction, gone at its end, whether it commits or rolls back.
BEGIN;
SELECT vq_context_set('tenant', '"t-local"', is_local => true);
SELECT vq_context() AS local_in_tx;
SELECT metadata AS local_job FROM enq_job(vq_enqueue('enq_plain'));
SELECT current_setting('vq.context') AS session_setting_unchanged;
COMMIT;
SELECT vq_context() AS after_commit;
BEGIN;
SELECT vq_context_set('tenant', '"t-local"', true);
ROLLBACK;
SELECT vq_context() AS after_rollback;
-- Over a session binding: the local value wins in the transaction, the session's comes back.
SELECT vq_context_set('tenant', '"t-session"');
BEGIN;
SELECT vq_context_set('tenant', '"t-local"', true), vq_context_set('trace', '"x-local"', true);
SELECT vq_context() AS local_over_session;
COMMIT;
SELECT vq_context() AS session_again;
-- A local unbind, and a local clear of everything, last until the transaction ends.
BEGIN;
SELECT vq_context_set('tenant', NULL, true);
SELECT vq_context() AS locally_unbound;
SELECT vq_context_clear(NULL, true), vq_context_set('trace', '"x-local"', true);
SELECT vq_context() AS locally_cleared_then_bound;
SELECT metadata AS job_in_cleared_tx FROM enq_job(vq_enqueue('enq_plain'));
COMMIT;
SELECT vq_context() AS session_again;
-- A session binding made after a local one in the same transaction stays; the local one
-- does not (nor when it is the same namespace: the session form wins, as SET after SET LOCAL).
BEGIN;
SELECT vq_context_set('trace', '"x-local"', true), vq_context_set('span', '"s-local"', true);
SELECT vq_context_set('trace', '"x-session"'), vq_context_set('req', '"r-session"', false);
SELECT vq_context() AS both_in_tx;
COMMIT;
SELECT vq_context() AS session_bindings_only;
-- Savepoints: a rollback to one undoes the local bindings made after it, a release keeps them.
SELECT vq_context_clear();
BEGIN;
SELECT vq_context_set('a', '1', true);
SAVEPOINT s1;
SELECT vq_context_set('b', '2', true);
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
SELECT vq_context_set('c', '3', true);
RELEASE SAVEPOINT s2;
SELECT vq_context() AS after_savepoints;
COMMIT;
SELECT vq_context() AS nothing_after;
-- vq_context_clear(namespace, is_local => true) unbinds a session namespace for the
-- transaction only; a NULL is_local means false (as for set_config).
SELECT vq_context_set('tenant', '"t-session"', NULL);
BEGIN;
SELECT vq_context_clear('tenant', is_local => true);
SELECT vq_context() AS unbound_in_tx;
COMMIT;
SELECT vq_context() AS session_again;
-- Outside a transaction block the local form lasts for its statement only.
SELECT vq_context_set('stmt', '1', true), vq_context() -> 'stmt' AS in_statement;
SELECT vq_context() AS after_statement;
-- A collision with a locally bound namespace is refused like one with a session binding.
BEGIN;
SELECT vq_context_set('app', '1', true);
SELECT vq_enqueue('enq_plain', '{}', metadata => '{"app": 2}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT vq_context_clear();

------------------------------------------------------------------------------
-- Rollback leaves nothing; a savepoint rollback removes only what came after it.
------------------------------------------------------------------------------
SELECT count(*) AS n0 FROM vq.job \gset
BEGIN;
SELECT vq_enqueue('enq_plain') IS NOT NULL AS single,
       vq_enqueue_in('enq_plain', '{}', '1 hour') IS NOT NULL AS delayed,
       cardinality(vq_enqueue_many('enq_plain', ARRAY['{}', '{}']::jsonb[])) AS many,
       vq_enqueue('enq_plain', job_id => 'enq-rolled-back') IS NOT NULL AS with_job_id;
SELECT count(*) - :n0 AS visible_inside FROM vq.job;
ROLLBACK;
SELECT count(*) - :n0 AS after_rollback FROM vq.job;
SELECT count(*) AS rolled_back_job_id FROM vq.job WHERE job_id = 'enq-rolled-back';
BEGIN;
SELECT vq_enqueue('enq_plain', '{"sp": "before"}') AS sp_before \gset
SAVEPOINT s1;
SELECT vq_enqueue('enq_plain', '{"sp": "undone"}', job_id => 'enq-sp') AS sp_undone \gset
ROLLBACK TO SAVEPOINT s1;
SELECT vq_enqueue('enq_plain', '{"sp": "after"}', job_id => 'enq-sp') AS sp_after \gset
COMMIT;
SELECT :'sp_after' <> :'sp_undone' AS job_id_free_again;
SELECT payload ->> 'sp' AS kept FROM vq.job WHERE execution_id IN (:'sp_before', :'sp_undone', :'sp_after') ORDER BY 1;
SELECT count(*) - :n0 AS committed FROM vq.job;

------------------------------------------------------------------------------
-- Execution ids are UUID version 7: version and variant bits, and the first 48 bits are the
-- enqueue's Unix time in ms (within a second of created_at, the transaction's start), so an
-- id from a later millisecond sorts after.
------------------------------------------------------------------------------
SELECT vq_enqueue('enq_plain', '{"v7": 1}') AS v7_a \gset
SELECT FROM pg_sleep(0.002);
SELECT vq_enqueue('enq_plain', '{"v7": 2}') AS v7_b \gset
SELECT substr(:'v7_a', 15, 1) AS version,
       substr(:'v7_a', 20, 1) IN ('8', '9', 'a', 'b') AS rfc_variant,
       :'v7_a'::uuid < :'v7_b'::uuid AS later_sorts_after,
       abs(('x' || lpad(replace(substr(:'v7_a', 1, 13), '-', ''), 16, '0'))::bit(64)::bigint
           - (SELECT (extract(epoch FROM created_at) * 1000)::bigint FROM vq.job
               WHERE execution_id = :'v7_a')) < 1000 AS time_is_enqueue_time;

------------------------------------------------------------------------------
-- Clean up.
------------------------------------------------------------------------------
SELECT dblink_disconnect('enq_other');
DROP EXTENSION dblink;
DELETE FROM vq.job WHERE handler LIKE 'enq\_%';
SELECT vq_drop_contract_override(h) FROM unnest(ARRAY['enq_plain', 'enq_contract']) h;
SELECT vq_unregister_handler(name) FROM vq.handler WHERE name LIKE 'enq\_%' ORDER BY name;
SELECT vq_drop_queue(n) FROM unnest(ARRAY['enq_qh', 'enq_qo', 'enq_qa']) n;
DROP FUNCTION enq_settings(uuid), enq_job(uuid), enq_fn(jsonb), enq_fn2(jsonb, vq.job_context);
DROP ROLE enq_role;

-- enqueue_batch.sql: vq_enqueue_many (C).
--   * ids returned in payload order (each payload landed with its id), NULL elements,
--     empty array, untyped array literals;
--   * shared settings (queue, priority, max_attempts, run_at, metadata) on every row, and
--     durable context merged in;
--   * job_ids: NULL elements, duplicates inside the batch, ids already held;
--   * validation errors with SQLSTATE, raised before vq.job is touched (a second session
--     holds an ACCESS EXCLUSIVE lock on vq.job meanwhile).
-- The precedence rule, for vq_enqueue_many too, is tested in test/pgtap/precedence.sql.
\set SHOW_CONTEXT never
SET client_min_messages = warning;

CREATE EXTENSION IF NOT EXISTS dblink;
SELECT format('dbname=%L host=%L port=%s', current_database(),
              split_part(current_setting('unix_socket_directories'), ',', 1),
              current_setting('port')) AS connstr \gset
SELECT dblink_connect('enqb_other', :'connstr');

-- Fixtures.
CREATE FUNCTION enqb_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
CREATE FUNCTION enqb_gone_fn(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT q.name FROM unnest(ARRAY['enqb_qh', 'enqb_qa']) n, vq_create_queue(n) q;
SELECT vq_register_handler('enqb_plain', 'enqb_fn(jsonb)');
SELECT vq_register_handler('enqb_contract', 'enqb_fn(jsonb)', 'enqb_qh', 5, 7);
SELECT vq_register_notify_handler('enqb_notify', 'enqb_chan');
SELECT vq_register_handler('enqb_gone', 'enqb_gone_fn(jsonb)');
-- The rows behind an id array, by position (volatile: sees the rows its argument inserted).
CREATE FUNCTION enqb_rows(ids uuid[])
RETURNS TABLE (pos bigint, handler text, state vq.job_state, payload jsonb, queue text, priority int,
               max_attempts int, job_id text, metadata jsonb)
LANGUAGE sql AS $$
    SELECT u.pos, j.handler, j.state, j.payload, j.queue, j.priority, j.max_attempts,
           CASE WHEN j.job_id = 'delayed-' || j.execution_id THEN 'delayed-<execution_id>' ELSE j.job_id END,
           j.metadata
      FROM unnest(ids) WITH ORDINALITY u(id, pos)
      LEFT JOIN vq.job j ON j.execution_id = u.id
     ORDER BY u.pos
$$;

------------------------------------------------------------------------------
-- Ids in payload order; NULL elements; untyped array literals.
------------------------------------------------------------------------------
SELECT vq_enqueue_many('enqb_plain', ARRAY['{"n": 1}', NULL, '{"n": 3}', '"four"', 'null']::jsonb[]) AS ids \gset
SELECT cardinality(:'ids'::uuid[]) AS n, cardinality(ARRAY(SELECT DISTINCT unnest(:'ids'::uuid[]))) AS distinct_ids;
SELECT pos, payload, payload IS NULL AS sql_null, state FROM enqb_rows(:'ids');
SELECT * FROM enqb_rows(vq_enqueue_many('enqb_plain', '{"{\"a\": 1}", NULL, "[2]"}'));
-- A larger batch: payload k sits at position k.
SELECT vq_enqueue_many('enqb_plain', ARRAY(SELECT jsonb_build_object('k', k) FROM generate_series(1, 1000) k)) AS ids \gset
SELECT count(*) AS rows, count(*) FILTER (WHERE (payload ->> 'k')::bigint = pos) AS in_order,
       count(DISTINCT job_id) AS job_ids
  FROM unnest(:'ids'::uuid[]) WITH ORDINALITY u(id, pos) JOIN vq.job j ON j.execution_id = u.id;
-- Each generated job_id is delayed-<its execution_id>.
SELECT bool_and(j.job_id = 'delayed-' || j.execution_id) AS generated_job_ids
  FROM vq.job j WHERE j.execution_id = ANY (:'ids'::uuid[]);
-- An empty array inserts nothing and returns an empty array.
SELECT count(*) AS n0 FROM vq.job \gset
SELECT vq_enqueue_many('enqb_plain', '{}') AS empty_result, vq_enqueue_many('enqb_plain', '{}', job_ids => '{}') AS empty_with_job_ids;
SELECT count(*) - :n0 AS inserted FROM vq.job;
-- Arrays with a lower bound other than 1 are read in order too.
SELECT pos, payload FROM enqb_rows(vq_enqueue_many('enqb_plain', '[0:2]={"{\"b\": 0}","{\"b\": 1}","{\"b\": 2}"}'));

------------------------------------------------------------------------------
-- Shared settings on every row; same precedence as vq_enqueue.
------------------------------------------------------------------------------
BEGIN;
SELECT vq_enqueue_many('enqb_contract', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], '2031-01-02 03:04:05+00',
                       'enqb_qa', -2, 9, NULL, '{"m": true}') AS ids \gset
SELECT pos, handler, state, queue, priority, max_attempts, metadata FROM enqb_rows(:'ids');
SELECT bool_and(scheduled_at = '2031-01-02 03:04:05+00') AS run_at_shared,
       bool_and(created_at = now()) AS created_now, bool_and(enqueued_by = current_user::regrole) AS by_me,
       bool_and(attempt_number = 0) AS attempt_zero, bool_and(handler_address = 'public.enqb_fn(jsonb)') AS address
  FROM vq.job WHERE execution_id = ANY (:'ids'::uuid[]);
SELECT vq_enqueue_many('enqb_notify', ARRAY['{}', '{}']::jsonb[]) AS ids \gset
SELECT bool_and(scheduled_at BETWEEN now() AND clock_timestamp()) AS due_now, bool_and(handler_address = 'notify:enqb_chan') AS address
  FROM vq.job WHERE execution_id = ANY (:'ids'::uuid[]);
COMMIT;
-- A past run_at is accepted.
SELECT vq_enqueue_many('enqb_plain', ARRAY['{}']::jsonb[], '2000-01-01 00:00:00+00') AS ids \gset
SELECT state, scheduled_at = '2000-01-01 00:00:00+00' AS past FROM vq.job WHERE execution_id = ANY (:'ids'::uuid[]);
-- Durable context is merged into every row's metadata; a collision fails the batch.
SELECT vq_context_set('tenant', '7');
SELECT pos, metadata FROM enqb_rows(vq_enqueue_many('enqb_plain', '{"{}","{}"}', metadata => '{"m": 1}'));
SELECT count(*) AS n0 FROM vq.job \gset
SELECT vq_enqueue_many('enqb_plain', '{"{}","{}"}', metadata => '{"tenant": 8}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) - :n0 AS inserted FROM vq.job;
SELECT vq_context_clear();

------------------------------------------------------------------------------
-- job_ids.
------------------------------------------------------------------------------
-- Partly NULL: a NULL element gets a generated id.
SELECT pos, payload, job_id FROM enqb_rows(vq_enqueue_many('enqb_plain', '{"{\"p\": 1}","{\"p\": 2}","{\"p\": 3}"}',
                                                           job_ids => ARRAY['enqb-a', NULL, 'enqb-c']));
-- Duplicates inside the batch: one row (the first payload), its id at every position.
SELECT vq_enqueue_many('enqb_plain', '{"{\"d\": 1}","{\"d\": 2}","{\"d\": 3}","{\"d\": 4}"}',
                       job_ids => '{enqb-dup, enqb-other, enqb-dup, NULL}') AS dup_ids \gset
SELECT (:'dup_ids'::uuid[])[1] = (:'dup_ids'::uuid[])[3] AS same_id_at_1_and_3,
       cardinality(ARRAY(SELECT DISTINCT unnest(:'dup_ids'::uuid[]))) AS distinct_ids;
SELECT pos, payload, job_id FROM enqb_rows(:'dup_ids');
SELECT job_id, count(*), min(payload::text) FROM vq.job WHERE job_id IN ('enqb-dup', 'enqb-other') GROUP BY 1 ORDER BY 1;
-- Ids already held by unfinished jobs (from vq_enqueue, another handler, or an earlier
-- batch) return the holder's id and insert nothing for that position.
SELECT vq_enqueue('enqb_contract', '{"held": true}', job_id => 'enqb-held') AS held \gset
SELECT count(*) AS n0 FROM vq.job \gset
SELECT vq_enqueue_many('enqb_plain', '{"{\"h\": 1}","{\"h\": 2}","{\"h\": 3}"}',
                       job_ids => '{enqb-new, enqb-held, enqb-a}') AS ids \gset
SELECT (:'ids'::uuid[])[2] = :'held' AS held_by_vq_enqueue,
       (:'ids'::uuid[])[3] = (SELECT execution_id FROM vq.job WHERE job_id = 'enqb-a') AS held_by_earlier_batch,
       count(*) - :n0 AS inserted
  FROM vq.job;
SELECT pos, handler, payload, job_id FROM enqb_rows(:'ids');
-- A finished holder frees its id.
UPDATE vq.job SET state = 'COMPLETED' WHERE job_id = 'enqb-held';
SELECT (vq_enqueue_many('enqb_plain', '{"{\"again\": 1}"}', job_ids => '{enqb-held}'))[1] <> :'held' AS new_holder;
SELECT state, handler, payload FROM vq.job WHERE job_id = 'enqb-held' ORDER BY state;
-- vq_enqueue sees ids held by a batch job.
SELECT vq_enqueue('enqb_plain', '{}', job_id => 'enqb-other') = (:'dup_ids'::uuid[])[2] AS held_by_batch;
SELECT count(*) FROM vq.job WHERE job_id = 'enqb-other';

------------------------------------------------------------------------------
-- Validation errors, before any table is touched: a second session holds an ACCESS
-- EXCLUSIVE lock on vq.job, so a call that wrote would fail with 55P03 instead.
------------------------------------------------------------------------------
SELECT count(*) AS n0 FROM vq.job \gset
SELECT dblink_exec('enqb_other', 'BEGIN');
SELECT dblink_exec('enqb_other', 'LOCK TABLE vq.job IN ACCESS EXCLUSIVE MODE');
SET lock_timeout = '300ms';
SELECT vq_enqueue_many('enqb_plain', '{"{}"}');
\echo :LAST_ERROR_SQLSTATE
-- payloads NULL or not one-dimensional (VQ008)
SELECT vq_enqueue_many('enqb_plain', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', ARRAY[['{}', '{}'], ['{}', '{}']]::jsonb[]);
\echo :LAST_ERROR_SQLSTATE
-- job_ids: wrong length (VQ007), not one-dimensional (VQ008), bad element (VQ007)
SELECT vq_enqueue_many('enqb_plain', '{"{}","{}"}', job_ids => '{only-one}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}","{}"}', job_ids => '{a, b, c}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{}', job_ids => '{a}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}","{}"}', job_ids => '{{a, b}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}","{}"}', job_ids => ARRAY['ok', '']);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}","{}"}', job_ids => ARRAY[repeat('j', 256), 'ok']);
\echo :LAST_ERROR_SQLSTATE
-- handler (VQ001, VQ002), also for an empty batch
SELECT vq_enqueue_many(NULL, '{"{}"}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('bad name', '{}');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
DELETE FROM vq.handler WHERE name NOT LIKE 'enqb\_%';
SELECT vq_enqueue_many('enqb_nope', '{}');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- max_attempts (VQ003), queue (VQ004), metadata (VQ006)
SELECT vq_enqueue_many('enqb_plain', '{"{}"}', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}"}', max_attempts => 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}"}', queue => 'enqb_no_such_queue');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}"}', metadata => '[]');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_enqueue_many('enqb_plain', '{"{}"}', metadata => '"x"');
\echo :LAST_ERROR_SQLSTATE
-- a dropped handler function (42883)
DROP FUNCTION enqb_gone_fn(jsonb);
SELECT vq_enqueue_many('enqb_gone', '{"{}"}');
\echo :LAST_ERROR_SQLSTATE
RESET lock_timeout;
SELECT dblink_exec('enqb_other', 'ROLLBACK');
SELECT count(*) - :n0 AS inserted FROM vq.job;
-- The limits themselves are accepted.
SELECT DISTINCT max_attempts FROM enqb_rows(vq_enqueue_many('enqb_plain', '{"{}"}', max_attempts => 1));
SELECT DISTINCT max_attempts FROM enqb_rows(vq_enqueue_many('enqb_plain', '{"{}"}', max_attempts => 1000));
SELECT octet_length(job_id) FROM enqb_rows(vq_enqueue_many('enqb_plain', '{"{}"}', job_ids => ARRAY[repeat('j', 255)]));

------------------------------------------------------------------------------
-- Clean up.
------------------------------------------------------------------------------
SELECT dblink_disconnect('enqb_other');
DROP EXTENSION dblink;
DELETE FROM vq.job WHERE handler LIKE 'enqb\_%';
SELECT vq_unregister_handler(name) FROM vq.handler WHERE name LIKE 'enqb\_%' ORDER BY name;
SELECT vq_drop_queue(n) FROM unnest(ARRAY['enqb_qh', 'enqb_qa']) n;
DROP FUNCTION enqb_rows(uuid[]), enqb_fn(jsonb);

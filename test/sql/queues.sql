-- queues.sql: queues and contract overrides, shown as output: the default queue created at
-- install, vq_create_queue / vq_alter_queue / vq_drop_queue with their errors (VQ101, VQ004,
-- VQ103), vq_set_contract_override / vq_drop_contract_override. Who may call these functions
-- (and write vq.queue) is tested in test/pgtap/privileges.sql.
\set SHOW_CONTEXT never

-- A small projection of a queue without timestamps.
CREATE VIEW pg_temp.qs AS
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
       backoff_base_delay_ms, backoff_max_delay_ms, instances, paused
  FROM vq.queue;

-------------------------------------------------------------------------------
-- The default queue exists from CREATE EXTENSION with vq_create_queue's defaults.
-------------------------------------------------------------------------------
SELECT * FROM pg_temp.qs WHERE name = 'default';

-------------------------------------------------------------------------------
-- vq_create_queue
-------------------------------------------------------------------------------
-- With defaults: returns the new row.
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
       backoff_base_delay_ms, backoff_max_delay_ms, instances, paused
  FROM vq_create_queue('qt.defaults');
-- With every field (positional); the strategy is case-insensitive, stored upper case.
SELECT (vq_create_queue('qt.all', 1000, 7, 'exponential', 250, 8000, 3)).name;
SELECT * FROM pg_temp.qs WHERE name = 'qt.all';
-- Named arguments, mixed-case strategy.
SELECT (vq_create_queue('qt_named', backoff_strategy => 'Fixed', instances => 2)).backoff_strategy;
SELECT * FROM pg_temp.qs WHERE name = 'qt_named';
-- Explicit NULLs mean "the default".
SELECT (vq_create_queue('qt-nulls', NULL, NULL, NULL, NULL, NULL, NULL)).name;
SELECT * FROM pg_temp.qs WHERE name = 'qt-nulls';

-- Each numeric field, 0 and negative: VQ101 naming the queue and the field.
SELECT vq_create_queue('qt.bad', sleep_delay_ms => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', sleep_delay_ms => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', max_concurrent_jobs => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', max_concurrent_jobs => -5);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', backoff_base_delay_ms => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', backoff_base_delay_ms => -30000);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', backoff_max_delay_ms => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', backoff_max_delay_ms => -2147483648);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', instances => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', instances => -1);
\echo :LAST_ERROR_SQLSTATE
-- Unknown strategy (also: surrounding blanks are not trimmed; empty string).
SELECT vq_create_queue('qt.bad', backoff_strategy => 'RANDOM');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', backoff_strategy => ' linear');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.bad', backoff_strategy => '');
\echo :LAST_ERROR_SQLSTATE
-- Bad names: blank, space, too long (129 chars), non-ASCII, NULL.
SELECT vq_create_queue('');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt bad');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue(repeat('q', 129));
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('qt.é');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue(NULL);
\echo :LAST_ERROR_SQLSTATE
-- 128 chars is fine.
SELECT length((vq_create_queue(repeat('q', 128))).name);
-- Duplicate (including the default queue).
SELECT vq_create_queue('qt.defaults');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_create_queue('default');
\echo :LAST_ERROR_SQLSTATE
-- Several violations at once are all reported (message and one detail line each).
SELECT vq_create_queue('qt.bad', 0, -1, 'sometimes', 0, -1, 0);
\echo :LAST_ERROR_SQLSTATE
-- Nothing was created by the failures above.
SELECT count(*) AS bad_queues FROM vq.queue WHERE name LIKE 'qt%bad%' OR name = '' OR name LIKE '%é%';

-------------------------------------------------------------------------------
-- vq_alter_queue changes only the fields given.
-------------------------------------------------------------------------------
SELECT (vq_alter_queue('qt.all', max_concurrent_jobs => 9)).max_concurrent_jobs;
SELECT * FROM pg_temp.qs WHERE name = 'qt.all';
SELECT (vq_alter_queue('qt.all', backoff_strategy => 'linear', instances => 4)).backoff_strategy;
SELECT * FROM pg_temp.qs WHERE name = 'qt.all';
-- Every field given.
SELECT (vq_alter_queue('qt.all', 11, 12, 'FIXED', 13, 14, 15)).name;
SELECT * FROM pg_temp.qs WHERE name = 'qt.all';
-- Nothing given: unchanged.
SELECT (vq_alter_queue('qt.all')).name;
SELECT * FROM pg_temp.qs WHERE name = 'qt.all';
-- Invalid values: VQ101 naming the queue and each field; nothing changes.
SELECT vq_alter_queue('qt.all', sleep_delay_ms => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_alter_queue('qt.all', max_concurrent_jobs => -1, backoff_strategy => 'never');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM pg_temp.qs WHERE name = 'qt.all';
-- Unknown queue: VQ004.
SELECT vq_alter_queue('qt.nosuch', sleep_delay_ms => 100);
\echo :LAST_ERROR_SQLSTATE
-- The default queue can be altered (and is put back).
SELECT (vq_alter_queue('default', sleep_delay_ms => 1234)).sleep_delay_ms;
SELECT (vq_alter_queue('default', sleep_delay_ms => 5000)).sleep_delay_ms;

-------------------------------------------------------------------------------
-- Contract overrides.
-------------------------------------------------------------------------------
-- An override may name a handler that is not registered (yet).
SELECT vq_set_contract_override('qt-contract', 'qt.all', 10, 5);
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler = 'qt-contract';
-- Setting it again replaces it (a NULL field inherits the handler default).
SELECT vq_set_contract_override('qt-contract', max_attempts => 1000);
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler = 'qt-contract';
SELECT vq_set_contract_override('qt-contract', max_attempts => 1);
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler = 'qt-contract';
-- max_attempts outside [1, 1000], unknown queue, bad name: VQ101 naming the contract.
SELECT vq_set_contract_override('qt-contract', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_set_contract_override('qt-contract', max_attempts => -3);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_set_contract_override('qt-contract', max_attempts => 1001);
\echo :LAST_ERROR_SQLSTATE
SELECT vq_set_contract_override('qt-contract', 'qt.nosuch');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_set_contract_override('qt contract', 'qt.all');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_set_contract_override('qt-contract2', 'qt.nosuch', 1, 0);
\echo :LAST_ERROR_SQLSTATE
-- The failed calls changed nothing.
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler LIKE 'qt%' ORDER BY handler;
-- Drop: true when there was one, false otherwise.
SELECT vq_drop_contract_override('qt-contract');
SELECT vq_drop_contract_override('qt-contract');
SELECT count(*) FROM vq.contract_override WHERE handler LIKE 'qt%';

-------------------------------------------------------------------------------
-- vq_drop_queue
-------------------------------------------------------------------------------
-- The default queue cannot be dropped.
SELECT vq_drop_queue('default');
\echo :LAST_ERROR_SQLSTATE
-- Unknown queue.
SELECT vq_drop_queue('qt.nosuch');
\echo :LAST_ERROR_SQLSTATE
-- A queue referenced by a handler default cannot be dropped.
CREATE FUNCTION public.qt_handler(jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_create_queue('qt.handlerq') IS NOT NULL AS created;
SELECT vq_register_handler('qt.h', 'public.qt_handler(jsonb)', queue => 'qt.handlerq');
SELECT vq_drop_queue('qt.handlerq');
\echo :LAST_ERROR_SQLSTATE
-- A queue referenced by a contract override cannot be dropped.
SELECT vq_create_queue('qt.overrideq') IS NOT NULL AS created;
SELECT vq_set_contract_override('qt-other', 'qt.overrideq');
SELECT vq_drop_queue('qt.overrideq');
\echo :LAST_ERROR_SQLSTATE
-- A queue holding unfinished (ENQUEUED) jobs cannot be dropped.
SELECT vq_create_queue('qt.jobq') IS NOT NULL AS created;
SELECT vq_enqueue('qt.h', '{}', queue => 'qt.jobq') IS NOT NULL AS enqueued;
SELECT vq_drop_queue('qt.jobq');
\echo :LAST_ERROR_SQLSTATE
-- ... nor RUNNING ones.
UPDATE vq.job SET state = 'RUNNING' WHERE queue = 'qt.jobq';
SELECT vq_drop_queue('qt.jobq');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS still_there FROM vq.queue WHERE name IN ('default', 'qt.handlerq', 'qt.overrideq', 'qt.jobq');
-- Once nothing refers to them they are dropped (finished jobs do not hold a queue).
UPDATE vq.job SET state = 'COMPLETED' WHERE queue = 'qt.jobq';
SELECT vq_drop_queue('qt.jobq');
SELECT vq_unregister_handler('qt.h');
SELECT vq_drop_queue('qt.handlerq');
SELECT vq_drop_contract_override('qt-other');
SELECT vq_drop_queue('qt.overrideq');
SELECT vq_drop_queue('qt.defaults');
SELECT count(*) AS left_over FROM vq.queue WHERE name IN ('qt.handlerq', 'qt.overrideq', 'qt.jobq', 'qt.defaults');
-- Dropping it again: unknown.
SELECT vq_drop_queue('qt.defaults');
\echo :LAST_ERROR_SQLSTATE

-- Clean up.
SELECT vq_drop_queue('qt.all'), vq_drop_queue('qt_named'), vq_drop_queue('qt-nulls'),
       vq_drop_queue(repeat('q', 128));
SELECT name FROM vq.queue WHERE name LIKE 'qt%' OR name LIKE 'qqq%';
DELETE FROM vq.job WHERE queue = 'qt.jobq';
DROP FUNCTION public.qt_handler(jsonb);

-- pgTAP: the schema objects of vq_job, and registration / queue configuration
-- behaviour (SQLSTATEs, vq.handler_settings precedence, bulk registration that
-- reports every violation in one error and registers nothing).
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS vq_job;

BEGIN;
SELECT plan(131);

-------------------------------------------------------------------------------
-- Schema objects.
-------------------------------------------------------------------------------
SELECT has_schema('vq');
SELECT has_table('vq', 'queue', 'table vq.queue exists');
SELECT has_table('vq', 'handler', 'table vq.handler exists');
SELECT has_table('vq', 'contract_override', 'table vq.contract_override exists');
SELECT has_table('vq', 'job', 'table vq.job exists');
SELECT has_table('vq', 'job_transition', 'table vq.job_transition exists');
SELECT has_table('vq', 'job_log', 'table vq.job_log exists');
SELECT has_table('vq', 'outbox', 'table vq.outbox exists');
SELECT has_view('vq', 'handler_settings', 'view vq.handler_settings exists');
SELECT has_type('vq', 'job_context', 'type vq.job_context exists');
SELECT enum_has_labels('vq', 'job_state', ARRAY['ENQUEUED', 'RUNNING', 'COMPLETED', 'DEAD_LETTER', 'CANCELLED'],
                       'vq.job_state has the five states, in order');

-- vq.queue
SELECT col_is_pk('vq', 'queue', 'name', 'vq.queue is keyed by name');
SELECT col_type_is('vq', 'queue', 'sleep_delay_ms', 'integer', 'vq.queue.sleep_delay_ms is an integer');
SELECT col_type_is('vq', 'queue', 'max_concurrent_jobs', 'integer', 'vq.queue.max_concurrent_jobs is an integer');
SELECT col_type_is('vq', 'queue', 'backoff_strategy', 'text', 'vq.queue.backoff_strategy is text');
SELECT col_type_is('vq', 'queue', 'backoff_base_delay_ms', 'integer', 'vq.queue.backoff_base_delay_ms is an integer');
SELECT col_type_is('vq', 'queue', 'backoff_max_delay_ms', 'integer', 'vq.queue.backoff_max_delay_ms is an integer');
SELECT col_type_is('vq', 'queue', 'instances', 'integer', 'vq.queue.instances is an integer');
SELECT col_not_null('vq', 'queue', 'backoff_strategy', 'vq.queue.backoff_strategy is NOT NULL');
SELECT results_eq(
    $$SELECT sleep_delay_ms, max_concurrent_jobs, backoff_strategy, backoff_base_delay_ms,
             backoff_max_delay_ms, instances FROM vq.queue WHERE name = 'default'$$,
    $$VALUES (5000, 5, 'LINEAR'::text, 30000, 3600000, 1)$$,
    'the default queue exists with the vq_create_queue defaults');

-- vq.handler
SELECT col_is_pk('vq', 'handler', 'name', 'vq.handler is keyed by name');
SELECT col_type_is('vq', 'handler', 'fn', 'regprocedure', 'vq.handler.fn is a regprocedure');
SELECT has_column('vq', 'handler', 'channel', 'vq.handler has a channel');
SELECT has_column('vq', 'handler', 'address', 'vq.handler has a dispatch address');
SELECT col_type_is('vq', 'handler', 'max_attempts', 'integer', 'vq.handler.max_attempts is an integer');
SELECT fk_ok('vq', 'handler', 'queue', 'vq', 'queue', 'name');

-- vq.contract_override
SELECT col_is_pk('vq', 'contract_override', 'handler', 'vq.contract_override is keyed by handler');
SELECT has_column('vq', 'contract_override', 'priority', 'vq.contract_override has priority');
SELECT has_column('vq', 'contract_override', 'max_attempts', 'vq.contract_override has max_attempts');
SELECT fk_ok('vq', 'contract_override', 'queue', 'vq', 'queue', 'name');

-- vq.job
SELECT col_is_pk('vq', 'job', 'execution_id', 'vq.job is keyed by execution_id');
SELECT col_type_is('vq', 'job', 'execution_id', 'uuid', 'vq.job.execution_id is a uuid');
SELECT col_type_is('vq', 'job', 'job_id', 'text', 'vq.job.job_id is text');
SELECT col_type_is('vq', 'job', 'state', 'vq.job_state', 'vq.job.state is a vq.job_state');
SELECT col_type_is('vq', 'job', 'payload', 'jsonb', 'vq.job.payload is jsonb');
SELECT col_type_is('vq', 'job', 'metadata', 'jsonb', 'vq.job.metadata is jsonb');
SELECT col_type_is('vq', 'job', 'scheduled_at', 'timestamp with time zone', 'vq.job.scheduled_at is a timestamptz');
SELECT col_not_null('vq', 'job', 'handler_address', 'vq.job.handler_address is NOT NULL');
SELECT col_not_null('vq', 'job', 'attempt_number', 'vq.job.attempt_number is NOT NULL');
SELECT col_not_null('vq', 'job', 'max_attempts', 'vq.job.max_attempts is NOT NULL');
SELECT has_column('vq', 'job', 'enqueued_by', 'vq.job records the enqueuing role');
SELECT has_column('vq', 'job', 'last_error', 'vq.job has last_error');
SELECT has_index('vq', 'job', 'job_claim_idx', 'index vq.job_claim_idx exists');
SELECT has_index('vq', 'job', 'job_active_job_id_key', 'index vq.job_active_job_id_key exists');
SELECT index_is_unique('vq', 'job', 'job_active_job_id_key', 'job_active_job_id_key is unique');
SELECT ok((SELECT i.indpred IS NOT NULL FROM pg_index i WHERE i.indexrelid = 'vq.job_active_job_id_key'::regclass),
          'job_active_job_id_key is partial (unfinished jobs only)');
SELECT ok((SELECT i.indpred IS NOT NULL FROM pg_index i WHERE i.indexrelid = 'vq.job_claim_idx'::regclass),
          'job_claim_idx is partial (ENQUEUED jobs only)');

-- History, logs, outbox.
SELECT has_column('vq', 'job_transition', 'execution_id', 'vq.job_transition has execution_id');
SELECT has_column('vq', 'job_transition', 'attempt_number', 'vq.job_transition has attempt_number');
SELECT has_column('vq', 'job_transition', 'error', 'vq.job_transition has error');
SELECT has_column('vq', 'job_log', 'level', 'vq.job_log has level');
SELECT col_type_is('vq', 'job_log', 'fields', 'jsonb', 'vq.job_log.fields is jsonb');
SELECT col_type_is('vq', 'outbox', 'id', 'bigint', 'vq.outbox.id is a bigint');
SELECT col_type_is('vq', 'outbox', 'headers', 'jsonb', 'vq.outbox.headers is jsonb');
SELECT col_type_is('vq', 'outbox', 'metadata', 'jsonb', 'vq.outbox.metadata is jsonb');
SELECT has_column('vq', 'outbox', 'destination_type', 'vq.outbox has destination_type');

-- Functions.
SELECT has_function('vq_enqueue', ARRAY['text', 'jsonb', 'timestamp with time zone', 'text', 'integer', 'integer', 'text', 'jsonb']);
SELECT has_function('vq_create_queue', ARRAY['text', 'integer', 'integer', 'text', 'integer', 'integer', 'integer']);
SELECT has_function('vq_alter_queue', ARRAY['text', 'integer', 'integer', 'text', 'integer', 'integer', 'integer']);
SELECT has_function('vq_drop_queue', ARRAY['text']);
SELECT has_function('vq_set_contract_override', ARRAY['text', 'text', 'integer', 'integer']);
SELECT has_function('vq_drop_contract_override', ARRAY['text']);
SELECT has_function('vq_configure', ARRAY['jsonb']);
SELECT has_function('vq_register_handler', ARRAY['text', 'regprocedure', 'text', 'integer', 'integer']);
SELECT has_function('vq_register_notify_handler', ARRAY['text', 'text', 'text', 'integer', 'integer']);
SELECT has_function('vq_register_handlers', ARRAY['jsonb']);
SELECT has_function('vq_unregister_handler', ARRAY['text']);
SELECT has_function('vq_resolve_target', ARRAY['text']);
SELECT has_function('vq_backoff_delay', ARRAY['text', 'integer', 'integer', 'integer']);

-- Configuration functions are not executable by PUBLIC (so not by a plain role).
CREATE ROLE tap_plain_role;
SELECT ok(NOT has_function_privilege('tap_plain_role', p, 'EXECUTE'), format('%s is not executable by PUBLIC', p))
  FROM unnest(ARRAY[
      'vq_create_queue(text, integer, integer, text, integer, integer, integer)',
      'vq_alter_queue(text, integer, integer, text, integer, integer, integer)',
      'vq_drop_queue(text)',
      'vq_set_contract_override(text, text, integer, integer)',
      'vq_drop_contract_override(text)',
      'vq_configure(jsonb)',
      'vq_register_handler(text, regprocedure, text, integer, integer)',
      'vq_register_notify_handler(text, text, text, integer, integer)',
      'vq_register_handlers(jsonb)',
      'vq_unregister_handler(text)']) AS p;

-------------------------------------------------------------------------------
-- Queue and contract-override configuration errors.
-------------------------------------------------------------------------------
SELECT lives_ok($$SELECT vq_create_queue('tap.q', backoff_strategy => 'exponential')$$, 'create a queue');
SELECT is((SELECT backoff_strategy FROM vq.queue WHERE name = 'tap.q'), 'EXPONENTIAL', 'the strategy is stored upper case');
SELECT throws_ok($$SELECT vq_create_queue('tap.bad', sleep_delay_ms => 0)$$,
                 'VQ101', 'queue "tap.bad": sleep_delay_ms must be a positive integer, got 0',
                 'a non-positive sleep_delay_ms is VQ101 naming the queue and the field');
SELECT throws_ok($$SELECT vq_create_queue('tap.bad', backoff_strategy => 'RANDOM')$$,
                 'VQ101', NULL, 'an unknown strategy is VQ101');
SELECT throws_ok($$SELECT vq_create_queue('tap.q')$$, 'VQ101', 'queue "tap.q" already exists',
                 'a duplicate queue is VQ101');
SELECT throws_ok($$SELECT vq_alter_queue('tap.nosuch', instances => 2)$$, 'VQ004', 'queue "tap.nosuch" does not exist',
                 'altering an unknown queue is VQ004');
SELECT throws_ok($$SELECT vq_drop_queue('default')$$, 'VQ103', 'queue "default" cannot be dropped',
                 'the default queue cannot be dropped (VQ103)');
SELECT throws_ok($$SELECT vq_set_contract_override('tap-contract', max_attempts => 0)$$,
                 'VQ101', 'contract "tap-contract": max_attempts must be between 1 and 1000, got 0',
                 'an override max_attempts outside [1, 1000] is VQ101 naming the contract');
SELECT throws_ok($$SELECT vq_configure('{"queues": {"tap.ok": {}, "tap.bad": {"maxConcurrentJobs": -1}}}')$$,
                 'VQ101', 'queue "tap.bad": maxConcurrentJobs must be a positive integer, got -1',
                 'vq_configure names the queue and the JSON key');
SELECT is((SELECT count(*)::int FROM vq.queue WHERE name = 'tap.ok'), 0, 'a failed vq_configure applies nothing');
SELECT throws_ok($$SELECT vq_configure('[]')$$, 'VQ104', 'configuration must be a JSON object',
                 'vq_configure rejects a document that is not an object');

-------------------------------------------------------------------------------
-- Handler registration errors.
-------------------------------------------------------------------------------
CREATE FUNCTION public.tap_h(jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION public.tap_h_ctx(jsonb, vq.job_context) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION public.tap_h_text(text) RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE public.tap_h_proc(jsonb) LANGUAGE sql AS '';

SELECT lives_ok($$SELECT vq_register_handler('tap.plain', 'public.tap_h(jsonb)')$$, 'register a plain (jsonb) handler');
SELECT lives_ok($$SELECT vq_register_handler('tap.contract', 'public.tap_h_ctx(jsonb, vq.job_context)', 'tap.q', 5, 9)$$,
                'register a (jsonb, vq.job_context) contract handler');
SELECT lives_ok($$SELECT vq_register_notify_handler('tap.notify', 'tap_channel', max_attempts => 4)$$,
                'register a NOTIFY handler');
SELECT throws_ok($$SELECT vq_register_handler('tap bad', 'public.tap_h(jsonb)')$$,
                 'VQ102', NULL, 'a name with a space is VQ102');
SELECT throws_ok($$SELECT vq_register_handler(repeat('t', 129), 'public.tap_h(jsonb)')$$,
                 'VQ102', NULL, 'a 129-character name is VQ102');
SELECT throws_ok($$SELECT vq_register_handler('tap.text', 'public.tap_h_text(text)')$$,
                 'VQ102', NULL, 'a (text) function is VQ102');
SELECT throws_ok($$SELECT vq_register_handler('tap.proc', 'public.tap_h_proc(jsonb)')$$,
                 'VQ102', NULL, 'a procedure is VQ102');
SELECT throws_ok($$SELECT vq_register_notify_handler('tap.plain', 'tap_channel')$$,
                 'VQ102', 'handler "tap.plain": name is already registered',
                 'a NOTIFY handler cannot take the name of a function handler');
SELECT throws_ok($$SELECT vq_register_handler('tap.notify', 'public.tap_h(jsonb)')$$,
                 'VQ102', 'handler "tap.notify": name is already registered',
                 'a function handler cannot take the name of a NOTIFY handler');
SELECT throws_ok($$SELECT vq_register_handler('tap.q1', 'public.tap_h(jsonb)', 'tap.nosuch')$$,
                 'VQ102', NULL, 'an unknown default queue is VQ102');
SELECT throws_ok($$SELECT vq_register_handler('tap.ma', 'public.tap_h(jsonb)', max_attempts => 1001)$$,
                 'VQ102', NULL, 'a default max_attempts of 1001 is VQ102');
SELECT throws_ok($$SELECT vq_register_notify_handler('tap.chan', repeat('c', 64))$$,
                 'VQ102', NULL, 'a 64-byte channel is VQ102');

-------------------------------------------------------------------------------
-- vq.handler_settings: override > handler default > framework default.
-------------------------------------------------------------------------------
SELECT results_eq(
    $$SELECT name, queue, priority, max_attempts, is_contract FROM vq.handler_settings
       WHERE name LIKE 'tap.%' ORDER BY name$$,
    $$VALUES ('tap.contract'::text, 'tap.q'::text, 5, 9, true),
             ('tap.notify', 'default', 0, 4, true),
             ('tap.plain', 'default', 0, 3, false)$$,
    'without overrides: handler defaults, else default/0/3');
SELECT lives_ok($$SELECT vq_set_contract_override('tap.contract', max_attempts => 2)$$, 'override one field of a contract');
SELECT lives_ok($$SELECT vq_set_contract_override('tap.plain', 'tap.q', 7)$$, 'override a plain handler');
SELECT results_eq(
    $$SELECT name, queue, priority, max_attempts FROM vq.handler_settings
       WHERE name LIKE 'tap.%' ORDER BY name$$,
    $$VALUES ('tap.contract'::text, 'tap.q'::text, 5, 2),
             ('tap.notify', 'default', 0, 4),
             ('tap.plain', 'tap.q', 7, 3)$$,
    'overrides win per field; the rest falls back to the handler, then the framework');
SELECT results_eq(
    $$SELECT r.queue, r.priority, r.max_attempts FROM vq_resolve_target('tap.plain') r$$,
    $$VALUES ('tap.q'::text, 7, 3)$$,
    'vq_resolve_target agrees with vq.handler_settings');
SELECT throws_ok($$SELECT vq_drop_queue('tap.q')$$, 'VQ103', NULL,
                 'a queue named by a handler or override cannot be dropped');
SELECT is(vq_unregister_handler('tap.notify'), true, 'unregistering a handler returns true');
SELECT is(vq_unregister_handler('tap.notify'), false, 'unregistering it again returns false');

-------------------------------------------------------------------------------
-- Bulk registration.
-------------------------------------------------------------------------------
-- (Captured in a DO block so that an unexpected error fails these tests, not the whole file.)
CREATE TEMP TABLE tap_bulk_ok (registered integer, error text);
DO $$
DECLARE
    msg text;
BEGIN
    INSERT INTO tap_bulk_ok (registered) SELECT vq_register_handlers('[
        {"name": "tap_b1", "function": "public.tap_h(jsonb)"},
        {"name": "tap_b2", "function": "public.tap_h_ctx(jsonb, vq.job_context)", "maxAttempts": 2},
        {"name": "tap_b3", "channel": "tap_channel", "queue": "tap.q"}]');
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT;
    INSERT INTO tap_bulk_ok (error) VALUES (msg);
END
$$;
SELECT is((SELECT error FROM tap_bulk_ok), NULL, 'vq_register_handlers accepts a valid set');
SELECT is((SELECT registered FROM tap_bulk_ok), 3, 'vq_register_handlers returns the number registered');
SELECT results_eq(
    $$SELECT name, kind, queue, priority, max_attempts FROM vq.handler_settings WHERE name LIKE 'tap_b%' ORDER BY name$$,
    $$VALUES ('tap_b1'::text, 'function'::text, 'default'::text, 0, 3),
             ('tap_b2', 'function', 'default', 0, 2),
             ('tap_b3', 'notify', 'tap.q', 0, 3)$$,
    'the bulk-registered handlers have their settings');

CREATE TEMP TABLE tap_bulk_error (sqlstate text, message text, detail text, handlers_before bigint);
DO $$
DECLARE
    st text;
    msg text;
    det text;
    before bigint := (SELECT count(*) FROM vq.handler);
BEGIN
    PERFORM vq_register_handlers('[
        {"name": "tap_ok", "function": "public.tap_h(jsonb)"},
        {"name": "tap_dup", "channel": "tap_channel"},
        {"name": "tap_dup", "channel": "tap_channel"},
        {"name": "tap.plain", "function": "public.tap_h(jsonb)"},
        {"name": "tap bad", "channel": "tap_channel"},
        {"name": "tap_missing", "function": "public.tap_nosuch(jsonb)"},
        {"name": "tap_sig", "function": "public.tap_h_text(text)"},
        {"name": "tap_field", "channel": "tap_channel", "colour": "red"}]');
    INSERT INTO tap_bulk_error VALUES ('00000', NULL, NULL, before);
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    INSERT INTO tap_bulk_error VALUES (st, msg, det, before);
END
$$;
SELECT is((SELECT sqlstate FROM tap_bulk_error), 'VQ102', 'a bad set raises one VQ102 error');
SELECT alike((SELECT message FROM tap_bulk_error), 'handler registration failed: 6 violations:%',
             'the message counts the six violations');
SELECT alike((SELECT detail FROM tap_bulk_error), '%element 3 (handler "tap_dup"): name appears more than once%',
             'the detail lists the duplicate inside the set');
SELECT alike((SELECT detail FROM tap_bulk_error), '%element 4 (handler "tap.plain"): name is already registered%',
             'the detail lists the already-registered name');
SELECT alike((SELECT detail FROM tap_bulk_error), '%element 5 (handler "tap bad"): name must match%',
             'the detail lists the bad name');
SELECT alike((SELECT detail FROM tap_bulk_error), '%element 6 (handler "tap_missing"): function public.tap_nosuch(jsonb) does not exist%',
             'the detail lists the missing function');
SELECT alike((SELECT detail FROM tap_bulk_error), '%element 7 (handler "tap_sig"): function public.tap_h_text(text) must be%',
             'the detail lists the wrong signature');
SELECT alike((SELECT detail FROM tap_bulk_error), '%element 8 (handler "tap_field"): unknown field "colour"%',
             'the detail lists the unknown field');
SELECT is((SELECT array_length(string_to_array(detail, E'\n'), 1) FROM tap_bulk_error), 6,
          'the detail has one line per violation');
SELECT is((SELECT count(*) FROM vq.handler), (SELECT handlers_before FROM tap_bulk_error),
          'a bad set registers nothing');
SELECT throws_like($$SELECT vq_register_handlers('[{"name": "tap_x", "channel": "tap_channel"},
                                                   {"name": "tap_x", "channel": "tap_channel"},
                                                   {"name": "tap y", "channel": ""}]')$$,
                   'handler registration failed: 3 violations:%',
                   'the message of a bad set reports all of its violations');

-------------------------------------------------------------------------------
-- Privileges: a plain role is refused until granted EXECUTE.
-------------------------------------------------------------------------------
SET LOCAL ROLE tap_plain_role;
SELECT throws_ok($$SELECT vq_create_queue('tap.byplain')$$, '42501', NULL, 'vq_create_queue: permission denied');
SELECT throws_ok($$SELECT vq_configure('{}')$$, '42501', NULL, 'vq_configure: permission denied');
SELECT throws_ok($$SELECT vq_register_handler('tap.byplain', 'public.tap_h(jsonb)')$$, '42501', NULL,
                 'vq_register_handler: permission denied');
SELECT throws_ok($$SELECT vq_register_handlers('[]')$$, '42501', NULL, 'vq_register_handlers: permission denied');
SELECT throws_ok($$SELECT vq_unregister_handler('tap.plain')$$, '42501', NULL, 'vq_unregister_handler: permission denied');
RESET ROLE;
GRANT EXECUTE ON FUNCTION vq_create_queue(text, integer, integer, text, integer, integer, integer),
                          vq_register_handler(text, regprocedure, text, integer, integer)
   TO tap_plain_role;
SET LOCAL ROLE tap_plain_role;
SELECT lives_ok($$SELECT vq_create_queue('tap.byplain')$$, 'vq_create_queue works once granted');
SELECT lives_ok($$SELECT vq_register_handler('tap.byplain', 'public.tap_h(jsonb)', 'tap.byplain')$$,
                'vq_register_handler works once granted');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;

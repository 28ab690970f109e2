-- registration.sql (pgTAP): the schema objects of vq_job, and the violation lists of bulk
-- registration (vq_register_handlers): one VQ102 error whose detail lists every violation of
-- every element, and nothing registered. Single registrations, their error messages and the
-- stored rows are in test/sql/handlers.sql; function privileges in privileges.sql.
CREATE EXTENSION IF NOT EXISTS pgtap;
CREATE EXTENSION IF NOT EXISTS vq_job;

BEGIN;
SELECT plan(97);

-------------------------------------------------------------------------------
-- Schema objects.
-------------------------------------------------------------------------------
SELECT has_schema('vq');
SELECT has_table('vq', 'queue', 'table vq.queue exists');
SELECT has_table('vq', 'handler', 'table vq.handler exists');
SELECT has_table('vq', 'contract_override', 'table vq.contract_override exists');
SELECT has_table('vq', 'job', 'table vq.job exists');
SELECT has_view('vq', 'job_transition', 'view vq.job_transition exists');
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
SELECT col_is_pk('vq', 'job_active', 'execution_id', 'vq.job_active is keyed by execution_id');
SELECT col_is_pk('vq', 'job_finished', 'execution_id', 'vq.job_finished is keyed by execution_id');
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
SELECT is((SELECT c.relkind::text FROM pg_class c WHERE c.oid = 'vq.job'::regclass), 'p',
          'vq.job is partitioned');
SELECT is((SELECT string_agg(c.relname || ': ' || pg_get_expr(c.relpartbound, c.oid), '; ' ORDER BY c.relname)
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'vq.job'::regclass),
          'job_active: FOR VALUES IN (''ENQUEUED'', ''RUNNING''); '
          'job_finished: FOR VALUES IN (''COMPLETED'', ''DEAD_LETTER'', ''CANCELLED'')',
          'vq.job_active holds unfinished jobs, vq.job_finished the ended ones');
SELECT has_index('vq', 'job_active', 'job_claim_idx', 'index vq.job_claim_idx exists');
SELECT has_index('vq', 'job_active', 'job_active_job_id_key', 'index vq.job_active_job_id_key exists');
SELECT index_is_unique('vq', 'job_active', 'job_active_job_id_key', 'job_active_job_id_key is unique');
SELECT ok((SELECT i.indpred IS NOT NULL FROM pg_index i WHERE i.indexrelid = 'vq.job_claim_idx'::regclass),
          'job_claim_idx is partial (ENQUEUED jobs only)');
SELECT is((SELECT count(*)::int FROM pg_index i
            WHERE i.indrelid = 'vq.job_finished'::regclass),
          2, 'vq.job_finished has its key and the retention index only');

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
SELECT has_function('vq_create_queue', ARRAY['text', 'integer', 'integer', 'text', 'integer', 'integer', 'integer']);
SELECT has_function('vq_alter_queue', ARRAY['text', 'integer', 'integer', 'text', 'integer', 'integer', 'integer']);
SELECT has_function('vq_drop_queue', ARRAY['text']);
SELECT has_function('vq_set_contract_override', ARRAY['text', 'text', 'integer', 'integer']);
SELECT has_function('vq_drop_contract_override', ARRAY['text']);
SELECT has_function('vq_configure', ARRAY['jsonb']);
SELECT has_function('vq_register_handler', ARRAY['text', 'regprocedure', 'text', 'integer', 'integer', 'integer', 'interval']);
SELECT has_function('vq_register_notify_handler', ARRAY['text', 'text', 'text', 'integer', 'integer', 'interval']);
SELECT has_function('vq_register_handlers', ARRAY['jsonb']);
SELECT has_function('vq_unregister_handler', ARRAY['text']);
SELECT has_function('vq_resolve_target', ARRAY['text']);
SELECT has_function('vq_backoff_delay', ARRAY['text', 'integer', 'integer', 'integer']);

-------------------------------------------------------------------------------
-- Bulk registration: violation lists.
-------------------------------------------------------------------------------
CREATE FUNCTION public.tap_h(jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION public.tap_h_text(text) RETURNS void LANGUAGE sql AS '';
CREATE PROCEDURE public.tap_h_proc(jsonb) LANGUAGE sql AS '';
SELECT vq_register_handler('tap_taken', 'public.tap_h(jsonb)') AS taken \gset
SELECT count(*) AS handlers_before FROM vq.handler \gset
-- Runs vq_register_handlers(set) and returns what it raised: SQLSTATE (code), message and the lines
-- of the detail (one per violation). Captured, so that an unexpected error fails the
-- assertions below rather than the whole file.
CREATE FUNCTION public.tap_bulk(handlers jsonb, OUT code text, OUT message text, OUT lines text[])
LANGUAGE plpgsql AS $$
DECLARE
    det text;
BEGIN
    PERFORM vq_register_handlers(handlers);
    code := '00000';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS code = RETURNED_SQLSTATE, message = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    lines := string_to_array(det, E'\n');
END
$$;

-- A set with a violation of every kind (elements 1 and 2 are valid).
CREATE TEMP TABLE tap_many AS SELECT * FROM tap_bulk('[
    {"name": "tap_ok1", "function": "public.tap_h(jsonb)"},
    {"name": "tap_dup", "function": "public.tap_h(jsonb)"},
    {"name": "tap_dup", "channel": "tap_channel"},
    {"name": "tap_taken", "function": "public.tap_h(jsonb)"},
    {"name": "tap bad", "function": "public.tap_h(jsonb)"},
    {"name": "tap_missing", "function": "public.tap_nosuch(jsonb)"},
    {"name": "tap_sig", "function": "public.tap_h_text(text)"},
    {"name": "tap_field", "function": "public.tap_h(jsonb)", "colour": "red"},
    {"name": "tap_queue", "channel": "tap_channel", "queue": "tap.nosuchq", "maxAttempts": 0},
    5,
    {"name": "tap_both", "function": "public.tap_h(jsonb)", "channel": "tap_channel"},
    {"name": "tap_prio", "channel": "tap_channel", "priority": "high"},
    {"name": "tap_proc", "function": "public.tap_h_proc(jsonb)"},
    {"name": "tap_chan", "channel": ""}]');
SELECT is((SELECT code FROM tap_many), 'VQ102', 'a bad set raises one VQ102 error');
SELECT alike((SELECT message FROM tap_many), 'handler registration failed: 13 violations:%',
             'the message counts the thirteen violations');
SELECT ok((SELECT v.line = ANY (lines) FROM tap_many), 'the detail lists ' || v.what)
  FROM (VALUES
    (1,  'element 3 (handler "tap_dup"): name appears more than once in this set',
         'a name that appears twice in the set (at its second element)'),
    (2,  'element 4 (handler "tap_taken"): name is already registered', 'an already-registered name'),
    (3,  'element 5 (handler "tap bad"): name must match ^[a-zA-Z0-9._-]{1,128}$', 'a malformed name'),
    (4,  'element 6 (handler "tap_missing"): function public.tap_nosuch(jsonb) does not exist', 'a missing function'),
    (5,  'element 7 (handler "tap_sig"): function public.tap_h_text(text) must be a plain non-set-returning function with signature (jsonb) or (jsonb, vq.job_context)',
         'a function with the wrong signature'),
    (6,  'element 8 (handler "tap_field"): unknown field "colour"', 'an unknown field'),
    (7,  'element 9 (handler "tap_queue"): max_attempts must be between 1 and 1000, got 0', 'a max_attempts out of range'),
    (8,  'element 9 (handler "tap_queue"): queue "tap.nosuchq" does not exist',
         'an unknown queue (a second violation of the same element)'),
    (9,  'element 10: must be a JSON object', 'an element that is not an object'),
    (10, 'element 11 (handler "tap_both"): exactly one of "function" and "channel" is required',
         'an element with both a function and a channel'),
    (11, 'element 12 (handler "tap_prio"): priority must be an integer, got "high"', 'a priority that is not an integer'),
    (12, 'element 13 (handler "tap_proc"): function public.tap_h_proc(jsonb) must be a plain non-set-returning function with signature (jsonb) or (jsonb, vq.job_context)',
         'a procedure'),
    (13, 'element 14 (handler "tap_chan"): channel must be 1 to 63 bytes long', 'an empty channel')) AS v(n, line, what)
 ORDER BY v.n;
SELECT is((SELECT cardinality(lines) FROM tap_many), 13, 'the detail has one line per violation, and no other');

-- One element with several violations, one of them a missing function: each is reported.
SELECT alike((SELECT message FROM tap_bulk('[{"name": "tap bad2", "function": "public.tap_nosuch(jsonb)", "queue": "tap.nosuchq"}]')),
             'handler registration failed: 3 violations:%', 'an element with three violations counts three');
SELECT set_eq($$SELECT unnest(lines) FROM tap_bulk('[{"name": "tap bad2", "function": "public.tap_nosuch(jsonb)", "queue": "tap.nosuchq"}]')$$,
              ARRAY['element 1 (handler "tap bad2"): name must match ^[a-zA-Z0-9._-]{1,128}$',
                    'element 1 (handler "tap bad2"): function public.tap_nosuch(jsonb) does not exist',
                    'element 1 (handler "tap bad2"): queue "tap.nosuchq" does not exist'],
              'an element whose function is missing still has its other violations reported');

-- A function that cannot be parsed, names an unknown type or is not a string is a violation
-- of its element like any other (VQ102, listed with the rest), not a bare error.
CREATE TEMP TABLE tap_unparsed AS SELECT * FROM tap_bulk('[
    {"name": "tap_noparen", "function": "public.tap_h"},
    {"name": "tap_badtype", "function": "public.tap_h(public.tap_nosuchtype)"},
    {"name": "tap_notext", "function": 5},
    {"name": "tap_dup2", "channel": "tap_channel"},
    {"name": "tap_dup2", "channel": "tap_channel"}]');
SELECT is((SELECT code FROM tap_unparsed), 'VQ102', 'unparseable functions are reported as VQ102');
SELECT alike((SELECT message FROM tap_unparsed), 'handler registration failed: 4 violations:%',
             'the message counts the four violations');
SELECT is((SELECT EXISTS (SELECT 1 FROM unnest(lines) l WHERE l LIKE format('element %s %%', v.element)) FROM tap_unparsed),
          v.reported, v.what)
  FROM (VALUES
    (1, true,  'a function without an argument list is a violation of its element'),
    (2, true,  'a function naming an unknown type is a violation of its element'),
    (3, true,  'a function that is not a string is a violation of its element'),
    (4, false, 'the first of two equal names is not a violation'),
    (5, true,  'the second of two equal names is a violation')) AS v(element, reported, what)
 ORDER BY v.element;

SELECT throws_like($$SELECT vq_register_handlers('[{"name": "tap_x", "channel": "tap_channel"},
                                                   {"name": "tap_x", "channel": "tap_channel"},
                                                   {"name": "tap y", "channel": ""}]')$$,
                   'handler registration failed: 3 violations:%',
                   'the message of a bad set reports all of its violations');
SELECT is((SELECT count(*) FROM vq.handler), :handlers_before::bigint,
          'a bad set registers nothing, not even its valid elements');

SELECT * FROM finish();
ROLLBACK;

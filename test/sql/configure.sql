-- configure.sql: vq_configure(jsonb), a whole configuration document, shown as output:
-- creates or updates every queue and contract override it names, all or nothing; reports
-- every violation at once with the JSON key names, naming the queue or contract. Who may
-- call it is tested in test/pgtap/privileges.sql.
\set SHOW_CONTEXT never

CREATE VIEW pg_temp.qs AS
SELECT name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
       backoff_base_delay_ms, backoff_max_delay_ms, instances
  FROM vq.queue;

-- Runs vq_configure(doc); returns ('OK', NULL) or the SQLSTATE with one row per
-- violation (the error detail split into lines, or the message when there is
-- no detail), sorted, so the whole list of violations can be compared.
CREATE FUNCTION pg_temp.violations(doc jsonb) RETURNS TABLE (sqlstate text, violation text)
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
    det text;
BEGIN
    PERFORM vq_configure(doc);
    RETURN QUERY SELECT 'OK'::text, NULL::text;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
    RETURN QUERY SELECT st, l
                   FROM unnest(CASE WHEN coalesce(det, '') = '' THEN ARRAY[msg]
                                    ELSE string_to_array(det, E'\n') END) AS l
                  ORDER BY l COLLATE "C";
END
$$;

-- None of the names in the example document (as in README.md) exist yet.
SELECT count(*) AS example_names_taken FROM vq.queue WHERE name IN ('emails', 'priority');
SELECT count(*) AS example_contract_taken FROM vq.contract_override WHERE handler = 'deliver-webhook';

-------------------------------------------------------------------------------
-- The example document, verbatim: its contract names queue "priority", which it
-- does not define, so nothing at all is applied (not even queue "emails").
-------------------------------------------------------------------------------
SELECT vq_configure('{"queues": {"emails": {"sleepDelayMs": 2000, "maxConcurrentJobs": 10, "instances": 2,
                                            "backoffStrategy": "EXPONENTIAL", "backoffBaseDelayMs": 10000,
                                            "backoffMaxDelayMs": 600000}},
                      "contracts": {"deliver-webhook": {"maxAttempts": 5, "queue": "priority", "priority": 10}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS applied FROM vq.queue WHERE name IN ('emails', 'priority');
SELECT count(*) AS applied FROM vq.contract_override WHERE handler = 'deliver-webhook';

-- With queue "priority" in the same document, the contract may name it.
SELECT vq_configure('{"queues": {"emails": {"sleepDelayMs": 2000, "maxConcurrentJobs": 10, "instances": 2,
                                            "backoffStrategy": "EXPONENTIAL", "backoffBaseDelayMs": 10000,
                                            "backoffMaxDelayMs": 600000},
                                 "priority": {}},
                      "contracts": {"deliver-webhook": {"maxAttempts": 5, "queue": "priority", "priority": 10}}}');
SELECT * FROM pg_temp.qs WHERE name IN ('emails', 'priority') ORDER BY name;
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler = 'deliver-webhook';

-------------------------------------------------------------------------------
-- Updates: fields omitted keep their current value; the strategy is
-- case-insensitive and stored upper case.
-------------------------------------------------------------------------------
SELECT vq_configure('{"queues": {"emails": {"backoffStrategy": "fixed", "instances": 3}}}');
SELECT * FROM pg_temp.qs WHERE name = 'emails';
SELECT vq_configure('{"queues": {"emails": {}}}');
SELECT * FROM pg_temp.qs WHERE name = 'emails';
-- The default queue can be configured too (and is put back).
SELECT vq_configure('{"queues": {"default": {"maxConcurrentJobs": 8}}}');
SELECT * FROM pg_temp.qs WHERE name = 'default';
SELECT vq_configure('{"queues": {"default": {"maxConcurrentJobs": 5}}}');
SELECT * FROM pg_temp.qs WHERE name = 'default';
-- A new queue takes the defaults for the fields omitted.
SELECT vq_configure('{"queues": {"cf.new": {"sleepDelayMs": 100, "backoffStrategy": "Exponential"}}}');
SELECT * FROM pg_temp.qs WHERE name = 'cf.new';
-- A contract entry is the whole override of that contract: a field it omits
-- inherits the handler's own default (the value given at registration), not a
-- configuration default.
SELECT vq_configure('{"contracts": {"deliver-webhook": {"priority": 3}}}');
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler = 'deliver-webhook';
SELECT vq_configure('{"contracts": {"deliver-webhook": {}}}');
SELECT handler, queue, priority, max_attempts FROM vq.contract_override WHERE handler = 'deliver-webhook';
-- Contracts not named are left alone.
SELECT vq_configure('{"contracts": {"cf-other": {"maxAttempts": 1000, "queue": "cf.new", "priority": -5}}}');
SELECT handler, queue, priority, max_attempts FROM vq.contract_override
 WHERE handler IN ('deliver-webhook', 'cf-other') ORDER BY handler;
-- Empty documents change nothing.
SELECT vq_configure('{}');
SELECT vq_configure('{"queues": {}, "contracts": {}}');
SELECT count(*) FROM vq.queue WHERE name IN ('emails', 'priority', 'cf.new');

-------------------------------------------------------------------------------
-- The override is what handlers resolve to.
-------------------------------------------------------------------------------
CREATE FUNCTION public.cf_handler(jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('cf-other', 'public.cf_handler(jsonb)', 'priority', 1, 2);
SELECT name, queue, priority, max_attempts FROM vq.handler_settings WHERE name = 'cf-other';
SELECT handler_name, queue, priority, max_attempts FROM vq_resolve_target('cf-other');
SELECT vq_configure('{"contracts": {"cf-other": {"maxAttempts": 7}}}');
SELECT name, queue, priority, max_attempts FROM vq.handler_settings WHERE name = 'cf-other';
SELECT handler_name, queue, priority, max_attempts FROM vq_resolve_target('cf-other');

-------------------------------------------------------------------------------
-- Queue violations: VQ101 for invalid values, VQ104 for a malformed document (an unknown
-- key, settings that are not an object, a value of the wrong JSON type); the message names
-- the queue and the JSON key. Each document also holds a valid queue "cf.ok1" that must not
-- be created.
-------------------------------------------------------------------------------
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"sleepDelayMs": 0}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"sleepDelayMs": -1}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"maxConcurrentJobs": 0}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"maxConcurrentJobs": -10}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"instances": 0}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"backoffBaseDelayMs": -30000}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"backoffMaxDelayMs": 0}}}');
\echo :LAST_ERROR_SQLSTATE
-- Out of the integer range.
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"backoffMaxDelayMs": 2147483648}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"backoffMaxDelayMs": 99999999999999999999999}}}');
\echo :LAST_ERROR_SQLSTATE
-- Unknown strategy.
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"backoffStrategy": "RANDOM"}}}');
\echo :LAST_ERROR_SQLSTATE
-- Unknown field key (the snake_case SQL name is not a JSON key): VQ104.
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"sleep_delay_ms": 100}}}');
\echo :LAST_ERROR_SQLSTATE
-- Settings that are not an object: VQ104.
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": 5}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": null}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": ["sleepDelayMs", 100]}}');
\echo :LAST_ERROR_SQLSTATE
-- Wrong JSON types: VQ104 (a number that is not an integer is an invalid value: VQ101).
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"sleepDelayMs": "100"}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"sleepDelayMs": 1.5}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"instances": true}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"instances": null}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"backoffStrategy": 1}}}');
\echo :LAST_ERROR_SQLSTATE
-- Bad queue names.
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf bad": {}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}, "": {}}}');
\echo :LAST_ERROR_SQLSTATE
-- Every violation of a queue at once (one of them an unknown key: VQ104).
SELECT vq_configure('{"queues": {"cf.ok1": {}, "cf.bad": {"sleepDelayMs": 0, "maxConcurrentJobs": -1,
                                 "backoffStrategy": "SOMETIMES", "backoffBaseDelayMs": 0,
                                 "backoffMaxDelayMs": -1, "instances": 0, "colour": "red"}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS created FROM vq.queue WHERE name LIKE 'cf%bad' OR name IN ('cf.ok1', '');

-------------------------------------------------------------------------------
-- Contract violations: VQ101 (VQ104 for an unknown key, a wrong JSON type, settings that
-- are not an object), naming the contract and the JSON key.
-- Each document also holds a valid queue "cf.ok1" and a valid contract
-- "cf-okc"; neither may be applied.
-------------------------------------------------------------------------------
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"maxAttempts": 0}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"maxAttempts": 1001}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"maxAttempts": "5"}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"maxAttempts": 2.5}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"priority": "high"}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"queue": "cf.nosuch"}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"queue": 1}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": {"max_attempts": 2}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf-bad": 5}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "cf bad": {}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": {"cf-okc": {"queue": "cf.ok1"}, "": {}}}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS applied FROM vq.queue WHERE name = 'cf.ok1';
SELECT count(*) AS applied FROM vq.contract_override WHERE handler IN ('cf-okc', 'cf-bad', 'cf bad', '');

-------------------------------------------------------------------------------
-- Every violation of the document is reported in one error: those of several
-- queues and of several contracts together, and more than one per contract.
-------------------------------------------------------------------------------
SELECT * FROM pg_temp.violations('{
  "queues": {"cf.okq": {},
             "cf.badq": {"sleepDelayMs": 0, "instances": -2, "backoffStrategy": "SOMETIMES", "colour": "red"},
             "cf.badq2": []},
  "contracts": {"cf-c1": {"maxAttempts": 0, "queue": "cf.nosuchq"},
                "cf-c2": {"maxAttempts": 1001, "extra": 1},
                "cf c3": {"queue": "cf.okq"},
                "cf-c4": {"queue": "cf.okq", "maxAttempts": 2}}}');
-- Only contracts, several of them.
SELECT * FROM pg_temp.violations('{"contracts": {"cf-c1": {"maxAttempts": 0, "bar": 1},
                                                  "cf-c2": {"maxAttempts": 1001, "queue": "cf.nosuchq"},
                                                  "cf-c3": [],
                                                  "cf c4": {}}}');
-- Only invalid values, in queues and contracts (a well-formed document): VQ101, every violation.
SELECT * FROM pg_temp.violations('{"queues": {"cf.okq": {}, "cf.badq": {"sleepDelayMs": 0, "backoffStrategy": "SOMETIMES"}},
                                   "contracts": {"cf-c1": {"maxAttempts": 0, "queue": "cf.nosuchq"},
                                                 "cf-c2": {"priority": 1.5}}}');
SELECT count(*) AS applied FROM vq.queue WHERE name IN ('cf.okq', 'cf.badq', 'cf.badq2');
SELECT count(*) AS applied FROM vq.contract_override WHERE handler LIKE 'cf%c_';

-------------------------------------------------------------------------------
-- The shape of the document: VQ104.
-------------------------------------------------------------------------------
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "delayedJob": {}}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": [{"cf.ok1": {}}]}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('{"queues": {"cf.ok1": {}}, "contracts": null}');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('[]');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure('"queues"');
\echo :LAST_ERROR_SQLSTATE
SELECT vq_configure(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS applied FROM vq.queue WHERE name = 'cf.ok1';

-- Clean up.
SELECT vq_unregister_handler('cf-other');
DROP FUNCTION public.cf_handler(jsonb);
SELECT vq_drop_contract_override('deliver-webhook'), vq_drop_contract_override('cf-other');
SELECT vq_drop_queue('emails'), vq_drop_queue('priority'), vq_drop_queue('cf.new');
SELECT count(*) AS left_over FROM vq.queue WHERE name IN ('emails', 'priority') OR name LIKE 'cf%';
SELECT count(*) AS left_over FROM vq.contract_override WHERE handler = 'deliver-webhook' OR handler LIKE 'cf%';

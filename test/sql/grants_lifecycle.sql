-- grants_lifecycle.sql: consumer and producer grants belong to a handler's registration, and a
-- consumer grant reaches only the jobs of NOTIFY handlers.
--   1. vq_unregister_handler deletes the handler's consumer and producer grants; a handler
--      registered again under the name (in the same transaction, too) starts with none;
--   2. so a role granted for an earlier NOTIFY handler of the name can neither read the
--      payload of, nor reply to, a job of a function handler registered under it since, nor
--      enqueue for a NOTIFY handler registered under it since;
--   3. a consumer grant given for the name now (a NOTIFY handler) does not reach a job of the
--      function handler that had the name before: vq_job_payload NULL, replies VQ010; the
--      enqueuing role itself still reads its payload;
--   4. a grant for a name that is not a registered NOTIFY handler stays refused (VQ002).
\set SHOW_CONTEXT never
\set later '2999-01-01 00:00:00+00'
SET client_min_messages = warning;
CREATE ROLE gl_tenant;
CREATE ROLE gl_consumer;
CREATE FUNCTION public.gl_fn(jsonb) RETURNS void LANGUAGE sql AS '';
GRANT EXECUTE ON FUNCTION public.gl_fn(jsonb) TO gl_tenant;
RESET client_min_messages;

-- 1. grants go with the handler
SELECT vq_register_notify_handler('gl_h', 'gl_channel');
SELECT vq_grant_consumer('gl_h', 'gl_consumer'), vq_grant_producer('gl_h', 'gl_consumer');
SELECT (SELECT count(*) FROM vq.consumer_grant WHERE handler = 'gl_h') AS consumer_grants,
       (SELECT count(*) FROM vq.producer_grant WHERE handler = 'gl_h') AS producer_grants;
SELECT vq_unregister_handler('gl_h');
SELECT (SELECT count(*) FROM vq.consumer_grant WHERE handler = 'gl_h') AS consumer_grants,
       (SELECT count(*) FROM vq.producer_grant WHERE handler = 'gl_h') AS producer_grants;
-- re-registered in one transaction: the old grants are not inherited
BEGIN;
SELECT vq_register_notify_handler('gl_r', 'gl_channel');
SELECT vq_grant_consumer('gl_r', 'gl_consumer'), vq_grant_producer('gl_r', 'gl_consumer');
SELECT vq_unregister_handler('gl_r');
SELECT vq_register_notify_handler('gl_r', 'gl_channel');
SELECT (SELECT count(*) FROM vq.consumer_grant WHERE handler = 'gl_r') AS consumer_grants,
       (SELECT count(*) FROM vq.producer_grant WHERE handler = 'gl_r') AS producer_grants;
COMMIT;
SET ROLE gl_consumer;
SELECT vq_enqueue('gl_r', '{}', :'later');
\echo :SQLSTATE
RESET ROLE;

-- 2. the name now belongs to a function handler: the former consumer reads nothing
SELECT vq_register_handler('gl_h', 'public.gl_fn(jsonb)');
SET ROLE gl_tenant;
SELECT vq_enqueue('gl_h', '{"secret": "tenant"}', :'later') AS fn_job \gset
RESET ROLE;
SET ROLE gl_consumer;
SELECT vq_job_payload(:'fn_job') AS payload_for_former_consumer;
\set VERBOSITY sqlstate
SELECT vq_complete(:'fn_job');
\set VERBOSITY default
\echo :SQLSTATE
RESET ROLE;

-- 3. a grant for the NOTIFY handler that has the name now does not reach the function job
SELECT vq_unregister_handler('gl_h');
SELECT vq_register_notify_handler('gl_h', 'gl_channel');
SELECT vq_grant_consumer('gl_h', 'gl_consumer');
SET ROLE gl_consumer;
SELECT vq_job_payload(:'fn_job') AS payload_for_new_consumer;
\set VERBOSITY sqlstate
SELECT vq_fail(:'fn_job', 'x');
\set VERBOSITY default
\echo :SQLSTATE
SELECT count(*) AS pulled FROM vq_pull('gl_h', 10);
RESET ROLE;
SET ROLE gl_tenant;
SELECT vq_job_payload(:'fn_job') AS payload_for_enqueuer;
RESET ROLE;
-- ... while it does reach the NOTIFY handler's own jobs
SELECT vq_enqueue('gl_h', '{"n": 1}', :'later') AS notify_job \gset
SET ROLE gl_consumer;
SELECT vq_job_payload(:'notify_job') AS notify_payload_for_consumer;
RESET ROLE;

-- 4. no grant for a name that is not a registered NOTIFY handler
SELECT vq_grant_consumer('gl_none', 'gl_consumer');
\echo :SQLSTATE
SELECT vq_grant_producer('gl_none', 'gl_consumer');
\echo :SQLSTATE

-- Clean up (roles are cluster-wide).
SET client_min_messages = warning;
DELETE FROM vq.job WHERE handler IN ('gl_h', 'gl_r');
SELECT vq_unregister_handler('gl_h'), vq_unregister_handler('gl_r');
REVOKE ALL ON FUNCTION public.gl_fn(jsonb) FROM gl_tenant;
DROP FUNCTION public.gl_fn(jsonb);
DROP ROLE gl_tenant, gl_consumer;
RESET client_min_messages;

-- drop_extension.sql: what DROP EXTENSION vq_job does to the objects of yours that use the
-- extension, as docs/operations.md (Removing the extension) and docs/reference.md say.
--   1. without CASCADE it is refused (2BP01), and the error lists them: a handler function
--      fn(jsonb, vq.job_context), an interceptor function, a transition listener function, a
--      destination function returning vq.publish_result and a view over vq.job;
--   2. with CASCADE it drops those, and keeps the handler function fn(jsonb) (a registration
--      records the function without depending on it) and the table it writes.
-- In a database of its own, not served by the executors, so that the regression database
-- keeps its extension.
\set SHOW_CONTEXT never
SELECT current_database() AS regress_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS vq_regress_drop_extension;
RESET client_min_messages;
CREATE DATABASE vq_regress_drop_extension;
ALTER DATABASE vq_regress_drop_extension SET vq.serve_database = off;
\c vq_regress_drop_extension
SET client_min_messages = warning;
CREATE EXTENSION vq_job;
CREATE TABLE public.de_effects (tag text);
CREATE FUNCTION public.de_ctx(p jsonb, c vq.job_context) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.de_effects VALUES ('ctx') $$;
CREATE FUNCTION public.de_plain(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.de_effects VALUES ('plain') $$;
CREATE FUNCTION public.de_complete(c vq.job_context, outcome text, error text) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION public.de_listen(t vq.job_transition, j vq.job) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION public.de_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
    RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('PERMANENT', 'refused')::vq.publish_result $$;
CREATE VIEW public.de_jobs AS SELECT execution_id, state FROM vq.job;
SELECT vq_register_handler('de_ctx', 'public.de_ctx(jsonb, vq.job_context)');
SELECT vq_register_handler('de_plain', 'public.de_plain(jsonb)');
SELECT vq_register_interceptor('de-complete', on_complete => 'public.de_complete(vq.job_context, text, text)');
SELECT vq_register_transition_listener('de-listen', 'public.de_listen(vq.job_transition, vq.job)');
SELECT vq_register_destination('de.dest', 'public.de_dest(text, jsonb, jsonb, jsonb)');
SELECT count(*) AS jobs FROM (SELECT vq_enqueue(h, '{}') FROM unnest(ARRAY['de_ctx', 'de_plain']) h) e;
RESET client_min_messages;

-- 1. refused, listing what depends on the extension
DROP EXTENSION vq_job;
\echo :LAST_ERROR_SQLSTATE
SELECT extname FROM pg_extension WHERE extname = 'vq_job';

-- 2. CASCADE: those are dropped; the (jsonb) handler function and the table stay
DROP EXTENSION vq_job CASCADE;
SELECT count(*) AS extension FROM pg_extension WHERE extname = 'vq_job';
SELECT count(*) AS schema_vq FROM pg_namespace WHERE nspname = 'vq';
SELECT p.oid::regprocedure AS left_function FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.proname LIKE 'de\_%' ORDER BY 1::text;
SELECT c.oid::regclass AS left_relation FROM pg_class c
 WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'de\_%' ORDER BY 1::text;
SELECT public.de_plain('{}');
SELECT tag FROM public.de_effects;

\c :regress_db
DROP DATABASE vq_regress_drop_extension;

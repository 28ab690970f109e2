-- sql/schema/privileges.sql: every privilege and row-security policy of the extension, once
-- every object exists: who may use the schema, read the tables, views and sequences, and call
-- the functions; and which rows of a table each role sees. No other fragment grants, revokes
-- or enables row security (sql/README.md).

GRANT USAGE ON SCHEMA vq TO PUBLIC;

------------------------------------------------------------------------------
-- Tables and views. Nobody but the owner writes these tables directly. Configuration is
-- readable by everyone; a role sees only the jobs, history, logs and outbox rows of
-- roles it is a member of (row-level security; the owner and superusers see all).
------------------------------------------------------------------------------
REVOKE ALL ON ALL TABLES IN SCHEMA vq FROM PUBLIC;
GRANT SELECT ON vq.queue, vq.handler, vq.contract_override, vq.consumer_grant, vq.producer_grant,
                vq.queue_grant, vq.destination TO PUBLIC;
GRANT SELECT ON vq.job, vq.job_transition_data, vq.job_log, vq.outbox TO PUBLIC;

-- pg_dump reads every table above (and the sequences' positions) as the role that dumps: so that
-- a role that is no superuser, such as the database's owner, can dump the database, it may read
-- them all, with what it sees limited by row security (pg_dump --enable-row-security): the
-- configuration, the interceptors and listeners that run functions it owns (through its roles),
-- and the jobs, history, logs, outbox rows and job_id windows of the roles it is a member of.
-- The partitions show what vq.job shows.
GRANT SELECT ON vq.interceptor, vq.transition_listener, vq.job_active, vq.job_finished, vq.job_id_window
    TO PUBLIC;

-- vq.callback_event's rows carry other roles' jobs: readable only so that pg_dump by another
-- role reads it, empty (its policy below shows no row).
GRANT SELECT ON vq.callback_event TO PUBLIC;
GRANT SELECT ON SEQUENCE vq.job_transition_data_id_seq, vq.job_log_id_seq, vq.outbox_id_seq,
    vq.callback_event_id_seq TO PUBLIC;

-- The views: what each shows is what the tables under it show the caller (security_invoker),
-- or configuration (vq.handler_settings).
GRANT SELECT ON vq.job_transition, vq.running_jobs, vq.queue_stats, vq.dead_letters, vq.handler_settings
    TO PUBLIC;

------------------------------------------------------------------------------
-- Row security: which rows of a table a role that may read it sees.
------------------------------------------------------------------------------
ALTER TABLE vq.job ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_visible_to_enqueuer ON vq.job FOR SELECT
    USING (pg_catalog.pg_has_role(CURRENT_USER, enqueued_by, 'USAGE'));

ALTER TABLE vq.job_transition_data ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_transition_visible_to_enqueuer ON vq.job_transition_data FOR SELECT
    USING (EXISTS (SELECT 1 FROM vq.job j
                   WHERE j.execution_id OPERATOR(pg_catalog.=) job_transition_data.execution_id));

ALTER TABLE vq.job_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_log_visible_to_enqueuer ON vq.job_log FOR SELECT
    USING (EXISTS (SELECT 1 FROM vq.job j
                   WHERE j.execution_id OPERATOR(pg_catalog.=) job_log.execution_id));

ALTER TABLE vq.outbox ENABLE ROW LEVEL SECURITY;
CREATE POLICY outbox_visible_to_publisher ON vq.outbox FOR SELECT
    USING (pg_catalog.pg_has_role(CURRENT_USER, published_by, 'USAGE'));

ALTER TABLE vq.job_active ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_active_visible_as_job ON vq.job_active FOR SELECT
    USING (EXISTS (SELECT 1 FROM vq.job j WHERE j.execution_id OPERATOR(pg_catalog.=) job_active.execution_id));
ALTER TABLE vq.job_finished ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_finished_visible_as_job ON vq.job_finished FOR SELECT
    USING (EXISTS (SELECT 1 FROM vq.job j WHERE j.execution_id OPERATOR(pg_catalog.=) job_finished.execution_id));
ALTER TABLE vq.job_id_window ENABLE ROW LEVEL SECURITY;
CREATE POLICY job_id_window_visible_to_enqueuer ON vq.job_id_window FOR SELECT
    USING (pg_catalog.pg_has_role(CURRENT_USER, enqueued_by, 'USAGE'));

-- A role sees the callbacks that run functions it owns (through its roles).
ALTER TABLE vq.interceptor ENABLE ROW LEVEL SECURITY;
CREATE POLICY interceptor_visible_to_function_owner ON vq.interceptor FOR SELECT
    USING ((on_dispatch IS NULL OR pg_catalog.pg_has_role(CURRENT_USER,
                (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) on_dispatch), 'USAGE'))
           AND (on_complete IS NULL OR pg_catalog.pg_has_role(CURRENT_USER,
                (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) on_complete), 'USAGE')));
ALTER TABLE vq.transition_listener ENABLE ROW LEVEL SECURITY;
CREATE POLICY transition_listener_visible_to_function_owner ON vq.transition_listener FOR SELECT
    USING (fn IS NOT NULL AND pg_catalog.pg_has_role(CURRENT_USER,
                (SELECT p.proowner FROM pg_catalog.pg_proc p WHERE p.oid OPERATOR(pg_catalog.=) fn), 'USAGE'));

-- No role but a superuser sees the queued callbacks.
ALTER TABLE vq.callback_event ENABLE ROW LEVEL SECURITY;
CREATE POLICY callback_event_visible_to_nobody ON vq.callback_event FOR SELECT USING (false);

------------------------------------------------------------------------------
-- Functions. EXECUTE stays with PUBLIC for the API every role may call (each checks, inside,
-- whose jobs the caller may touch). It is revoked from PUBLIC for the internal functions
-- (helpers, trigger functions, what the C code calls) and for the administrators' and
-- operators' functions: an administrator decides who may change configuration or act on
-- others' jobs (GRANT EXECUTE ON FUNCTION ...). By fragment:
------------------------------------------------------------------------------
-- schema.sql
REVOKE ALL ON FUNCTION vq.require_writable(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.loading_rows() FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.wake_executors(boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.launcher_wakeup() FROM PUBLIC;

-- registry.sql: the trigger functions, and the configuration: queue administrators and
-- handler administrators
REVOKE ALL ON FUNCTION vq.registry_changed() FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.queue_default_restored() FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.queue_violations(text, bigint, bigint, text, bigint, bigint, bigint, text[]),
                       vq.raise_violations(text[], text, text),
                       vq.override_violations(text, text, bigint, text, text, text[]),
                       vq.handler_violations(text, text, regprocedure, text, text, bigint, text, bigint, interval),
                       vq.insert_handler(text, text, regprocedure, text, text, integer, integer, integer, interval),
                       vq_create_queue(text, integer, integer, text, integer, integer, integer),
                       vq_alter_queue(text, integer, integer, text, integer, integer, integer),
                       vq_drop_queue(text),
                       vq_pause_queue(text),
                       vq_resume_queue(text),
                       vq_set_contract_override(text, text, integer, integer),
                       vq_drop_contract_override(text),
                       vq_configure(jsonb),
                       vq_register_handler(text, regprocedure, text, integer, integer, integer, interval),
                       vq_register_notify_handler(text, text, text, integer, integer, interval),
                       vq_register_handlers(jsonb),
                       vq.handler_functions(jsonb, text),
                       vq.register_handlers(jsonb, jsonb),
                       vq_unregister_handler(text)
       FROM PUBLIC;

-- consumers.sql, registry.sql (queue grants), outbox.sql and callbacks.sql: administrators
REVOKE ALL ON FUNCTION vq_grant_consumer(text, regrole), vq_revoke_consumer(text, regrole),
                       vq_grant_producer(text, regrole), vq_revoke_producer(text, regrole),
                       vq_grant_queue(text, regrole), vq_revoke_queue(text, regrole),
                       vq_register_destination(text, regprocedure), vq_unregister_destination(text),
                       vq_register_interceptor(text, regprocedure, regprocedure, integer),
                       vq_unregister_interceptor(text),
                       vq_register_transition_listener(text, regprocedure, text[], text[], text[], text),
                       vq_unregister_transition_listener(text)
       FROM PUBLIC;

-- callbacks.sql: the listeners' trigger functions and the check of a callback's signature
REVOKE ALL ON FUNCTION vq.transition_listeners_exist(), vq.transition_recorded(), vq.job_finished_recorded()
    FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.check_callback(text, regprocedure, regtype[]) FROM PUBLIC;

-- operations.sql: re-drive and reassign are operators'; the counts over every job and outbox
-- row are pg_monitor's and those an administrator grants them to
REVOKE ALL ON FUNCTION vq_redrive(uuid), vq_redrive(text, text, timestamptz), vq.redrive(uuid[]) FROM PUBLIC;

REVOKE ALL ON FUNCTION vq_reassign_jobs(regrole, regrole), vq.raise_job_id_conflict(regrole, regrole, boolean)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION vq.all_job_counts(), vq.all_outbox_counts() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION vq.all_job_counts(), vq.all_outbox_counts() TO pg_monitor;

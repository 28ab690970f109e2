-- sql/schema/consumers.sql: the workers outside the server that run the jobs of external
-- (NOTIFY) handlers: who may consume and produce their jobs (consumer and producer grants), and
-- the protocol a worker speaks (take, reply, lease, logs and progress).

-- Roles allowed to consume (take, read and reply to) the jobs of an external handler, besides
-- members of each job's enqueuing role. A grant belongs to the registration: unregistering
-- the handler deletes it, so a handler registered later under the name starts with none.
CREATE TABLE vq.consumer_grant (
    handler     text NOT NULL REFERENCES vq.handler (name) ON DELETE CASCADE,
    grantee     regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (handler, grantee)
);

-- Roles allowed to enqueue (and publish) jobs of a NOTIFY handler: there is no function
-- whose EXECUTE says so, and its consumer runs whatever the payload asks. Deleted with the
-- handler, as consumer grants are.
CREATE TABLE vq.producer_grant (
    handler     text NOT NULL REFERENCES vq.handler (name) ON DELETE CASCADE,
    grantee     regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (handler, grantee)
);

-- Held in the registry cache: a change invalidates it (vq.registry_changed, registry.sql).
CREATE TRIGGER producer_grant_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.producer_grant
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

------------------------------------------------------------------------------
-- The external-worker protocol (C). A worker may act on a job when it is a member of the
-- job's enqueuing role or of a role granted with vq_grant_consumer() for its handler.
------------------------------------------------------------------------------
-- Take up to max_jobs due jobs of these external handlers: RUNNING, leased until lease_until.
CREATE FUNCTION vq_take_jobs(handlers text[], max_jobs integer DEFAULT 1, lease interval DEFAULT NULL)
RETURNS TABLE (execution_id uuid, attempt integer, handler text, job_id text, payload jsonb,
               metadata jsonb, queue text, priority integer, max_attempts integer,
               scheduled_at timestamptz, lease_until timestamptz)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_take_jobs';
COMMENT ON FUNCTION vq_take_jobs(text[], integer, interval)
    IS 'take up to max_jobs due jobs of external handlers (priority, then due time), leased until lease_until';
-- Reply for many taken jobs: complete, fail, retry (at a time), release (no attempt consumed).
CREATE FUNCTION vq_reply_jobs(execution_ids uuid[], attempts integer[], outcomes text[] DEFAULT NULL,
                              errors text[] DEFAULT NULL, retry_at timestamptz[] DEFAULT NULL)
RETURNS TABLE (execution_id uuid, attempt integer, ignored text)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_reply_jobs';
COMMENT ON FUNCTION vq_reply_jobs(uuid[], integer[], text[], text[], timestamptz[])
    IS 'reply for many taken jobs (complete, fail, retry, release); returns the replies that were ignored, with why';
-- Extend the leases of jobs still held; tells whether vq_cancel asked them to stop.
CREATE FUNCTION vq_extend_leases(execution_ids uuid[], attempts integer[], lease interval DEFAULT NULL)
RETURNS TABLE (execution_id uuid, lease_until timestamptz, cancel_requested boolean)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_extend_leases';
COMMENT ON FUNCTION vq_extend_leases(uuid[], integer[], interval)
    IS 'extend the leases of taken jobs still held (a missing row: the lease was lost)';
-- Log lines and progress of taken jobs, as vq_log and vq_progress_* write them for function handlers.
CREATE FUNCTION vq_log_jobs(execution_ids uuid[], attempts integer[], levels text[], messages text[],
                            fields jsonb[] DEFAULT NULL) RETURNS integer
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_log_jobs';
COMMENT ON FUNCTION vq_log_jobs(uuid[], integer[], text[], text[], jsonb[])
    IS 'write log lines of taken jobs into vq.job_log; returns how many were written';
CREATE FUNCTION vq_progress_jobs(execution_ids uuid[], attempts integer[], total bigint[],
                                 succeeded bigint[], failed bigint[]) RETURNS integer
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_progress_jobs';
COMMENT ON FUNCTION vq_progress_jobs(uuid[], integer[], bigint[], bigint[], bigint[])
    IS 'set the progress counters of taken jobs (absolute values; NULL keeps a counter); returns the jobs updated';

-- The single-job forms.
CREATE FUNCTION vq_complete(execution_id uuid, attempt integer DEFAULT NULL) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_complete';
COMMENT ON FUNCTION vq_complete(uuid, integer)
    IS 'reply for a taken job: done; false (with a WARNING saying why) when the reply is ignored';
CREATE FUNCTION vq_fail(execution_id uuid, error text, attempt integer DEFAULT NULL) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_fail';
COMMENT ON FUNCTION vq_fail(uuid, text, integer)
    IS 'reply for a taken job: failed (retry, backoff, dead letter as for function handlers)';
CREATE FUNCTION vq_pull(handler text, max_jobs integer DEFAULT 1)
RETURNS TABLE (execution_id uuid, job_id text, handler text, attempt integer, payload jsonb,
               metadata jsonb, scheduled_at timestamptz, cancel_requested boolean)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_pull';
COMMENT ON FUNCTION vq_pull(text, integer)
    IS 'take up to max_jobs due jobs of one external handler (vq_take_jobs with the default lease)';
CREATE FUNCTION vq_job_payload(execution_id uuid) RETURNS jsonb
    LANGUAGE c STABLE STRICT PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_job_payload';

-- Let a role consume the jobs of a NOTIFY handler whoever enqueued them.
CREATE FUNCTION vq_grant_consumer(handler text, grantee regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_grant_consumer');
    IF NOT EXISTS (SELECT 1 FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) vq_grant_consumer.handler
                                               AND h.kind OPERATOR(pg_catalog.=) 'notify') THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ002', MESSAGE = format('"%s" is not a registered NOTIFY handler', handler);
    END IF;
    IF grantee IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008', MESSAGE = 'grantee must not be null';
    END IF;
    INSERT INTO vq.consumer_grant (handler, grantee) VALUES (handler, grantee) ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION vq_revoke_consumer(handler text, grantee regrole) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_revoke_consumer');
    DELETE FROM vq.consumer_grant g
     WHERE g.handler OPERATOR(pg_catalog.=) vq_revoke_consumer.handler
       AND g.grantee OPERATOR(pg_catalog.=) vq_revoke_consumer.grantee;
    RETURN FOUND;
END
$$;

-- Let a role enqueue (and publish) jobs of a NOTIFY handler.
CREATE FUNCTION vq_grant_producer(handler text, grantee regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_grant_producer');
    IF NOT EXISTS (SELECT 1 FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) vq_grant_producer.handler
                                               AND h.kind OPERATOR(pg_catalog.=) 'notify') THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ002', MESSAGE = format('"%s" is not a registered NOTIFY handler', handler);
    END IF;
    IF grantee IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008', MESSAGE = 'grantee must not be null';
    END IF;
    INSERT INTO vq.producer_grant (handler, grantee) VALUES (handler, grantee) ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION vq_revoke_producer(handler text, grantee regrole) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_revoke_producer');
    DELETE FROM vq.producer_grant g
     WHERE g.handler OPERATOR(pg_catalog.=) vq_revoke_producer.handler
       AND g.grantee OPERATOR(pg_catalog.=) vq_revoke_producer.grantee;
    RETURN FOUND;
END
$$;

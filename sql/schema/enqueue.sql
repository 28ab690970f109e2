-- sql/schema/enqueue.sql: the enqueue API (C) and the durable context merged into what it
-- enqueues.

------------------------------------------------------------------------------
-- Enqueue (C). Join the caller's transaction; validate before touching any table.
------------------------------------------------------------------------------
CREATE FUNCTION vq_enqueue(
    handler       text,
    payload       jsonb       DEFAULT NULL,
    run_at        timestamptz DEFAULT NULL,
    queue         text        DEFAULT NULL,
    priority      integer     DEFAULT NULL,
    max_attempts  integer     DEFAULT NULL,
    job_id        text        DEFAULT NULL,
    metadata      jsonb       DEFAULT NULL,
    unique_for    interval    DEFAULT NULL)
RETURNS uuid
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'vq_enqueue';
COMMENT ON FUNCTION vq_enqueue(text, jsonb, timestamptz, text, integer, integer, text, jsonb, interval)
    IS 'enqueue a job in the current transaction; returns its execution_id';

CREATE FUNCTION vq_enqueue_in(
    handler       text,
    payload       jsonb,
    delay         interval,
    queue         text    DEFAULT NULL,
    priority      integer DEFAULT NULL,
    max_attempts  integer DEFAULT NULL,
    job_id        text    DEFAULT NULL,
    metadata      jsonb   DEFAULT NULL,
    unique_for    interval DEFAULT NULL)
RETURNS uuid
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'vq_enqueue_in';
COMMENT ON FUNCTION vq_enqueue_in(text, jsonb, interval, text, integer, integer, text, jsonb, interval)
    IS 'enqueue a job due clock_timestamp() + delay (resolved at call time)';

CREATE FUNCTION vq_enqueue_many(
    handler       text,
    payloads      jsonb[],
    run_at        timestamptz DEFAULT NULL,
    queue         text        DEFAULT NULL,
    priority      integer     DEFAULT NULL,
    max_attempts  integer     DEFAULT NULL,
    job_ids       text[]      DEFAULT NULL,
    metadata      jsonb       DEFAULT NULL)
RETURNS uuid[]
LANGUAGE c VOLATILE PARALLEL UNSAFE
AS 'MODULE_PATHNAME', 'vq_enqueue_many';
COMMENT ON FUNCTION vq_enqueue_many(text, jsonb[], timestamptz, text, integer, integer, text[], jsonb)
    IS 'enqueue one job per payload in one statement; returns the execution_ids in order';

------------------------------------------------------------------------------
-- Durable context bound to the session, or (is_local) to the rest of the transaction, as
-- set_config(name, value, is_local) has it; merged into the metadata of every job enqueued.
------------------------------------------------------------------------------
CREATE FUNCTION vq_context_set(namespace text, value jsonb, is_local boolean DEFAULT false) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_context_set';
CREATE FUNCTION vq_context_clear(namespace text DEFAULT NULL, is_local boolean DEFAULT false) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_context_clear';
CREATE FUNCTION vq_context() RETURNS jsonb
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_context';

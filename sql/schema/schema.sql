-- sql/schema/schema.sql: the schema vq, the helpers the other fragments' code calls, and the
-- types of the job tables and handlers.
--
-- This is the first fragment of the install script vq_job--VERSION.sql, which the Makefile
-- concatenates from the fragments of sql/schema/ (sql/README.md): schema vq (tables, types,
-- views) and the vq_* functions. Every function body qualifies what it uses (pg_catalog.*,
-- vq.*, OPERATOR(pg_catalog.=)) and every plpgsql function pins search_path, so a hostile
-- object earlier on a caller's search_path cannot change what these functions do.

\echo Use "CREATE EXTENSION vq_job" to load this file. \quit

CREATE SCHEMA vq;
COMMENT ON SCHEMA vq IS 'vq_job: queues, handlers, jobs, history, logs and outbox';

-- Every function that writes starts with this: on a hot standby (or in a read-only
-- transaction) it fails with SQLSTATE 25006 and a message and hint in vq_job's words, naming
-- the function, instead of PostgreSQL's error about the first INSERT.
CREATE FUNCTION vq.require_writable(what text) RETURNS void
    LANGUAGE c VOLATILE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_require_writable';

-- Is the statement the client sent a COPY or an INSERT (what a restore runs), not a function call?
CREATE FUNCTION vq.loading_rows() RETURNS boolean
    LANGUAGE c STABLE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_loading_rows';

-- Wake the executors when the calling transaction commits (it made jobs due without enqueuing).
-- forget_positions: jobs were made ENQUEUED anywhere in claim order (vq_redrive), so the
-- executors' claim positions must be learnt again.
CREATE FUNCTION vq.wake_executors(forget_positions boolean DEFAULT false) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_wake_executors';

-- Wake the launcher when CREATE EXTENSION commits, so this database is served at once (the call
-- only takes note; nothing happens unless and until the transaction commits).
CREATE FUNCTION vq.launcher_wakeup() RETURNS void
    LANGUAGE c VOLATILE AS 'MODULE_PATHNAME', 'vq_launcher_wakeup';
SELECT vq.launcher_wakeup();

-- States a job row can be in. A future job is ENQUEUED with a future scheduled_at.
CREATE TYPE vq.job_state AS ENUM ('ENQUEUED', 'RUNNING', 'COMPLETED', 'DEAD_LETTER', 'CANCELLED');

-- What a function handler with a two-argument signature receives besides the payload.
CREATE TYPE vq.job_context AS (
    execution_id    uuid,
    job_id          text,
    handler         text,
    queue           text,
    priority        integer,
    attempt_number  integer,
    max_attempts    integer,
    scheduled_at    timestamptz,
    metadata        jsonb
);

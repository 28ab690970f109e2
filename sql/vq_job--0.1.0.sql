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

-- sql/schema/jobs.sql: the jobs (vq.job and its partitions, with the claim, pull and retention
-- indexes), their history (vq.job_transition_data, and vq.job_transition with the implied
-- completions), their logs, the job_id windows, and what a running handler calls.

-- One row per logical job, reused across attempts. Partitioned by state, so that what the
-- claims search stays small whatever is kept: vq.job_active holds the ENQUEUED and RUNNING
-- jobs; a job that ends (COMPLETED, DEAD_LETTER, CANCELLED) moves to vq.job_finished, where
-- retention removes it. The workers move a row with DELETE + INSERT, never an UPDATE that
-- changes partition: a claim whose snapshot still saw the row then skips it, where a moved
-- row would make it fail with a serialization error.
CREATE TABLE vq.job (
    execution_id        uuid NOT NULL,
    state               vq.job_state NOT NULL,
    priority            integer NOT NULL,
    attempt_number      integer NOT NULL DEFAULT 0,
    max_attempts        integer NOT NULL,
    scheduled_at        timestamptz NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    enqueued_by         regrole NOT NULL,
    queue               text NOT NULL,
    job_id              text NOT NULL,
    handler             text NOT NULL,
    handler_address     text NOT NULL,
    handler_function    regprocedure,   -- the function the enqueue authorised (NULL: a NOTIFY handler); the one that runs
    payload             jsonb,
    metadata            jsonb NOT NULL,
    started_at          timestamptz,
    finished_at         timestamptz,
    worker_pid          integer,        -- executor running it (NULL for a NOTIFY consumer)
    worker_started_at   timestamptz,    -- with worker_pid, identifies that executor's incarnation
    consumer_claimed_at timestamptz,    -- NOTIFY jobs: when a consumer took it with vq_pull (NULL: announced only)
    cancel_requested    boolean NOT NULL DEFAULT false,
    last_error          text,
    progress_total      bigint,
    progress_succeeded  bigint,
    progress_failed     bigint,
    worker_timeline     integer         -- with worker_pid: the server's timeline when the executor claimed it
) PARTITION BY LIST (state);

-- The hot partition: every job is inserted here and leaves when it ends, so its live rows are
-- the unfinished jobs and its dead ones the jobs that ended since the last vacuum. Vacuum it as
-- soon as any dead rows pile up, unthrottled (it is small: a pass takes milliseconds; executor 0
-- also vacuums it every 10 s). Vacuum does not cut empty pages off its end: that takes an ACCESS
-- EXCLUSIVE lock, which stops every enqueue and claim, for a WAL flush and the truncation of the
-- file (hundreds of milliseconds after a held snapshot); executor 0's rewrite gives that space
-- back instead, and drops the old files after it has let go of its lock.
CREATE TABLE vq.job_active PARTITION OF vq.job (CONSTRAINT job_active_pkey PRIMARY KEY (execution_id))
    FOR VALUES IN ('ENQUEUED', 'RUNNING')
    WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
          autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
          autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 10000,
          autovacuum_vacuum_cost_delay = 0, vacuum_truncate = false);
-- The claim path: due ENQUEUED rows of a queue, highest priority first, then earliest
-- (execution_id breaks ties, so a claim can resume exactly where the previous one ended).
CREATE INDEX job_claim_idx ON vq.job_active (queue, priority DESC, scheduled_at, execution_id)
    WHERE state = 'ENQUEUED';
-- Jobs claimed visibly, for the rescue of those whose executor died; with worker_pid NULL,
-- the NOTIFY jobs in flight, by queue: a queue's claim counts its own (VqExternalInFlight)
-- without stepping over the row versions of every other queue's NOTIFY jobs.
CREATE INDEX job_running_idx ON vq.job_active (worker_pid, queue) WHERE state = 'RUNNING';
-- vq_pull: a NOTIFY handler's announced jobs in the order consumers take them (priority
-- negated, so that one row comparison can start the scan where the previous pull ended;
-- see pullpos.c). Jobs taken and not yet answered stay in it (taking one is a HOT update).
CREATE INDEX job_pull_idx ON vq.job_active (handler, (- priority::bigint), scheduled_at, execution_id)
    WHERE state = 'RUNNING' AND worker_pid IS NULL;
-- job_id is an idempotency key among the unfinished jobs (the rows of this partition) of the
-- role that enqueued them: each role has its own, so no role can take or probe another's ids.
CREATE UNIQUE INDEX job_active_job_id_key ON vq.job_active (enqueued_by, job_id);

-- Ended jobs: written once when the job ends, deleted by retention (or moved back by vq_redrive).
CREATE TABLE vq.job_finished PARTITION OF vq.job (CONSTRAINT job_finished_pkey PRIMARY KEY (execution_id))
    FOR VALUES IN ('COMPLETED', 'DEAD_LETTER', 'CANCELLED');
-- Finished jobs by age, for retention.
CREATE INDEX job_finished_idx ON vq.job_finished (finished_at);

-- One row per state transition of a job, except the COMPLETED transition of a job that ran
-- without a visible claim (ENQUEUED -> COMPLETED, the common case): the finished job row
-- records that one (vq.job_transition shows both).
CREATE TABLE vq.job_transition_data (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    execution_id    uuid NOT NULL,
    attempt_number  integer NOT NULL,
    kind            text NOT NULL CONSTRAINT job_transition_kind_known CHECK (kind IN
                    ('CLAIMED', 'COMPLETED', 'FAILED', 'ABANDONED', 'INTERRUPTED', 'CANCELLED', 'REDRIVEN')),
    from_state      vq.job_state NOT NULL,
    to_state        vq.job_state NOT NULL,
    error           text,
    at              timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    -- one index serves both the key and the per-job history (a second one would cost every transition)
    CONSTRAINT job_transition_pkey PRIMARY KEY (execution_id, id)
);

-- Every transition of the jobs the caller may see: the stored ones, and the COMPLETED
-- transition implied by a job that completed without one (a job completes at most once:
-- vq_redrive re-enqueues dead letters only). Implied rows have no id and sort after the
-- stored ones of their job in id order.
CREATE VIEW vq.job_transition WITH (security_invoker = true) AS
SELECT t.id, t.execution_id, t.attempt_number, t.kind, t.from_state, t.to_state, t.error, t.at
  FROM vq.job_transition_data t
UNION ALL
SELECT NULL::bigint, j.execution_id, j.attempt_number, 'COMPLETED'::text,
       'ENQUEUED'::vq.job_state, 'COMPLETED'::vq.job_state, NULL::text, j.finished_at
  FROM vq.job j
 WHERE j.state OPERATOR(pg_catalog.=) 'COMPLETED'::vq.job_state
   AND NOT EXISTS (SELECT 1 FROM vq.job_transition_data c
                    WHERE c.execution_id OPERATOR(pg_catalog.=) j.execution_id
                      AND c.kind OPERATOR(pg_catalog.=) 'COMPLETED');

-- Structured logs written by handlers through vq_log(); kept even when the attempt fails.
CREATE TABLE vq.job_log (
    id              bigint GENERATED ALWAYS AS IDENTITY,
    execution_id    uuid NOT NULL,
    attempt_number  integer NOT NULL,
    level           text NOT NULL CONSTRAINT job_log_level_known CHECK (level IN ('DEBUG', 'INFO', 'WARN', 'ERROR')),
    message         text NOT NULL,
    fields          jsonb,
    logged_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT job_log_pkey PRIMARY KEY (execution_id, id)
);

-- Idempotency windows: vq_enqueue(..., job_id, unique_for => ...) keeps the role's job_id for
-- that long whatever becomes of the job (the unique index of vq.job_active covers only unfinished
-- jobs); another enqueue of the id meanwhile returns the job that holds the window. Expired
-- windows are deleted by the retention sweep.
CREATE TABLE vq.job_id_window (
    enqueued_by   regrole NOT NULL,   -- (by name in a dump: role OIDs differ in another cluster)
    job_id        text NOT NULL,
    execution_id  uuid NOT NULL,
    until         timestamptz NOT NULL,
    CONSTRAINT job_id_window_pkey PRIMARY KEY (enqueued_by, job_id)
);
CREATE INDEX job_id_window_until_idx ON vq.job_id_window (until);

------------------------------------------------------------------------------
-- Inside a handler (C): structured logs, progress, cooperative cancellation.
------------------------------------------------------------------------------
CREATE FUNCTION vq_log(level text, message text, fields jsonb DEFAULT NULL) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_log';
CREATE FUNCTION vq_progress_set_total(total bigint) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_progress_set_total';
CREATE FUNCTION vq_progress_add(succeeded bigint DEFAULT 1, failed bigint DEFAULT 0) RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_progress_add';
CREATE FUNCTION vq_job_cancelled() RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_job_cancelled';

-- sql/schema/registry.sql: queues and handlers, with their configuration (contract overrides,
-- queue grants, vq_configure) and the registry cache every backend keeps of them: the tables,
-- the triggers that invalidate the cache, resolution and backoff, and the functions that
-- configure and register.

-- Named queues with their polling, concurrency and retry-backoff settings.
CREATE TABLE vq.queue (
    name                   text PRIMARY KEY
                           CONSTRAINT queue_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    sleep_delay_ms         integer NOT NULL DEFAULT 5000    CONSTRAINT queue_sleep_delay_ms_positive CHECK (sleep_delay_ms > 0),
    max_concurrent_jobs    integer NOT NULL DEFAULT 5       CONSTRAINT queue_max_concurrent_jobs_positive CHECK (max_concurrent_jobs > 0),
    backoff_strategy       text    NOT NULL DEFAULT 'LINEAR'
                           CONSTRAINT queue_backoff_strategy_known CHECK (backoff_strategy IN ('FIXED', 'LINEAR', 'EXPONENTIAL')),
    backoff_base_delay_ms  integer NOT NULL DEFAULT 30000   CONSTRAINT queue_backoff_base_delay_ms_positive CHECK (backoff_base_delay_ms > 0),
    backoff_max_delay_ms   integer NOT NULL DEFAULT 3600000 CONSTRAINT queue_backoff_max_delay_ms_positive CHECK (backoff_max_delay_ms > 0),
    instances              integer NOT NULL DEFAULT 1       CONSTRAINT queue_instances_positive CHECK (instances > 0),
    paused                 boolean NOT NULL DEFAULT false,
    created_at             timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at             timestamptz NOT NULL DEFAULT pg_catalog.now()
);
INSERT INTO vq.queue (name) VALUES ('default');

-- A restore inserts the default queue's row, which the install script has already created: a COPY
-- or INSERT statement of the row "default" while it exists sets the existing row's settings, pause
-- and timestamps to the inserted ones instead of failing (vq_configure, which inserts with ON
-- CONFLICT, is a function call and goes on as before).
CREATE FUNCTION vq.queue_default_restored() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE vq.queue q
       SET sleep_delay_ms = NEW.sleep_delay_ms, max_concurrent_jobs = NEW.max_concurrent_jobs,
           backoff_strategy = NEW.backoff_strategy, backoff_base_delay_ms = NEW.backoff_base_delay_ms,
           backoff_max_delay_ms = NEW.backoff_max_delay_ms, instances = NEW.instances,
           paused = NEW.paused, created_at = NEW.created_at, updated_at = NEW.updated_at
     WHERE q.name OPERATOR(pg_catalog.=) NEW.name;
    IF FOUND THEN
        RETURN NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER queue_default_restored BEFORE INSERT ON vq.queue
    FOR EACH ROW WHEN (NEW.name OPERATOR(pg_catalog.=) 'default' AND vq.loading_rows())
    EXECUTE FUNCTION vq.queue_default_restored();

-- Registered handlers: a function (by OID and fixed signature) or a NOTIFY channel.
-- queue/priority/max_attempts are the contract defaults; all NULL for a plain handler.
CREATE TABLE vq.handler (
    name           text PRIMARY KEY
                   CONSTRAINT handler_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    kind           text NOT NULL CONSTRAINT handler_kind_known CHECK (kind IN ('function', 'notify')),
    fn             regprocedure,
    takes_context  boolean NOT NULL DEFAULT false,
    channel        text,
    address        text NOT NULL,   -- dispatch address persisted on each job: 'schema.fn(args)' or 'notify:channel'
    queue          text REFERENCES vq.queue (name),
    priority       integer,
    max_attempts   integer CONSTRAINT handler_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    -- most jobs of this (function) handler running at once across the executors (NULL: no limit
    -- beyond the queue's capacity)
    max_running    integer CONSTRAINT handler_max_running_range CHECK (max_running BETWEEN 1 AND 10000),
    -- the idempotency window of its jobs enqueued with a job_id and no unique_for of their own
    -- (NULL: none; see vq_enqueue's unique_for)
    unique_for     interval CONSTRAINT handler_unique_for_positive CHECK (unique_for > interval '0'),
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT handler_target_matches_kind CHECK (
        (kind = 'function' AND fn IS NOT NULL AND channel IS NULL) OR
        (kind = 'notify' AND channel IS NOT NULL AND fn IS NULL)),
    CONSTRAINT handler_max_running_function CHECK (max_running IS NULL OR kind = 'function')
);

-- Per-handler configuration overrides (the "contracts" section of a vq_configure document).
-- A NULL field inherits the handler's default. May name a handler registered later.
CREATE TABLE vq.contract_override (
    handler       text PRIMARY KEY
                  CONSTRAINT contract_override_handler_format CHECK (handler OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    queue         text REFERENCES vq.queue (name),
    priority      integer,
    max_attempts  integer CONSTRAINT contract_override_max_attempts_range CHECK (max_attempts BETWEEN 1 AND 1000),
    updated_at    timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Roles allowed to choose, at enqueue, a queue other than the handler's, a priority above
-- the handler's or max_attempts above the handler's, for jobs that go to this queue: nobody
-- else can jump another team's line or hold its capacity.
CREATE TABLE vq.queue_grant (
    queue       text NOT NULL REFERENCES vq.queue (name) ON DELETE CASCADE,
    grantee     regrole NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (queue, grantee)
);

------------------------------------------------------------------------------
-- Registry cache invalidation: a change to queues, handlers or overrides invalidates
-- the per-backend registry cache of every session at commit. (The other tables the cache
-- holds have the same trigger beside them: producer grants, destinations, interceptors,
-- transition listeners.)
------------------------------------------------------------------------------
CREATE FUNCTION vq.registry_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'vq_registry_changed';

CREATE TRIGGER queue_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.queue
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER handler_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.handler
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER queue_grant_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.queue_grant
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER contract_override_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.contract_override
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

------------------------------------------------------------------------------
-- Resolution and backoff (C).
------------------------------------------------------------------------------
CREATE FUNCTION vq_resolve_target(
    target_id text,
    OUT target_id text, OUT handler_name text, OUT handler_address text,
    OUT queue text, OUT priority integer, OUT max_attempts integer)
RETURNS record
LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'vq_resolve_target';

CREATE FUNCTION vq_supported_target_ids() RETURNS SETOF text
    LANGUAGE c STABLE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_supported_target_ids';

CREATE FUNCTION vq_backoff_delay(strategy text, base_ms integer, max_ms integer, attempt integer)
RETURNS interval
LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE
AS 'MODULE_PATHNAME', 'vq_backoff_delay';

------------------------------------------------------------------------------
-- Configuration: queues, contract overrides, handlers. These functions run as the
-- extension owner with a pinned search_path; EXECUTE is not granted to PUBLIC, so an
-- administrator decides who may change configuration (GRANT EXECUTE ON FUNCTION ...;
-- privileges.sql).
------------------------------------------------------------------------------

-- Every violation of one queue's settings, each naming the queue and the field.
-- field_names gives the spelling to report (SQL argument names or vq_configure's JSON keys).
CREATE FUNCTION vq.queue_violations(
    queue_name text, sleep_delay_ms bigint, max_concurrent_jobs bigint, backoff_strategy text,
    backoff_base_delay_ms bigint, backoff_max_delay_ms bigint, instances bigint,
    field_names text[] DEFAULT ARRAY['sleep_delay_ms', 'max_concurrent_jobs', 'backoff_strategy',
                                     'backoff_base_delay_ms', 'backoff_max_delay_ms', 'instances'])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := '{}';
    nums bigint[] := ARRAY[sleep_delay_ms, max_concurrent_jobs, backoff_base_delay_ms,
                           backoff_max_delay_ms, instances];
    num_fields int[] := ARRAY[1, 2, 4, 5, 6];
BEGIN
    IF queue_name IS NULL OR queue_name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        v := v || format('queue %s: name must match ^[a-zA-Z0-9._-]{1,128}$',
                         coalesce('"' || queue_name || '"', 'NULL'));
        queue_name := coalesce(queue_name, '');
    END IF;
    FOR i IN 1 .. 5 LOOP
        IF nums[i] IS NOT NULL AND (nums[i] <= 0 OR nums[i] > 2147483647) THEN
            v := v || format('queue "%s": %s must be a positive integer, got %s',
                             queue_name, field_names[num_fields[i]], nums[i]);
        END IF;
    END LOOP;
    IF backoff_strategy IS NOT NULL AND upper(backoff_strategy) NOT IN ('FIXED', 'LINEAR', 'EXPONENTIAL') THEN
        v := v || format('queue "%s": %s must be FIXED, LINEAR or EXPONENTIAL, got %s',
                         queue_name, field_names[3], quote_literal(backoff_strategy));
    END IF;
    RETURN v;
END
$$;

-- Raise one error listing every violation (message: the first; detail: all of them).
CREATE FUNCTION vq.raise_violations(violations text[], errcode text, summary text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(cardinality(violations), 0) = 0 THEN
        RETURN;
    END IF;
    IF cardinality(violations) = 1 THEN
        RAISE EXCEPTION USING ERRCODE = errcode, MESSAGE = violations[1];
    END IF;
    RAISE EXCEPTION USING ERRCODE = errcode,
        MESSAGE = format('%s: %s violations: %s', summary, cardinality(violations),
                         array_to_string(violations, '; ')),
        DETAIL = array_to_string(violations, E'\n');
END
$$;

CREATE FUNCTION vq_create_queue(
    name                   text,
    sleep_delay_ms         integer DEFAULT 5000,
    max_concurrent_jobs    integer DEFAULT 5,
    backoff_strategy       text    DEFAULT 'LINEAR',
    backoff_base_delay_ms  integer DEFAULT 30000,
    backoff_max_delay_ms   integer DEFAULT 3600000,
    instances              integer DEFAULT 1)
RETURNS vq.queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q vq.queue;
BEGIN
    PERFORM vq.require_writable('vq_create_queue');
    PERFORM vq.raise_violations(
        vq.queue_violations(name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                            backoff_base_delay_ms, backoff_max_delay_ms, instances),
        'VQ101', 'invalid queue configuration');
    IF EXISTS (SELECT 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) vq_create_queue.name) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ101', MESSAGE = format('queue "%s" already exists', name),
            HINT = 'Use vq_alter_queue() to change it.';
    END IF;
    BEGIN
        INSERT INTO vq.queue AS x (name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                                   backoff_base_delay_ms, backoff_max_delay_ms, instances)
        VALUES (name, coalesce(sleep_delay_ms, 5000), coalesce(max_concurrent_jobs, 5),
                upper(coalesce(backoff_strategy, 'LINEAR')), coalesce(backoff_base_delay_ms, 30000),
                coalesce(backoff_max_delay_ms, 3600000), coalesce(instances, 1))
        RETURNING x.* INTO q;
    EXCEPTION WHEN unique_violation THEN
        -- created concurrently since the check above
        RAISE EXCEPTION USING ERRCODE = 'VQ101', MESSAGE = format('queue "%s" already exists', name),
            HINT = 'Use vq_alter_queue() to change it.';
    END;
    RETURN q;
END
$$;

-- Change only the settings given (NULL keeps the current value).
CREATE FUNCTION vq_alter_queue(
    name                   text,
    sleep_delay_ms         integer DEFAULT NULL,
    max_concurrent_jobs    integer DEFAULT NULL,
    backoff_strategy       text    DEFAULT NULL,
    backoff_base_delay_ms  integer DEFAULT NULL,
    backoff_max_delay_ms   integer DEFAULT NULL,
    instances              integer DEFAULT NULL)
RETURNS vq.queue
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    q vq.queue;
BEGIN
    PERFORM vq.require_writable('vq_alter_queue');
    PERFORM vq.raise_violations(
        vq.queue_violations(name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                            backoff_base_delay_ms, backoff_max_delay_ms, instances),
        'VQ101', 'invalid queue configuration');
    UPDATE vq.queue AS x SET
        sleep_delay_ms        = coalesce(vq_alter_queue.sleep_delay_ms, x.sleep_delay_ms),
        max_concurrent_jobs   = coalesce(vq_alter_queue.max_concurrent_jobs, x.max_concurrent_jobs),
        backoff_strategy      = coalesce(upper(vq_alter_queue.backoff_strategy), x.backoff_strategy),
        backoff_base_delay_ms = coalesce(vq_alter_queue.backoff_base_delay_ms, x.backoff_base_delay_ms),
        backoff_max_delay_ms  = coalesce(vq_alter_queue.backoff_max_delay_ms, x.backoff_max_delay_ms),
        instances             = coalesce(vq_alter_queue.instances, x.instances),
        updated_at            = now()
    WHERE x.name OPERATOR(pg_catalog.=) vq_alter_queue.name
    RETURNING x.* INTO q;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
    RETURN q;
END
$$;

-- Drop a queue nothing refers to any more; the default queue stays.
CREATE FUNCTION vq_drop_queue(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM vq.require_writable('vq_drop_queue');
    IF name OPERATOR(pg_catalog.=) 'default' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ103', MESSAGE = 'queue "default" cannot be dropped';
    END IF;
    -- Serialise against concurrent enqueues and registrations naming this queue.
    PERFORM 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) vq_drop_queue.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
    SELECT count(*) INTO n FROM vq.job j
     WHERE j.queue OPERATOR(pg_catalog.=) vq_drop_queue.name AND j.state IN ('ENQUEUED', 'RUNNING');
    IF n > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ103',
            MESSAGE = format('queue "%s" still holds %s unfinished job(s)', name, n);
    END IF;
    IF EXISTS (SELECT 1 FROM vq.handler h WHERE h.queue OPERATOR(pg_catalog.=) vq_drop_queue.name)
       OR EXISTS (SELECT 1 FROM vq.contract_override o WHERE o.queue OPERATOR(pg_catalog.=) vq_drop_queue.name) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ103',
            MESSAGE = format('queue "%s" is the default queue of a handler or contract override', name);
    END IF;
    DELETE FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) vq_drop_queue.name;
END
$$;

-- Stop claiming from a queue (jobs already running finish), or start again.
CREATE FUNCTION vq_pause_queue(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_pause_queue');
    UPDATE vq.queue x SET paused = true, updated_at = now() WHERE x.name OPERATOR(pg_catalog.=) vq_pause_queue.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
END
$$;

CREATE FUNCTION vq_resume_queue(name text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_resume_queue');
    UPDATE vq.queue x SET paused = false, updated_at = now() WHERE x.name OPERATOR(pg_catalog.=) vq_resume_queue.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', name);
    END IF;
    PERFORM vq.wake_executors();    -- its due jobs run now, not at the next poll
END
$$;

-- Every violation of one contract override.
CREATE FUNCTION vq.override_violations(handler text, queue text, max_attempts bigint,
                                       queue_field text DEFAULT 'queue',
                                       max_attempts_field text DEFAULT 'max_attempts',
                                       new_queues text[] DEFAULT '{}')
RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := '{}';
BEGIN
    IF handler IS NULL OR handler !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        v := v || format('contract %s: handler name must match ^[a-zA-Z0-9._-]{1,128}$',
                         coalesce('"' || handler || '"', 'NULL'));
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000 THEN
        v := v || format('contract "%s": %s must be between 1 and 1000, got %s',
                         handler, max_attempts_field, max_attempts);
    END IF;
    IF queue IS NOT NULL AND NOT queue OPERATOR(pg_catalog.=) ANY (new_queues)
       AND NOT EXISTS (SELECT 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) queue) THEN
        v := v || format('contract "%s": %s "%s" does not exist', handler, queue_field, queue);
    END IF;
    RETURN v;
END
$$;

-- Set the configuration override of a handler (NULL field = inherit the handler default).
CREATE FUNCTION vq_set_contract_override(handler text, queue text DEFAULT NULL,
                                         priority integer DEFAULT NULL, max_attempts integer DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_set_contract_override');
    PERFORM vq.raise_violations(vq.override_violations(handler, queue, max_attempts),
                                'VQ101', 'invalid contract override');
    INSERT INTO vq.contract_override AS o (handler, queue, priority, max_attempts)
    VALUES (handler, queue, priority, max_attempts)
    ON CONFLICT ON CONSTRAINT contract_override_pkey DO UPDATE
       SET queue = excluded.queue, priority = excluded.priority,
           max_attempts = excluded.max_attempts, updated_at = now();
END
$$;

CREATE FUNCTION vq_drop_contract_override(handler text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_drop_contract_override');
    DELETE FROM vq.contract_override o WHERE o.handler OPERATOR(pg_catalog.=) vq_drop_contract_override.handler;
    RETURN FOUND;
END
$$;

-- Apply a configuration document atomically:
-- {"queues": {"<name>": {"sleepDelayMs": ..., ...}}, "contracts": {"<handler>": {"maxAttempts": ..., "queue": ..., "priority": ...}}}
-- Queues named are created or updated (fields omitted keep their value, or the default for a
-- new queue); contracts named replace that handler's override. All violations are reported at
-- once: VQ104 when the document is malformed (not an object, an unknown key, a value of the
-- wrong JSON type), VQ101 when it is well formed and some value is invalid.
CREATE FUNCTION vq_configure(config jsonb) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    qkeys constant text[] := ARRAY['sleepDelayMs', 'maxConcurrentJobs', 'backoffStrategy',
                                   'backoffBaseDelayMs', 'backoffMaxDelayMs', 'instances'];
    ckeys constant text[] := ARRAY['maxAttempts', 'queue', 'priority'];
    v text[] := '{}';
    malformed boolean := false;   -- a violation of the document's shape is among v (VQ104)
    k text;
    q record;
    c record;
    nums bigint[];
    i int;
BEGIN
    PERFORM vq.require_writable('vq_configure');
    IF config IS NULL OR jsonb_typeof(config) <> 'object' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ104', MESSAGE = 'configuration must be a JSON object';
    END IF;
    FOR k IN SELECT jsonb_object_keys(config) LOOP
        IF k NOT IN ('queues', 'contracts') THEN
            v := v || format('unknown top-level key "%s" (expected "queues" and/or "contracts")', k);
        ELSIF jsonb_typeof(config -> k) <> 'object' THEN
            v := v || format('"%s" must be a JSON object', k);
        END IF;
    END LOOP;
    PERFORM vq.raise_violations(v, 'VQ104', 'invalid configuration');

    -- Validate every queue first.
    FOR q IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'queues', '{}')) e LOOP
        IF jsonb_typeof(q.body) <> 'object' THEN
            v := v || format('queue "%s": settings must be a JSON object', q.name);
            malformed := true;
            CONTINUE;
        END IF;
        FOR k IN SELECT jsonb_object_keys(q.body) LOOP
            IF k <> ALL (qkeys) THEN
                v := v || format('queue "%s": unknown field "%s"', q.name, k);
                malformed := true;
            END IF;
        END LOOP;
        nums := ARRAY[]::bigint[];
        FOREACH k IN ARRAY qkeys LOOP
            IF k = 'backoffStrategy' THEN
                nums := nums || NULL::bigint;
                IF q.body ? k AND jsonb_typeof(q.body -> k) <> 'string' THEN
                    v := v || format('queue "%s": backoffStrategy must be a string', q.name);
                    malformed := true;
                END IF;
            ELSIF q.body ? k AND (jsonb_typeof(q.body -> k) <> 'number'
                                  OR (q.body ->> k) !~ '^-?[0-9]{1,18}$') THEN
                v := v || format('queue "%s": %s must be a positive integer, got %s', q.name, k, q.body -> k);
                malformed := malformed OR jsonb_typeof(q.body -> k) <> 'number';
                nums := nums || NULL::bigint;
            ELSE
                nums := nums || (q.body ->> k)::bigint;
            END IF;
        END LOOP;
        v := v || vq.queue_violations(q.name, nums[1], nums[2],
                                      CASE WHEN jsonb_typeof(q.body -> 'backoffStrategy') = 'string'
                                           THEN q.body ->> 'backoffStrategy' END,
                                      nums[4], nums[5], nums[6], qkeys);
    END LOOP;
    -- Validate every contract override; it may name a queue this document creates.
    FOR c IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'contracts', '{}')) e LOOP
        IF jsonb_typeof(c.body) <> 'object' THEN
            v := v || format('contract "%s": settings must be a JSON object', c.name);
            malformed := true;
            CONTINUE;
        END IF;
        FOR k IN SELECT jsonb_object_keys(c.body) LOOP
            IF k <> ALL (ckeys) THEN
                v := v || format('contract "%s": unknown field "%s"', c.name, k);
                malformed := true;
            END IF;
        END LOOP;
        IF c.body ? 'queue' AND jsonb_typeof(c.body -> 'queue') <> 'string' THEN
            v := v || format('contract "%s": queue must be a string', c.name);
            malformed := true;
        END IF;
        FOREACH k IN ARRAY ARRAY['maxAttempts', 'priority'] LOOP
            IF c.body ? k AND (jsonb_typeof(c.body -> k) <> 'number'
                               OR (c.body ->> k) !~ '^-?[0-9]{1,9}$') THEN
                v := v || format('contract "%s": %s must be an integer, got %s', c.name, k, c.body -> k);
                malformed := malformed OR jsonb_typeof(c.body -> k) <> 'number';
            END IF;
        END LOOP;
        v := v || vq.override_violations(
                      c.name,
                      CASE WHEN jsonb_typeof(c.body -> 'queue') = 'string' THEN c.body ->> 'queue' END,
                      CASE WHEN jsonb_typeof(c.body -> 'maxAttempts') = 'number'
                                AND (c.body ->> 'maxAttempts') ~ '^-?[0-9]{1,9}$'
                           THEN (c.body ->> 'maxAttempts')::bigint END,
                      'queue', 'maxAttempts',
                      ARRAY(SELECT jsonb_object_keys(coalesce(config -> 'queues', '{}'))));
    END LOOP;
    -- A malformed document (unknown key, wrong JSON type) is VQ104, invalid values alone VQ101;
    -- either way the error lists every violation.
    PERFORM vq.raise_violations(v, CASE WHEN malformed THEN 'VQ104' ELSE 'VQ101' END, 'invalid configuration');


    -- Apply queues, so contracts below may name queues created by this same call.
    FOR q IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'queues', '{}')) e LOOP
        INSERT INTO vq.queue AS x (name, sleep_delay_ms, max_concurrent_jobs, backoff_strategy,
                                   backoff_base_delay_ms, backoff_max_delay_ms, instances)
        VALUES (q.name,
                coalesce((q.body ->> 'sleepDelayMs')::int, 5000),
                coalesce((q.body ->> 'maxConcurrentJobs')::int, 5),
                upper(coalesce(q.body ->> 'backoffStrategy', 'LINEAR')),
                coalesce((q.body ->> 'backoffBaseDelayMs')::int, 30000),
                coalesce((q.body ->> 'backoffMaxDelayMs')::int, 3600000),
                coalesce((q.body ->> 'instances')::int, 1))
        ON CONFLICT ON CONSTRAINT queue_pkey DO UPDATE SET
            sleep_delay_ms        = coalesce((q.body ->> 'sleepDelayMs')::int, x.sleep_delay_ms),
            max_concurrent_jobs   = coalesce((q.body ->> 'maxConcurrentJobs')::int, x.max_concurrent_jobs),
            backoff_strategy      = coalesce(upper(q.body ->> 'backoffStrategy'), x.backoff_strategy),
            backoff_base_delay_ms = coalesce((q.body ->> 'backoffBaseDelayMs')::int, x.backoff_base_delay_ms),
            backoff_max_delay_ms  = coalesce((q.body ->> 'backoffMaxDelayMs')::int, x.backoff_max_delay_ms),
            instances             = coalesce((q.body ->> 'instances')::int, x.instances),
            updated_at            = now();
    END LOOP;

    FOR c IN SELECT e.key AS name, e.value AS body FROM jsonb_each(coalesce(config -> 'contracts', '{}')) e LOOP
        INSERT INTO vq.contract_override AS o (handler, queue, priority, max_attempts)
        VALUES (c.name, c.body ->> 'queue', (c.body ->> 'priority')::int, (c.body ->> 'maxAttempts')::int)
        ON CONFLICT ON CONSTRAINT contract_override_pkey DO UPDATE
           SET queue = excluded.queue, priority = excluded.priority,
               max_attempts = excluded.max_attempts, updated_at = now();
    END LOOP;
END
$$;

-- Every violation of one handler registration.
CREATE FUNCTION vq.handler_violations(name text, kind text, fn regprocedure, channel text,
                                      queue text, max_attempts bigint, what text DEFAULT NULL,
                                      max_running bigint DEFAULT NULL, unique_for interval DEFAULT NULL)
RETURNS text[]
LANGUAGE plpgsql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v text[] := '{}';
    label text := coalesce(what, format('handler %s', coalesce('"' || name || '"', 'NULL')));
    p record;
BEGIN
    IF name IS NULL OR name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        v := v || format('%s: name must match ^[a-zA-Z0-9._-]{1,128}$', label);
    ELSIF EXISTS (SELECT 1 FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) handler_violations.name) THEN
        v := v || format('%s: name is already registered', label);
    END IF;
    IF kind = 'function' THEN
        IF fn IS NULL THEN
            v := v || format('%s: function is missing', label);
        ELSE
            SELECT pr.prokind, pr.proretset, pr.pronargs, pr.proargtypes[0] AS arg1,
                   pr.proargtypes[1] AS arg2 INTO p
              FROM pg_catalog.pg_proc pr WHERE pr.oid OPERATOR(pg_catalog.=) fn::oid;
            IF NOT FOUND THEN
                v := v || format('%s: function %s does not exist', label, fn::oid);
            ELSIF p.prokind <> 'f' OR p.proretset
                  OR p.arg1 IS DISTINCT FROM 'pg_catalog.jsonb'::regtype::oid
                  OR NOT (p.pronargs = 1 OR (p.pronargs = 2 AND p.arg2 = 'vq.job_context'::regtype::oid)) THEN
                v := v || format('%s: function %s must be a plain non-set-returning function with signature (jsonb) or (jsonb, vq.job_context)',
                                 label, fn);
            END IF;
        END IF;
    ELSE
        IF channel IS NULL OR channel = '' OR octet_length(channel) > 63 THEN
            v := v || format('%s: channel must be 1 to 63 bytes long', label);
        END IF;
    END IF;
    IF max_attempts IS NOT NULL AND max_attempts NOT BETWEEN 1 AND 1000 THEN
        v := v || format('%s: max_attempts must be between 1 and 1000, got %s', label, max_attempts);
    END IF;
    IF max_running IS NOT NULL AND kind <> 'function' THEN
        v := v || format('%s: max_running applies to function handlers only (a NOTIFY consumer decides how many it runs)', label);
    ELSIF max_running IS NOT NULL AND max_running NOT BETWEEN 1 AND 10000 THEN
        v := v || format('%s: max_running must be between 1 and 10000, got %s', label, max_running);
    END IF;
    IF queue IS NOT NULL AND NOT EXISTS (SELECT 1 FROM vq.queue x WHERE x.name OPERATOR(pg_catalog.=) queue) THEN
        v := v || format('%s: queue "%s" does not exist', label, queue);
    END IF;
    IF unique_for IS NOT NULL AND unique_for <= interval '0' THEN
        v := v || format('%s: unique_for must be a positive interval, got %s', label, unique_for);
    END IF;
    RETURN v;
END
$$;

-- Insert one validated handler row.
CREATE FUNCTION vq.insert_handler(name text, kind text, fn regprocedure, channel text,
                                  queue text, priority integer, max_attempts integer,
                                  max_running integer DEFAULT NULL, unique_for interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- With search_path pinned to pg_catalog, fn::text names every other schema explicitly.
    INSERT INTO vq.handler AS h (name, kind, fn, takes_context, channel, address, queue, priority, max_attempts,
                                 max_running, unique_for)
    SELECT insert_handler.name, insert_handler.kind, insert_handler.fn,
           coalesce((SELECT pr.pronargs OPERATOR(pg_catalog.=) 2 FROM pg_catalog.pg_proc pr
                      WHERE pr.oid OPERATOR(pg_catalog.=) insert_handler.fn::oid), false),
           insert_handler.channel,
           CASE insert_handler.kind WHEN 'function' THEN insert_handler.fn::text
                ELSE 'notify:' OPERATOR(pg_catalog.||) insert_handler.channel END,
           insert_handler.queue, insert_handler.priority, insert_handler.max_attempts, insert_handler.max_running,
           insert_handler.unique_for;
EXCEPTION WHEN unique_violation THEN
    -- registered concurrently since it was validated
    RAISE EXCEPTION USING ERRCODE = 'VQ102',
        MESSAGE = format('handler "%s": name is already registered', insert_handler.name);
END
$$;

CREATE FUNCTION vq_register_handler(name text, fn regprocedure, queue text DEFAULT NULL,
                                    priority integer DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                    max_running integer DEFAULT NULL, unique_for interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_register_handler');
    PERFORM vq.raise_violations(vq.handler_violations(name, 'function', fn, NULL, queue, max_attempts,
                                                      NULL, max_running, unique_for),
                                'VQ102', 'handler registration failed');
    PERFORM vq.insert_handler(name, 'function', fn, NULL, queue, priority, max_attempts, max_running, unique_for);
END
$$;

CREATE FUNCTION vq_register_notify_handler(name text, channel text, queue text DEFAULT NULL,
                                           priority integer DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                           unique_for interval DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_register_notify_handler');
    PERFORM vq.raise_violations(vq.handler_violations(name, 'notify', NULL, channel, queue, max_attempts,
                                                      NULL, NULL, unique_for),
                                'VQ102', 'handler registration failed');
    PERFORM vq.insert_handler(name, 'notify', NULL, channel, queue, priority, max_attempts, NULL, unique_for);
END
$$;

-- vq_register_handlers' first step, run as its caller (called from C, not by PUBLIC): the
-- "function" of each element of handlers resolved the way regprocedure input resolves it in
-- the caller's own session (vq_register_handler's fn argument), with caller_search_path (the
-- caller's search_path) and the caller's privileges: one entry per element, {"oid": ...},
-- {"missing": true}, {"invalid": "<why>"}, or null (no "function" string to resolve).
CREATE FUNCTION vq.handler_functions(handlers jsonb, caller_search_path text) RETURNS jsonb
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    resolved jsonb := '[]';
    e jsonb;
    fn regprocedure;
BEGIN
    IF pg_catalog.jsonb_typeof(handlers) IS DISTINCT FROM 'array' THEN
        RETURN resolved;
    END IF;
    FOR e IN SELECT x FROM pg_catalog.jsonb_array_elements(handlers) x LOOP
        IF pg_catalog.jsonb_typeof(e) OPERATOR(pg_catalog.=) 'object'
           AND pg_catalog.jsonb_typeof(e OPERATOR(pg_catalog.->) 'function') OPERATOR(pg_catalog.=) 'string' THEN
            BEGIN
                -- only this lookup sees the caller's path (the function's own SET restores ours)
                PERFORM pg_catalog.set_config('search_path', caller_search_path, true);
                fn := pg_catalog.to_regprocedure(e OPERATOR(pg_catalog.->>) 'function');
                PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
                e := CASE WHEN fn IS NULL THEN '{"missing": true}'::jsonb
                          ELSE pg_catalog.jsonb_build_object('oid', fn::oid) END;
            EXCEPTION WHEN OTHERS THEN
                -- to_regprocedure still raises for malformed signatures and unknown types
                e := pg_catalog.jsonb_build_object('invalid', SQLERRM);
            END;
        ELSE
            e := 'null';
        END IF;
        resolved := resolved OPERATOR(pg_catalog.||) pg_catalog.jsonb_build_array(e);
    END LOOP;
    RETURN resolved;
END
$$;

-- Register a set of handlers at once, or none: every violation in the set is reported in
-- one error. Each element: {"name": ..., "function": "fn(jsonb)" | "channel": ...,
-- "queue": ..., "priority": ..., "maxAttempts": ..., "maxRunning": ..., "uniqueFor": "<interval>"};
-- functions are resolved as regprocedure input does with the caller's search_path
-- (vq.handler_functions, before this runs; functions is its result). Returns the number
-- registered. Run by vq_register_handlers (C) as the extension owner.
CREATE FUNCTION vq.register_handlers(handlers jsonb, functions jsonb) RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    allowed constant text[] := ARRAY['name', 'function', 'channel', 'queue', 'priority', 'maxAttempts', 'maxRunning',
                                     'uniqueFor'];
    v text[] := '{}';
    h record;
    k text;
    label text;
    fn regprocedure;
    r jsonb;
    unique_window interval;
    seen text[] := '{}';
    ok boolean;
    n int := 0;
BEGIN
    PERFORM vq.require_writable('vq_register_handlers');
    IF handlers IS NULL OR jsonb_typeof(handlers) <> 'array' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ102', MESSAGE = 'handlers must be a JSON array of objects';
    END IF;
    FOR h IN SELECT e.value AS body, e.ordinality AS pos FROM jsonb_array_elements(handlers) WITH ORDINALITY e LOOP
        IF jsonb_typeof(h.body) <> 'object' THEN
            v := v || format('element %s: must be a JSON object', h.pos);
            CONTINUE;
        END IF;
        label := format('element %s (handler %s)', h.pos, coalesce('"' || (h.body ->> 'name') || '"', 'NULL'));
        ok := true;
        FOR k IN SELECT jsonb_object_keys(h.body) LOOP
            IF k <> ALL (allowed) THEN
                v := v || format('%s: unknown field "%s"', label, k);
            END IF;
        END LOOP;
        FOREACH k IN ARRAY ARRAY['priority', 'maxAttempts', 'maxRunning'] LOOP
            IF h.body ? k AND (jsonb_typeof(h.body -> k) <> 'number' OR (h.body ->> k) !~ '^-?[0-9]{1,9}$') THEN
                v := v || format('%s: %s must be an integer, got %s', label, k, h.body -> k);
                ok := false;
            END IF;
        END LOOP;
        IF (h.body ? 'function') = (h.body ? 'channel') THEN
            v := v || format('%s: exactly one of "function" and "channel" is required', label);
            CONTINUE;
        END IF;
        fn := NULL;
        IF h.body ? 'function' THEN
            r := functions -> (h.pos::int - 1);
            IF jsonb_typeof(h.body -> 'function') <> 'string' THEN
                v := v || format('%s: function must be a string such as "schema.fn(jsonb)"', label);
            ELSIF r ? 'oid' THEN
                fn := (r ->> 'oid')::oid;
            ELSIF r ? 'invalid' THEN
                v := v || format('%s: function %s is not a valid function signature (%s)',
                                 label, h.body ->> 'function', r ->> 'invalid');
            ELSE
                v := v || format('%s: function %s does not exist', label, h.body ->> 'function');
            END IF;
        END IF;
        IF (h.body ->> 'name') = ANY (seen) THEN
            v := v || format('%s: name appears more than once in this set', label);
        END IF;
        seen := seen || (h.body ->> 'name');
        IF h.body ? 'channel' AND jsonb_typeof(h.body -> 'channel') <> 'string' THEN
            v := v || format('%s: channel must be a string', label);
        END IF;
        IF h.body ? 'queue' AND jsonb_typeof(h.body -> 'queue') <> 'string' THEN
            v := v || format('%s: queue must be a string', label);
        END IF;
        unique_window := NULL;
        IF h.body ? 'uniqueFor' THEN
            BEGIN
                unique_window := CASE WHEN jsonb_typeof(h.body -> 'uniqueFor') = 'string'
                                      THEN (h.body ->> 'uniqueFor')::interval END;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
                unique_window := NULL;
            END;
            IF unique_window IS NULL THEN
                v := v || format('%s: uniqueFor must be an interval such as "10 minutes", got %s',
                                 label, h.body -> 'uniqueFor');
            END IF;
        END IF;
        -- a missing or malformed function was reported above; do not report it twice
        v := v || pg_catalog.array_remove(
                      vq.handler_violations(h.body ->> 'name',
                                            CASE WHEN h.body ? 'function' THEN 'function' ELSE 'notify' END,
                                            fn, h.body ->> 'channel', h.body ->> 'queue',
                                            CASE WHEN ok THEN (h.body ->> 'maxAttempts')::bigint END, label,
                                            CASE WHEN ok THEN (h.body ->> 'maxRunning')::bigint END, unique_window),
                      format('%s: function is missing', label));
    END LOOP;
    PERFORM vq.raise_violations(v, 'VQ102', 'handler registration failed');

    FOR h IN SELECT e.value AS body, e.ordinality AS pos FROM jsonb_array_elements(handlers) WITH ORDINALITY e LOOP
        PERFORM vq.insert_handler(h.body ->> 'name',
                                  CASE WHEN h.body ? 'function' THEN 'function' ELSE 'notify' END,
                                  ((functions -> (h.pos::int - 1)) ->> 'oid')::oid::regprocedure, h.body ->> 'channel',
                                  h.body ->> 'queue', (h.body ->> 'priority')::int, (h.body ->> 'maxAttempts')::int,
                                  (h.body ->> 'maxRunning')::int, (h.body ->> 'uniqueFor')::interval);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- Resolves the functions as the caller (vq.handler_functions), then runs vq.register_handlers
-- as the extension owner.
CREATE FUNCTION vq_register_handlers(handlers jsonb) RETURNS integer
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_register_handlers';

-- Remove a handler. Jobs already enqueued for it stay and still run: each runs the function
-- (by OID) or is announced on the channel recorded when it was enqueued, whatever is
-- registered since. New enqueues for the name fail until it is registered again. Its consumer
-- and producer grants are deleted with it (foreign keys ON DELETE CASCADE): a handler
-- registered again under the name, even in the same transaction, has none until they are
-- given again. Returns false when no such handler was registered.
CREATE FUNCTION vq_unregister_handler(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_handler');
    DELETE FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) vq_unregister_handler.name;
    RETURN FOUND;
END
$$;

-- Let a role choose this queue, or a priority / max_attempts above the handler's, at enqueue.
CREATE FUNCTION vq_grant_queue(queue text, grantee regrole) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_grant_queue');
    IF NOT EXISTS (SELECT 1 FROM vq.queue q WHERE q.name OPERATOR(pg_catalog.=) vq_grant_queue.queue) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ004', MESSAGE = format('queue "%s" does not exist', queue);
    END IF;
    IF grantee IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008', MESSAGE = 'grantee must not be null';
    END IF;
    INSERT INTO vq.queue_grant (queue, grantee) VALUES (queue, grantee) ON CONFLICT DO NOTHING;
END
$$;

CREATE FUNCTION vq_revoke_queue(queue text, grantee regrole) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_revoke_queue');
    DELETE FROM vq.queue_grant g
     WHERE g.queue OPERATOR(pg_catalog.=) vq_revoke_queue.queue
       AND g.grantee OPERATOR(pg_catalog.=) vq_revoke_queue.grantee;
    RETURN FOUND;
END
$$;

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

-- sql/schema/consumers.sql: the external consumers of NOTIFY handlers: who may consume and
-- produce their jobs (consumer and producer grants), and the calls a consumer makes.

-- Roles allowed to consume (pull, read and reply to) the jobs of a NOTIFY handler, besides
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
-- External consumers of NOTIFY handlers (C). A consumer may act on a job when it is a
-- member of the job's enqueuing role or of a role granted with vq_grant_consumer().
------------------------------------------------------------------------------
CREATE FUNCTION vq_complete(execution_id uuid, attempt integer DEFAULT NULL) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_complete';
COMMENT ON FUNCTION vq_complete(uuid, integer)
    IS 'reply for a NOTIFY job: done; false (with a WARNING saying why) when the reply is ignored';
CREATE FUNCTION vq_fail(execution_id uuid, error text, attempt integer DEFAULT NULL) RETURNS boolean
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_fail';
COMMENT ON FUNCTION vq_fail(uuid, text, integer)
    IS 'reply for a NOTIFY job: failed (retry, backoff, dead letter as for function handlers)';
CREATE FUNCTION vq_pull(handler text, max_jobs integer DEFAULT 1)
RETURNS TABLE (execution_id uuid, job_id text, handler text, attempt integer, payload jsonb,
               metadata jsonb, scheduled_at timestamptz, cancel_requested boolean)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_pull';
COMMENT ON FUNCTION vq_pull(text, integer)
    IS 'take announced jobs of a NOTIFY handler that no consumer took yet (also the catch-up after downtime)';
CREATE FUNCTION vq_take(execution_id uuid, attempt integer DEFAULT NULL, handler text DEFAULT NULL)
RETURNS TABLE (execution_id uuid, job_id text, handler text, attempt integer, payload jsonb,
               metadata jsonb, scheduled_at timestamptz, cancel_requested boolean)
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_take';
COMMENT ON FUNCTION vq_take(uuid, integer, text)
    IS 'take the announced NOTIFY job a notification named, if it is of that handler (no row: taken by another consumer, answered, timed out, another handler''s, or not yours)';
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

-- sql/schema/outbox.sql: the transactional outbox: its rows, the destination types a relay
-- delivers to, and the functions that publish and register.

-- Transactional outbox: rows written in the business transaction, relayed after commit.
CREATE TABLE vq.outbox (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination_type  text NOT NULL,
    destination       text NOT NULL,
    payload           jsonb,
    headers           jsonb NOT NULL DEFAULT '{}',
    metadata          jsonb NOT NULL DEFAULT '{}',
    scheduled_at      timestamptz,
    status            text NOT NULL DEFAULT 'PENDING'
                      CONSTRAINT outbox_status_known CHECK (status IN ('PENDING', 'PUBLISHED', 'FAILED')),
    attempts          integer NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    last_error        text,
    published_by      regrole NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at        timestamptz NOT NULL DEFAULT pg_catalog.now(),
    published_at      timestamptz
);
-- The relay's claim paths: rows due at publication in publication order (scanned from the
-- relay's position), and the timed ones (a scheduled_at, or a retry time) in due order; and
-- the retention of published rows.
CREATE INDEX outbox_pending_idx ON vq.outbox (id)
    WHERE status = 'PENDING' AND scheduled_at IS NULL AND next_attempt_at IS NULL;
CREATE INDEX outbox_timed_idx ON vq.outbox (coalesce(next_attempt_at, scheduled_at), id)
    WHERE status = 'PENDING' AND (scheduled_at IS NOT NULL OR next_attempt_at IS NOT NULL);
CREATE INDEX outbox_published_idx ON vq.outbox (published_at) WHERE status = 'PUBLISHED';
CREATE INDEX outbox_failed_idx ON vq.outbox (updated_at) WHERE status = 'FAILED';

-- What a destination function returns to the outbox relay.
CREATE TYPE vq.publish_status AS ENUM ('SUCCESS', 'RETRYABLE', 'PERMANENT', 'UNRESOLVABLE');
CREATE TYPE vq.publish_result AS (status vq.publish_status, message text);

-- User-registered outbox destination types, each delivered by a SQL function
-- fn(destination text, payload jsonb, headers jsonb, metadata jsonb) RETURNS vq.publish_result,
-- run as the role that published the row.
CREATE TABLE vq.destination (
    type           text PRIMARY KEY
                   CONSTRAINT destination_type_format CHECK (type OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'
                                                         AND type NOT IN ('DELAYED_JOB', 'NOTIFY')),
    fn             regprocedure NOT NULL,
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now()
);

-- Held in the registry cache: a change invalidates it (vq.registry_changed, registry.sql).
CREATE TRIGGER destination_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.destination
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

------------------------------------------------------------------------------
-- Transactional outbox (C). Rows join the caller's transaction; the relay in the
-- background workers delivers them after commit.
------------------------------------------------------------------------------
CREATE FUNCTION vq_outbox_publish(target text, payload jsonb, scheduled_at timestamptz DEFAULT NULL,
                                  headers jsonb DEFAULT '{}')
RETURNS bigint
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_outbox_publish';
COMMENT ON FUNCTION vq_outbox_publish(text, jsonb, timestamptz, jsonb)
    IS 'record a delayed job to enqueue after commit; snapshots its effective settings now; returns the outbox id';
CREATE FUNCTION vq_outbox_publish_to(destination_type text, destination text, payload jsonb,
                                     scheduled_at timestamptz DEFAULT NULL, headers jsonb DEFAULT '{}')
RETURNS bigint
    LANGUAGE c VOLATILE PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_outbox_publish_to';
COMMENT ON FUNCTION vq_outbox_publish_to(text, text, jsonb, timestamptz, jsonb)
    IS 'record a message for a NOTIFY channel or a registered destination type; returns the outbox id';

-- Register a destination type delivered by fn(destination text, payload jsonb, headers jsonb,
-- metadata jsonb) RETURNS vq.publish_result.
CREATE FUNCTION vq_register_destination(type text, fn regprocedure) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    PERFORM vq.require_writable('vq_register_destination');
    IF fn IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ105', MESSAGE = 'destination function must not be null';
    END IF;
    IF type IS NULL OR type !~ '^[a-zA-Z0-9._-]{1,128}$' OR type IN ('DELAYED_JOB', 'NOTIFY') THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ105',
            MESSAGE = format('destination type %s: must match ^[a-zA-Z0-9._-]{1,128}$ and not be DELAYED_JOB or NOTIFY',
                             coalesce('"' || type || '"', 'NULL'));
    END IF;
    SELECT pr.prokind, pr.proretset, pr.pronargs, pr.proargtypes::oid[] AS args, pr.prorettype INTO p
      FROM pg_catalog.pg_proc pr WHERE pr.oid OPERATOR(pg_catalog.=) fn::oid;
    IF NOT coalesce(p.prokind = 'f' AND NOT p.proretset AND p.pronargs = 4
                    AND p.prorettype = 'vq.publish_result'::regtype
                    AND p.args[0] = 'pg_catalog.text'::regtype AND p.args[1] = 'pg_catalog.jsonb'::regtype
                    AND p.args[2] = 'pg_catalog.jsonb'::regtype AND p.args[3] = 'pg_catalog.jsonb'::regtype,
                    false) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ105',
            MESSAGE = format('destination type "%s": function %s must be (text, jsonb, jsonb, jsonb) RETURNS vq.publish_result', type, fn);
    END IF;
    INSERT INTO vq.destination (type, fn) VALUES (type, fn)
    ON CONFLICT ON CONSTRAINT destination_pkey DO UPDATE SET fn = excluded.fn, registered_at = now();
END
$$;

CREATE FUNCTION vq_unregister_destination(type text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_destination');
    DELETE FROM vq.destination d WHERE d.type OPERATOR(pg_catalog.=) vq_unregister_destination.type;
    RETURN FOUND;
END
$$;

-- sql/schema/callbacks.sql: administrators' callbacks: interceptors around every dispatch,
-- transition listeners (and the row triggers that call them), the callbacks queued for an
-- executor (vq.callback_event), and the functions that register them.

-- Interceptors (registered by an administrator): functions called around every dispatch of
-- every job, function and NOTIFY handlers alike, in (position, name) order, each as the owner
-- of its function. on_dispatch(vq.job_context) before the handler runs or the job is announced;
-- on_complete(vq.job_context, outcome text, error text) when the handler ended or the reply
-- came, before the outcome is written.
CREATE TABLE vq.interceptor (
    name           text PRIMARY KEY
                   CONSTRAINT interceptor_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    on_dispatch    regprocedure,
    on_complete    regprocedure,
    position       integer NOT NULL DEFAULT 0,
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT interceptor_has_function CHECK (on_dispatch IS NOT NULL OR on_complete IS NOT NULL)
);

-- Transition listeners (registered by an administrator): fn(vq.job_transition, vq.job) called
-- in the transaction of every transition it subscribes to, as the owner of its function; or,
-- with a channel instead of a function, a NOTIFY naming the transition.
CREATE TABLE vq.transition_listener (
    name           text PRIMARY KEY
                   CONSTRAINT transition_listener_name_format CHECK (name OPERATOR(pg_catalog.~) '^[a-zA-Z0-9._-]{1,128}$'),
    fn             regprocedure,
    channel        text,
    kinds          text[],      -- transition kinds, or DEAD_LETTER (any transition into it); NULL: all
    queues         text[],      -- NULL: all
    handlers       text[],      -- NULL: all
    registered_at  timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT transition_listener_one_target CHECK ((fn IS NULL) <> (channel IS NULL))
);

-- Held in the registry cache: a change invalidates it (vq.registry_changed, registry.sql).
CREATE TRIGGER interceptor_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.interceptor
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();
CREATE TRIGGER transition_listener_registry_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON vq.transition_listener
    FOR EACH STATEMENT EXECUTE FUNCTION vq.registry_changed();

-- Administrators' callbacks queued for an executor. A transition or a consumer's reply
-- recorded where no administrator code may run (a client's session: vq_cancel, vq_complete,
-- vq_fail, vq_redrive, ...; a handler's own code) calls no transition listener or
-- interceptor there: it queues one row here, in its own transaction, with the names of the
-- callbacks subscribed to it and what they receive as it was then; an executor calls them
-- after the commit and deletes the row in the transaction that calls them. Its rows carry
-- other roles' jobs: no role but a superuser sees them (readable under row security only so
-- that pg_dump by another role reads it, empty).
CREATE TABLE vq.callback_event (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    execution_id    uuid NOT NULL,
    attempt_number  integer NOT NULL,
    kind            text NOT NULL CONSTRAINT callback_event_kind_known
                    CHECK (kind IN ('listener', 'on_dispatch', 'on_complete')),
    callbacks       text[] NOT NULL,    -- listener or interceptor names, in the order they are called
    transition      vq.job_transition,  -- listener: the transition, and the job row after it
    job             vq.job,
    context         vq.job_context,     -- interceptor: what it receives
    outcome         text,
    error           text,
    queued_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT callback_event_arguments CHECK (CASE kind
        WHEN 'listener' THEN (transition).execution_id IS NOT NULL AND (job).execution_id IS NOT NULL
        ELSE (context).execution_id IS NOT NULL END)
);

-- Transition listeners are called from these row triggers; their WHEN clause costs a cached
-- flag per transition while no listener is registered. A stored transition fires the first;
-- a job that completed without one (ENQUEUED -> COMPLETED, implied by its finished row) the second.
-- A restore's COPY or INSERT of history rows fires neither: it changes no state (and what the
-- listeners wrote is restored with their own tables).
CREATE FUNCTION vq.transition_listeners_exist() RETURNS boolean
    LANGUAGE c STABLE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_transition_listeners_exist';
CREATE FUNCTION vq.transition_recorded() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'vq_transition_recorded';
CREATE FUNCTION vq.job_finished_recorded() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'vq_job_finished_recorded';
CREATE TRIGGER transition_listeners AFTER INSERT ON vq.job_transition_data
    FOR EACH ROW WHEN (vq.transition_listeners_exist() AND NOT vq.loading_rows())
    EXECUTE FUNCTION vq.transition_recorded();
CREATE TRIGGER completion_listeners AFTER INSERT ON vq.job_finished
    FOR EACH ROW WHEN (NEW.state OPERATOR(pg_catalog.=) 'COMPLETED'::vq.job_state AND vq.transition_listeners_exist()
                       AND NOT vq.loading_rows())
    EXECUTE FUNCTION vq.job_finished_recorded();

-- Interceptors and transition listeners (administrators only; see the tables above).
CREATE FUNCTION vq_register_interceptor(name text, on_dispatch regprocedure DEFAULT NULL,
                                        on_complete regprocedure DEFAULT NULL, "position" integer DEFAULT 0)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_register_interceptor');
    IF name IS NULL OR name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('interceptor name %s: must match ^[a-zA-Z0-9._-]{1,128}$', coalesce('"' || name || '"', 'NULL'));
    END IF;
    IF on_dispatch IS NULL AND on_complete IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('interceptor "%s": give on_dispatch, on_complete or both', name);
    END IF;
    IF "position" IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106', MESSAGE = format('interceptor "%s": position must not be null', name);
    END IF;
    PERFORM vq.check_callback(format('interceptor "%s": on_dispatch', name), on_dispatch,
                              ARRAY['vq.job_context'::regtype]);
    PERFORM vq.check_callback(format('interceptor "%s": on_complete', name), on_complete,
                              ARRAY['vq.job_context'::regtype, 'pg_catalog.text'::regtype, 'pg_catalog.text'::regtype]);
    INSERT INTO vq.interceptor (name, on_dispatch, on_complete, position)
    VALUES (name, on_dispatch, on_complete, "position")
    ON CONFLICT ON CONSTRAINT interceptor_pkey DO UPDATE
       SET on_dispatch = excluded.on_dispatch, on_complete = excluded.on_complete,
           position = excluded.position, registered_at = now();
END
$$;

CREATE FUNCTION vq_unregister_interceptor(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_interceptor');
    DELETE FROM vq.interceptor i WHERE i.name OPERATOR(pg_catalog.=) vq_unregister_interceptor.name;
    RETURN FOUND;
END
$$;

CREATE FUNCTION vq_register_transition_listener(name text, fn regprocedure DEFAULT NULL,
                                                kinds text[] DEFAULT NULL, queues text[] DEFAULT NULL,
                                                handlers text[] DEFAULT NULL, channel text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad text;
BEGIN
    PERFORM vq.require_writable('vq_register_transition_listener');
    IF name IS NULL OR name !~ '^[a-zA-Z0-9._-]{1,128}$' THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener name %s: must match ^[a-zA-Z0-9._-]{1,128}$',
                             coalesce('"' || name || '"', 'NULL'));
    END IF;
    IF (fn IS NULL) = (channel IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener "%s": give either a function or a channel', name);
    END IF;
    IF channel IS NOT NULL AND (channel = '' OR octet_length(channel) >= 64) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener "%s": channel must be 1 to 63 bytes', name);
    END IF;
    SELECT k INTO bad FROM unnest(kinds) k
     WHERE k IS NULL OR k NOT IN ('CLAIMED', 'COMPLETED', 'FAILED', 'ABANDONED', 'INTERRUPTED', 'CANCELLED',
                                  'REDRIVEN', 'DEAD_LETTER') LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('transition listener "%s": unknown kind %s (known: CLAIMED, COMPLETED, FAILED, ABANDONED, INTERRUPTED, CANCELLED, REDRIVEN, DEAD_LETTER)',
                             name, coalesce('"' || bad || '"', 'NULL'));
    END IF;
    PERFORM vq.check_callback(format('transition listener "%s"', name), fn,
                              ARRAY['vq.job_transition'::regtype, 'vq.job'::regtype]);
    INSERT INTO vq.transition_listener (name, fn, channel, kinds, queues, handlers)
    VALUES (name, fn, channel, kinds, queues, handlers)
    ON CONFLICT ON CONSTRAINT transition_listener_pkey DO UPDATE
       SET fn = excluded.fn, channel = excluded.channel, kinds = excluded.kinds, queues = excluded.queues,
           handlers = excluded.handlers, registered_at = now();
END
$$;

CREATE FUNCTION vq_unregister_transition_listener(name text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_unregister_transition_listener');
    DELETE FROM vq.transition_listener l WHERE l.name OPERATOR(pg_catalog.=) vq_unregister_transition_listener.name;
    RETURN FOUND;
END
$$;

-- A callback function (NULL: none) must be a plain function taking exactly these argument types.
CREATE FUNCTION vq.check_callback(what text, fn regprocedure, args regtype[]) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    IF fn IS NULL THEN
        RETURN;
    END IF;
    SELECT pr.prokind, pr.proretset, ARRAY(SELECT pg_catalog.unnest(pr.proargtypes)) AS argtypes INTO p
      FROM pg_catalog.pg_proc pr WHERE pr.oid OPERATOR(pg_catalog.=) fn::oid;
    IF NOT coalesce(p.prokind = 'f' AND NOT p.proretset AND p.argtypes = args::oid[], false) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ106',
            MESSAGE = format('%s: function %s must take (%s) and return one value', what, fn,
                             array_to_string(args, ', '));
    END IF;
END
$$;

-- sql/schema/operations.sql: what operators and monitoring call: cancel, re-drive dead letters,
-- what the executors run now, counts and metrics, handing a role's jobs to another.

------------------------------------------------------------------------------
-- Cancel, and what runs now (C).
------------------------------------------------------------------------------
-- Cancel an enqueued job, or ask a running one to stop. Returns the resulting state.
CREATE FUNCTION vq_cancel(execution_id uuid) RETURNS text
    LANGUAGE c VOLATILE STRICT PARALLEL UNSAFE AS 'MODULE_PATHNAME', 'vq_cancel';

-- What the executors of this database are running now (shared memory).
CREATE FUNCTION vq.running_jobs_now(
    OUT pid integer, OUT execution_id uuid, OUT handler text, OUT attempt_number integer,
    OUT started_at timestamptz, OUT progress_total bigint, OUT progress_succeeded bigint,
    OUT progress_failed bigint, OUT cancel_requested boolean)
RETURNS SETOF record
LANGUAGE c VOLATILE PARALLEL RESTRICTED AS 'MODULE_PATHNAME', 'vq_running_jobs';

------------------------------------------------------------------------------
-- Re-drive dead letters (not granted to PUBLIC).
------------------------------------------------------------------------------
-- Re-enqueue dead-lettered jobs with fresh attempts (one REDRIVEN transition each): one job,
-- or every dead letter matching the filters (NULL = any). A job whose job_id an unfinished job
-- holds meanwhile is left dead-lettered. Returns the number re-enqueued.
CREATE FUNCTION vq_redrive(execution_id uuid) RETURNS integer
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT vq.redrive(ARRAY(SELECT j.execution_id FROM vq.job j
                             WHERE j.execution_id OPERATOR(pg_catalog.=) vq_redrive.execution_id
                               AND j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state));
$$;

-- An untyped literal resolves to this form, not the one above: vq_redrive('<an execution id>')
-- names a handler that cannot exist, and is refused instead of redriving nothing.
CREATE FUNCTION vq_redrive(handler text DEFAULT NULL, queue text DEFAULT NULL,
                           finished_after timestamptz DEFAULT NULL) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM vq.require_writable('vq_redrive');
    IF handler OPERATOR(pg_catalog.~*) '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
       AND NOT EXISTS (SELECT FROM vq.handler h WHERE h.name OPERATOR(pg_catalog.=) vq_redrive.handler) THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008',
            MESSAGE = pg_catalog.format('vq_redrive: %L is an execution id, not a handler name', handler),
            HINT = pg_catalog.format('To redrive that job, pass a uuid: vq_redrive(%L::uuid).', handler);
    END IF;
    RETURN vq.redrive(ARRAY(SELECT j.execution_id FROM vq.job j
                             WHERE j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state
                               AND (vq_redrive.handler IS NULL OR j.handler OPERATOR(pg_catalog.=) vq_redrive.handler)
                               AND (vq_redrive.queue IS NULL OR j.queue OPERATOR(pg_catalog.=) vq_redrive.queue)
                               AND (vq_redrive.finished_after IS NULL
                                    OR j.finished_at OPERATOR(pg_catalog.>=) vq_redrive.finished_after)));
END
$$;

CREATE FUNCTION vq.redrive(ids uuid[]) RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    id uuid;
    n integer := 0;
    violated text;
BEGIN
    PERFORM vq.require_writable('vq_redrive');
    FOREACH id IN ARRAY coalesce(ids, '{}') LOOP
        BEGIN
            -- moved back to vq.job_active (DELETE + INSERT, as the workers move jobs)
            WITH d AS (
                DELETE FROM vq.job_finished j
                 WHERE j.execution_id OPERATOR(pg_catalog.=) id
                   AND j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state
                RETURNING j.*),
            r AS (
                INSERT INTO vq.job_active
                SELECT d.execution_id, 'ENQUEUED', d.priority, 0, d.max_attempts, now(), d.created_at,
                       now(), d.enqueued_by, d.queue, d.job_id, d.handler, d.handler_address, d.handler_function, d.payload,
                       d.metadata, d.started_at, NULL, NULL, NULL, NULL, false, d.last_error,
                       d.progress_total, d.progress_succeeded, d.progress_failed
                  FROM d
                RETURNING execution_id)
            INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state)
            SELECT r.execution_id, 0, 'REDRIVEN', 'DEAD_LETTER', 'ENQUEUED' FROM r;
            IF FOUND THEN
                n := n + 1;
            END IF;
        EXCEPTION WHEN unique_violation THEN
            GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
            IF violated IS DISTINCT FROM 'job_active_job_id_key' THEN
                RAISE;      -- not the case below: never swallowed
            END IF;
            -- an unfinished job of its role holds its job_id now: leave this one dead-lettered
        END;
    END LOOP;
    IF n > 0 THEN
        PERFORM vq.wake_executors(true);
    END IF;
    RETURN n;
END
$$;

------------------------------------------------------------------------------
-- Counts for monitoring. Rows of vq.job and vq.outbox (payloads, metadata, errors) are visible
-- per role; their counts are visible to every job to pg_monitor members and to roles an
-- administrator grants EXECUTE on vq.all_job_counts() / vq.all_outbox_counts(), and to
-- everyone else over the rows they may see. Every count says which it is (scope 'all' or
-- 'own'), so that zeros are never silently partial.
------------------------------------------------------------------------------
-- Per queue (every queue of vq.queue): its jobs by state, when its oldest due job was due and
-- its completions of the last minute, over the jobs of vq.job the caller may see. One scan of
-- vq.job; counts only (count(*), not count(j.*): no row is formed for them).
CREATE FUNCTION vq.visible_job_counts(
    OUT queue text, OUT paused boolean, OUT due bigint, OUT scheduled bigint, OUT running bigint,
    OUT completed bigint, OUT dead_letter bigint, OUT cancelled bigint,
    OUT oldest_due_at timestamptz, OUT completed_last_minute bigint)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.name, q.paused,
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'ENQUEUED' AND j.scheduled_at OPERATOR(pg_catalog.<=) pg_catalog.now()),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'ENQUEUED' AND j.scheduled_at OPERATOR(pg_catalog.>) pg_catalog.now()),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'RUNNING'),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'COMPLETED'),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'DEAD_LETTER'),
           count(*) FILTER (WHERE j.state OPERATOR(pg_catalog.=) 'CANCELLED'),
           -- (finite times only: the API refuses infinite ones, and one written directly must not break the counts)
           pg_catalog.min(j.scheduled_at) FILTER (
               WHERE j.state OPERATOR(pg_catalog.=) 'ENQUEUED' AND j.scheduled_at OPERATOR(pg_catalog.<=) pg_catalog.now()
                 AND pg_catalog.isfinite(j.scheduled_at)),
           count(*) FILTER (WHERE j.finished_at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) interval '1 minute')
                              AND j.state OPERATOR(pg_catalog.=) 'COMPLETED')
      FROM vq.queue q
      LEFT JOIN vq.job j ON j.queue OPERATOR(pg_catalog.=) q.name
     GROUP BY q.name, q.paused
$$;

-- The same over every job: as the extension owner, whom row security does not filter.
CREATE FUNCTION vq.all_job_counts(
    OUT queue text, OUT paused boolean, OUT due bigint, OUT scheduled bigint, OUT running bigint,
    OUT completed bigint, OUT dead_letter bigint, OUT cancelled bigint,
    OUT oldest_due_at timestamptz, OUT completed_last_minute bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM vq.visible_job_counts() $$;

-- Outbox rows by status: those the caller may see, and (as the owner) all of them.
CREATE FUNCTION vq.visible_outbox_counts(OUT status text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$ SELECT o.status, count(*) FROM vq.outbox o GROUP BY o.status $$;

CREATE FUNCTION vq.all_outbox_counts(OUT status text, OUT n bigint) RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM vq.visible_outbox_counts() $$;

-- What the caller may count: every job with EXECUTE on vq.all_job_counts() (scope 'all'),
-- else the jobs it may see (scope 'own'). Decided here, as the caller: a plain query naming
-- both functions would need EXECUTE on both.
CREATE FUNCTION vq.job_counts(
    OUT queue text, OUT paused boolean, OUT due bigint, OUT scheduled bigint, OUT running bigint,
    OUT completed bigint, OUT dead_letter bigint, OUT cancelled bigint,
    OUT oldest_due_at timestamptz, OUT completed_last_minute bigint, OUT scope text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.has_function_privilege('vq.all_job_counts()', 'EXECUTE') THEN
        RETURN QUERY SELECT c.*, 'all'::text FROM vq.all_job_counts() c;
    ELSE
        RETURN QUERY SELECT c.*, 'own'::text FROM vq.visible_job_counts() c;
    END IF;
END
$$;

-- The same for outbox rows (EXECUTE on vq.all_outbox_counts()).
CREATE FUNCTION vq.outbox_counts(OUT status text, OUT n bigint, OUT scope text) RETURNS SETOF record
LANGUAGE plpgsql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_catalog.has_function_privilege('vq.all_outbox_counts()', 'EXECUTE') THEN
        RETURN QUERY SELECT c.*, 'all'::text FROM vq.all_outbox_counts() c;
    ELSE
        RETURN QUERY SELECT c.*, 'own'::text FROM vq.visible_outbox_counts() c;
    END IF;
END
$$;

-- Prometheus-style metric lines, each labelled with the scope of its count (see vq.job_counts).
-- vq.job is scanned once (the CTE is evaluated once).
CREATE FUNCTION vq_metrics() RETURNS SETOF text
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET search_path = pg_catalog, pg_temp
AS $$
    WITH s AS MATERIALIZED (SELECT * FROM vq.job_counts())
    SELECT format('vq_jobs{queue="%s",state="%s",scope="%s"} %s', s.queue, st.state, s.scope, st.n)
      FROM s,
           LATERAL (VALUES ('due', s.due), ('scheduled', s.scheduled), ('running', s.running),
                           ('completed', s.completed), ('dead_letter', s.dead_letter),
                           ('cancelled', s.cancelled)) AS st(state, n)
    UNION ALL
    SELECT format('vq_oldest_due_seconds{queue="%s",scope="%s"} %s', s.queue, s.scope,
                  coalesce(round(extract(epoch FROM pg_catalog.now() OPERATOR(pg_catalog.-) s.oldest_due_at)::numeric, 3), 0))
      FROM s
    UNION ALL
    SELECT format('vq_completed_last_minute{queue="%s",scope="%s"} %s', s.queue, s.scope, s.completed_last_minute)
      FROM s
    UNION ALL
    SELECT format('vq_outbox_rows{status="%s",scope="%s"} %s', o.status, o.scope, o.n)
      FROM vq.outbox_counts() o;
$$;

------------------------------------------------------------------------------
-- Reassign a role's jobs (not granted to PUBLIC).
------------------------------------------------------------------------------
-- Raise VQ201 when to_role holds an unfinished job with the job_id of one of from_role's
-- (vq_reassign_jobs would give it two), naming how many ids and some of them; or, with
-- must_raise, 40001 when none collides any more (a concurrent change got in the way).
CREATE FUNCTION vq.raise_job_id_conflict(from_role regrole, to_role regrole, must_raise boolean) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    n bigint;
    ids text[];
BEGIN
    SELECT count(*), (array_agg(pg_catalog.quote_literal(f.job_id) ORDER BY f.job_id COLLATE "C"))[1:10] INTO n, ids
      FROM vq.job_active f
      JOIN vq.job_active t ON t.job_id OPERATOR(pg_catalog.=) f.job_id
                          AND t.enqueued_by OPERATOR(pg_catalog.=) to_role
     WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role;
    IF n > 0 THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ201',
            MESSAGE = format('vq_reassign_jobs: %s job_id(s) of role %s are also held by unfinished jobs of role %s',
                             n, from_role, to_role),
            DETAIL = format('job_id %s%s', array_to_string(ids, ', '), CASE WHEN n > 10 THEN ', ...' ELSE '' END),
            HINT = 'Nothing was reassigned: a role holds each job_id once among its unfinished jobs. Cancel '
                   'one job of each pair (vq_cancel), or let it finish, then call vq_reassign_jobs again.';
    END IF;
    IF must_raise THEN
        RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
            MESSAGE = format('vq_reassign_jobs: jobs or job_id windows of role %s changed meanwhile', to_role),
            HINT = 'Nothing was reassigned; call vq_reassign_jobs again.';
    END IF;
END
$$;

-- Hand a role's unfinished jobs and undelivered outbox rows to another role (before DROP ROLE,
-- which is refused while a role has any in the database). They then run (are delivered) as the
-- new role, which needs EXECUTE on their handler functions like any enqueuer. All or nothing,
-- like REASSIGN OWNED: if to_role holds an unfinished job with the job_id of one of
-- from_role's, nothing changes hands (VQ201). The job_id windows (unique_for) of the jobs that
-- move go with them; where to_role has a window of its own for the id that has not ended, that
-- one stays and from_role's is dropped. Returns how many jobs and rows changed hands. Not
-- granted to PUBLIC.
CREATE FUNCTION vq_reassign_jobs(from_role regrole, to_role regrole) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moved uuid[];
    m bigint;
    violated text;
BEGIN
    PERFORM vq.require_writable('vq_reassign_jobs');
    IF from_role IS NULL OR to_role IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'VQ008', MESSAGE = 'vq_reassign_jobs: both roles are required';
    END IF;
    IF from_role OPERATOR(pg_catalog.=) to_role THEN
        RETURN 0;
    END IF;
    PERFORM vq.raise_job_id_conflict(from_role, to_role, false);
    BEGIN
        WITH j AS (UPDATE vq.job_active j SET enqueued_by = to_role
                    WHERE j.enqueued_by OPERATOR(pg_catalog.=) from_role RETURNING j.execution_id)
        SELECT coalesce(array_agg(j.execution_id), '{}') INTO moved FROM j;
        -- the windows of the moved jobs: to_role's own live window for an id wins
        DELETE FROM vq.job_id_window t
         WHERE t.enqueued_by OPERATOR(pg_catalog.=) to_role::oid AND t.until OPERATOR(pg_catalog.<=) now()
           AND t.job_id IN (SELECT f.job_id FROM vq.job_id_window f
                             WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role::oid
                               AND f.execution_id OPERATOR(pg_catalog.=) ANY (moved));
        UPDATE vq.job_id_window f SET enqueued_by = to_role::oid
         WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role::oid AND f.execution_id OPERATOR(pg_catalog.=) ANY (moved)
           AND NOT EXISTS (SELECT FROM vq.job_id_window t WHERE t.enqueued_by OPERATOR(pg_catalog.=) to_role::oid
                                                          AND t.job_id OPERATOR(pg_catalog.=) f.job_id);
        DELETE FROM vq.job_id_window f
         WHERE f.enqueued_by OPERATOR(pg_catalog.=) from_role::oid AND f.execution_id OPERATOR(pg_catalog.=) ANY (moved);
    EXCEPTION WHEN unique_violation THEN
        -- to_role enqueued one of the ids (or took a window for one) since the check above
        GET STACKED DIAGNOSTICS violated = CONSTRAINT_NAME;
        IF violated IS DISTINCT FROM 'job_active_job_id_key' AND violated IS DISTINCT FROM 'job_id_window_pkey' THEN
            RAISE;
        END IF;
        PERFORM vq.raise_job_id_conflict(from_role, to_role, true);
    END;
    UPDATE vq.outbox o SET published_by = to_role, updated_at = pg_catalog.clock_timestamp()
     WHERE o.published_by OPERATOR(pg_catalog.=) from_role AND o.status OPERATOR(pg_catalog.=) 'PENDING';
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN cardinality(moved) + m;
END
$$;

-- sql/schema/views.sql: the views for monitoring and operators (vq.job_transition, the history
-- view, is in jobs.sql: vq.callback_event stores its rows).

-- Jobs running now with live progress; a role sees the jobs it may see in vq.job.
CREATE VIEW vq.running_jobs WITH (security_invoker = true) AS
SELECT r.execution_id, j.job_id, r.handler, j.queue, r.attempt_number, r.started_at,
       r.progress_total, r.progress_succeeded, r.progress_failed, r.cancel_requested,
       r.pid AS executor_pid, j.enqueued_by
  FROM vq.running_jobs_now() r
  JOIN vq.job j ON j.execution_id OPERATOR(pg_catalog.=) r.execution_id;

-- Per queue: jobs by state, how late the oldest due job is, and what finished in the last
-- minute; scope 'all' (every job: pg_monitor and granted roles) or 'own' (the jobs the caller
-- may see), see vq.job_counts.
CREATE VIEW vq.queue_stats WITH (security_invoker = true) AS
SELECT c.queue, c.paused, c.due, c.scheduled, c.running, c.completed, c.dead_letter, c.cancelled,
       pg_catalog.now() OPERATOR(pg_catalog.-) c.oldest_due_at AS oldest_due_age,
       c.completed_last_minute, c.scope
  FROM vq.job_counts() c;

-- Dead-lettered jobs (nothing runs them again).
CREATE VIEW vq.dead_letters WITH (security_invoker = true) AS
SELECT execution_id, job_id, handler, queue, attempt_number, max_attempts, last_error,
       finished_at, payload, metadata, enqueued_by
  FROM vq.job WHERE state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state;

-- Effective settings of every registered handler (override > handler default > framework default).
CREATE VIEW vq.handler_settings WITH (security_barrier) AS
SELECT h.name,
       h.kind,
       h.address,
       coalesce(o.queue, h.queue, 'default') AS queue,
       coalesce(o.priority, h.priority, 0) AS priority,
       coalesce(o.max_attempts, h.max_attempts, 3) AS max_attempts,
       (h.queue IS NOT NULL OR h.priority IS NOT NULL OR h.max_attempts IS NOT NULL) AS is_contract,
       h.max_running,
       h.unique_for
  FROM vq.handler h
  LEFT JOIN vq.contract_override o ON o.handler OPERATOR(pg_catalog.=) h.name;

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

-- sql/schema/dump.sql: what pg_dump keeps of the extension's tables: the config-dump
-- registrations. Last, after every table and sequence exists.

-- User data in these tables survives pg_dump / restore, and so do the positions of the identity
-- sequences (a restored database hands out ids after the restored ones). The default queue's row
-- is dumped too: the install script creates it, and the restore's insert of it sets its settings
-- and pause instead (vq.queue_default_restored, in registry.sql).
SELECT pg_catalog.pg_extension_config_dump('vq.queue', '');
SELECT pg_catalog.pg_extension_config_dump('vq.handler', '');
SELECT pg_catalog.pg_extension_config_dump('vq.contract_override', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_active', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_finished', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_transition_data', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_log', '');
SELECT pg_catalog.pg_extension_config_dump('vq.outbox', '');
SELECT pg_catalog.pg_extension_config_dump('vq.consumer_grant', '');
SELECT pg_catalog.pg_extension_config_dump('vq.producer_grant', '');
SELECT pg_catalog.pg_extension_config_dump('vq.queue_grant', '');
SELECT pg_catalog.pg_extension_config_dump('vq.destination', '');
SELECT pg_catalog.pg_extension_config_dump('vq.interceptor', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_id_window', '');
SELECT pg_catalog.pg_extension_config_dump('vq.transition_listener', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_transition_data_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('vq.job_log_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('vq.outbox_id_seq', '');

-- queued calls survive pg_dump / restore (with their ids: the sequence too)
SELECT pg_catalog.pg_extension_config_dump('vq.callback_event', '');
SELECT pg_catalog.pg_extension_config_dump('vq.callback_event_id_seq', '');

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
    worker_timeline     integer,        -- with worker_pid: the server's timeline when the executor claimed it
    lease_until         timestamptz     -- an external handler's job taken by a worker: abandoned if not answered by then
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
-- The claim path: due ENQUEUED rows of a queue's function handlers, highest priority first,
-- then earliest (execution_id breaks ties, so a claim can resume exactly where the previous one
-- ended). The executors run only these.
CREATE INDEX job_claim_idx ON vq.job_active (queue, priority DESC, scheduled_at, execution_id)
    WHERE state = 'ENQUEUED' AND handler_function IS NOT NULL;
-- The take path: ENQUEUED jobs of external handlers, which workers outside the server take with
-- vq_take_jobs, by queue and handler in the same order. Every job is in one of the two indexes.
CREATE INDEX job_take_idx ON vq.job_active (queue, handler, priority DESC, scheduled_at, execution_id)
    WHERE state = 'ENQUEUED' AND handler_function IS NULL;
-- Jobs claimed visibly, for the rescue of those whose executor died; with worker_pid NULL,
-- the jobs workers hold, by queue: a queue's take counts its own (inflight.c) without
-- stepping over the row versions of every other queue's, and the rescue finds expired leases.
CREATE INDEX job_running_idx ON vq.job_active (worker_pid, queue) WHERE state = 'RUNNING';
-- job_id is an idempotency key among the unfinished jobs (the rows of this partition) of the
-- role that enqueued them: each role has its own, so no role can take or probe another's ids.
CREATE UNIQUE INDEX job_active_job_id_key ON vq.job_active (enqueued_by, job_id);

-- Ended jobs: written once when the job ends, deleted by retention (or moved back by vq_redrive).
CREATE TABLE vq.job_finished PARTITION OF vq.job (CONSTRAINT job_finished_pkey PRIMARY KEY (execution_id))
    FOR VALUES IN ('COMPLETED', 'DEAD_LETTER', 'CANCELLED');
-- Finished jobs by age, for retention.
CREATE INDEX job_finished_idx ON vq.job_finished (finished_at);

-- One row per state transition of a job, except two that the job row records: the COMPLETED
-- transition of a job that ran without a visible claim (ENQUEUED -> COMPLETED, the common case),
-- and the CLAIMED and COMPLETED transitions of a job a worker took and completed (its
-- consumer_claimed_at is the take); vq.job_transition shows them all.
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

-- Every transition of the jobs the caller may see: the stored ones; the CLAIMED transition
-- implied by a job a worker holds or completed (consumer_claimed_at: the take; an attempt that
-- ended otherwise stores its CLAIMED row); and the COMPLETED transition implied by a job that
-- completed without one (from ENQUEUED when it ran inline, from RUNNING when a worker took it;
-- a job completes at most once: vq_redrive re-enqueues dead letters only). Implied rows have no
-- id and sort after the stored ones of their job in id order.
CREATE VIEW vq.job_transition WITH (security_invoker = true) AS
SELECT t.id, t.execution_id, t.attempt_number, t.kind, t.from_state, t.to_state, t.error, t.at
  FROM vq.job_transition_data t
UNION ALL
SELECT NULL::bigint, j.execution_id, j.attempt_number, 'CLAIMED'::text,
       'ENQUEUED'::vq.job_state, 'RUNNING'::vq.job_state, NULL::text, j.consumer_claimed_at
  FROM vq.job j
 WHERE j.consumer_claimed_at IS NOT NULL
   AND j.state OPERATOR(pg_catalog.=) ANY ('{RUNNING,COMPLETED}'::vq.job_state[])
   AND NOT EXISTS (SELECT 1 FROM vq.job_transition_data c
                    WHERE c.execution_id OPERATOR(pg_catalog.=) j.execution_id
                      AND c.attempt_number OPERATOR(pg_catalog.=) j.attempt_number
                      AND c.kind OPERATOR(pg_catalog.=) 'CLAIMED')
UNION ALL
SELECT NULL::bigint, j.execution_id, j.attempt_number, 'COMPLETED'::text,
       CASE WHEN j.consumer_claimed_at IS NULL THEN 'ENQUEUED'::vq.job_state ELSE 'RUNNING'::vq.job_state END,
       'COMPLETED'::vq.job_state, NULL::text, j.finished_at
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

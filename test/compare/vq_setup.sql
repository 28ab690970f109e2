-- test/compare/vq_setup.sql — vq_job's side of scripts/compare: the handlers its workloads use.
SET client_min_messages = warning;
CREATE EXTENSION vq_job;
CREATE SCHEMA compare;

-- The no-op handler (enqueue, drain, steady load).
CREATE FUNCTION compare.noop(jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT vq_register_handler('noop', 'compare.noop(jsonb)');

-- The latency handler: stamps its start.
CREATE TABLE compare.started (execution_id uuid NOT NULL, started timestamptz NOT NULL);
CREATE FUNCTION compare.rec(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO compare.started VALUES (ctx.execution_id, clock_timestamp());
END$$;
SELECT vq_register_handler('rec', 'compare.rec(jsonb, vq.job_context)');

-- The external handler of the worker-protocol workloads (the Node and Python libraries,
-- vq_consumer --coprocess): its jobs are taken by workers outside the server. A queue of its own
-- with room for every job a worker may hold (the default queue holds 5 at once).
SELECT vq_create_queue('bench_ext', max_concurrent_jobs => 100000);
SELECT vq_register_notify_handler('ext', 'compare_ext', queue => 'bench_ext');

-- The plain-SQL enqueue ceiling: a minimal queue table with one partial index for the claim.
CREATE TABLE compare.plain (
    id       bigserial PRIMARY KEY,
    queue    text NOT NULL,
    priority integer NOT NULL DEFAULT 0,
    run_at   timestamptz NOT NULL DEFAULT now(),
    state    smallint NOT NULL DEFAULT 0,
    payload  jsonb
);
CREATE INDEX ON compare.plain (priority DESC, run_at) WHERE state = 0;

-- The two-step ceiling's table: the columns, defaults and indexes of vq.job_active (the partition
-- of vq.job that holds unfinished jobs), as test/bench/workers.sh's ceiling, and its storage
-- parameters (autovacuum as eager as vq.job_active's).
CREATE TABLE compare.plain_job (LIKE vq.job_active INCLUDING DEFAULTS INCLUDING INDEXES);
DO $$
DECLARE o text[] := (SELECT reloptions FROM pg_class WHERE oid = 'vq.job_active'::regclass);
BEGIN
    IF o IS NOT NULL THEN
        EXECUTE format('ALTER TABLE compare.plain_job SET (%s)', array_to_string(o, ', '));
    END IF;
END$$;

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

-- The NOTIFY handler run by vq_consumer --coprocess, in a queue of its own.
SELECT vq_create_queue('nq', max_concurrent_jobs => 10000);
SELECT vq_register_notify_handler('nt', 'compare_nt', queue => 'nq');

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

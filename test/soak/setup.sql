-- test/soak/setup.sql: the soak's schema, handlers and queues (run once in the soak database).
-- Every job carries a key `k` (uuid) in its payload. Producers record each key in
-- soak_produced in the same transaction as the enqueue or publish, so that table holds
-- exactly what committed; handlers record what ran in soak_effect (one row per committed
-- run, keyed by execution_id and attempt, deliberately without a unique constraint so that
-- a second run is counted, not refused) and soak_ledger (one row per job key, with a run
-- counter).

CREATE TABLE soak_produced (
    k             uuid PRIMARY KEY,
    kind          text NOT NULL,
    execution_id  uuid,          -- what vq_enqueue / vq_enqueue_many returned
    outbox_id     bigint,        -- what vq_outbox_publish(_to) returned
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE soak_effect (
    execution_id  uuid NOT NULL,
    attempt       integer NOT NULL,
    k             uuid,
    fn            text NOT NULL,  -- the function (or 'consumer') that wrote it
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX soak_effect_execution_idx ON soak_effect (execution_id, attempt);
CREATE TABLE soak_ledger (
    k     uuid PRIMARY KEY,
    runs  integer NOT NULL
);
-- The outbox ids of the NOTIFY outbox rows a listener heard, loaded at the end.
CREATE TABLE soak_heard (outbox_id bigint NOT NULL);
-- Faults, loaded from the chaos driver's file at the end: [t0, t1] brackets each.
CREATE TABLE soak_fault (
    kind    text NOT NULL,
    detail  text,
    t0      timestamptz NOT NULL,
    t1      timestamptz NOT NULL
);

-- What a committed run of a PL/pgSQL handler leaves: one effect row and one ledger run.
CREATE FUNCTION soak_record(p jsonb, ctx vq.job_context, fn text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.soak_effect (execution_id, attempt, k, fn)
    VALUES (ctx.execution_id, ctx.attempt_number, (p ->> 'k')::uuid, fn);
    INSERT INTO public.soak_ledger AS l (k, runs) VALUES ((p ->> 'k')::uuid, 1)
        ON CONFLICT (k) DO UPDATE SET runs = l.runs + 1;
END $$;

-- soak_ok is registered with one of two equal functions; the chaos driver swaps them
-- while jobs run (each job must run the function it recorded at enqueue).
CREATE FUNCTION soak_ok_a(p jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM public.soak_record(p, ctx, 'public.soak_ok_a'); END $$;
CREATE FUNCTION soak_ok_b(p jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$ BEGIN PERFORM public.soak_record(p, ctx, 'public.soak_ok_b'); END $$;
-- Slow enough to be claimed visibly (committed RUNNING first): crashes orphan these.
CREATE FUNCTION soak_busy(p jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.02 + random() * 0.03);
    PERFORM public.soak_record(p, ctx, 'public.soak_busy');
END $$;
-- Fails on every attempt but the last.
CREATE FUNCTION soak_flaky(p jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.soak_record(p, ctx, 'public.soak_flaky');   -- rolled back with the error
    IF ctx.attempt_number + 1 < ctx.max_attempts THEN
        RAISE EXCEPTION 'soak: flaky job fails attempt %', ctx.attempt_number;
    END IF;
END $$;
-- Fails on every attempt: dead-lettered.
CREATE FUNCTION soak_doomed(p jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM public.soak_record(p, ctx, 'public.soak_doomed');
    RAISE EXCEPTION 'soak: doomed job fails attempt %', ctx.attempt_number;
END $$;
-- Sleeps past vq.execution_timeout_ms on every attempt: abandoned, then dead-lettered.
CREATE FUNCTION soak_slow(p jsonb, ctx vq.job_context) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep((SELECT setting::int FROM pg_settings WHERE name = 'vq.execution_timeout_ms') / 1000.0 * 1.7);
    PERFORM public.soak_record(p, ctx, 'public.soak_slow');
END $$;

SELECT vq_create_queue('soak_fast', sleep_delay_ms => 200, max_concurrent_jobs => 100,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 200);
SELECT vq_create_queue('soak_busy', sleep_delay_ms => 200, max_concurrent_jobs => 8,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 200);
SELECT vq_create_queue('soak_retry', sleep_delay_ms => 200, max_concurrent_jobs => 20,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 300);
SELECT vq_create_queue('soak_slow', sleep_delay_ms => 200, max_concurrent_jobs => 6,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 200);
SELECT vq_create_queue('soak_notify', sleep_delay_ms => 200, max_concurrent_jobs => 10,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 300);

SELECT vq_register_handler('soak_ok', 'soak_ok_a(jsonb, vq.job_context)', queue => 'soak_fast', max_attempts => 10);
SELECT vq_register_handler('soak_busy', 'soak_busy(jsonb, vq.job_context)', queue => 'soak_busy', max_attempts => 10);
SELECT vq_register_handler('soak_flaky', 'soak_flaky(jsonb, vq.job_context)', queue => 'soak_retry', max_attempts => 3);
SELECT vq_register_handler('soak_doomed', 'soak_doomed(jsonb, vq.job_context)', queue => 'soak_retry', max_attempts => 3);
SELECT vq_register_handler('soak_slow', 'soak_slow(jsonb, vq.job_context)', queue => 'soak_slow', max_attempts => 2);
SELECT vq_register_notify_handler('soak_notify', 'soak_jobs', queue => 'soak_notify', max_attempts => 10);

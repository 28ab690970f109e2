#!/usr/bin/env bash
# hard_timeout.sh: user code that catches the execution timeout's cancel still ends.
# vq.execution_timeout_ms = 1500; a "stubborn" handler loops on pg_sleep and swallows
# query_canceled.
#   1. claimed visibly, max_attempts 2: each attempt ends within timeout + 2 s escalation +
#      margin (<= 6 s after it started): its executor terminates itself, the launcher replaces
#      it, and the job gets exactly one ABANDONED transition per attempt (error naming the
#      timeout), then DEAD_LETTER; meanwhile 200 jobs of another queue all complete, and no
#      executor is left running the stubborn handler.
#   2. inline (the handler ran fast before, so it runs in a batch): the same job ends
#      ABANDONED -> DEAD_LETTER (max_attempts 1) with one transition; the fast jobs of the
#      same batch are run again and complete once each.
#   3. an outbox destination function that swallows the cancel: the row is recorded as a
#      retryable failure (attempts 1, next_attempt_at set, last_error naming the timeout), and
#      the executor is replaced.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

cleanup() {
    set +e
    q "UPDATE ht_flag SET stubborn = false" >/dev/null 2>&1
    cleanup_configs
}
trap cleanup EXIT

# What the rescue and the timeout see, printed when a wait times out: the job's worker, the
# database's executors (a job left RUNNING means its process is alive, or still in its slot),
# and what the server logged about executors.
report_workers() {
    echo "job worker: $(q "SELECT coalesce(worker_pid::text, '-') || ' started ' || coalesce(worker_started_at::text, '-')
                             FROM vq.job WHERE state = 'RUNNING'" | tr '\n' ' ')"
    echo "executors: $(q "SELECT string_agg(pid || ' ' || backend_start || ' ' || coalesce(state, '') || ' '
                                 || coalesce(wait_event_type || ':' || wait_event, '') || ' ' || left(query, 60), ' / ')
                            FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
    echo "server log: $(grep -E 'vq_job|background worker' "${VQ_CLUSTER_DIR:-/nonexistent}/server.log" 2>/dev/null | tail -n 12 | tr '\n' ' ')"
}
VQ_WAIT_REPORT=report_workers

executors() {
    q "SELECT coalesce(string_agg(pid::text, ',' ORDER BY pid), '') FROM pg_stat_activity
        WHERE backend_type = 'vq_job executor' AND datname = current_database()"
}

log "setup: vq.execution_timeout_ms = 1500, queues ht and other, handlers"
set_config vq.execution_timeout_ms 1500
qs >/dev/null <<'SQL'
SELECT vq_create_queue('ht', sleep_delay_ms => 100, max_concurrent_jobs => 10);
SELECT vq_create_queue('other', sleep_delay_ms => 100, max_concurrent_jobs => 10);
CREATE TABLE ht_flag (stubborn boolean NOT NULL);
INSERT INTO ht_flag VALUES (true);
CREATE TABLE ht_done (execution_id uuid, attempt int, tag text);
CREATE FUNCTION ht_maybe(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF (p ->> 'stubborn')::boolean AND (SELECT stubborn FROM public.ht_flag) THEN
        LOOP
            BEGIN PERFORM pg_sleep(10); EXCEPTION WHEN query_canceled THEN NULL; END;
        END LOOP;
    END IF;
    INSERT INTO public.ht_done VALUES (ctx.execution_id, ctx.attempt_number, p ->> 'tag');
END $$;
CREATE FUNCTION ht_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE plpgsql AS $$
BEGIN
    WHILE (SELECT stubborn FROM public.ht_flag) LOOP
        BEGIN PERFORM pg_sleep(10); EXCEPTION WHEN query_canceled THEN NULL; END;
    END LOOP;
    RETURN ROW('SUCCESS', NULL)::vq.publish_result;
END $$;
SELECT vq_register_handler('ht_slow', 'ht_maybe(jsonb, vq.job_context)', queue => 'ht');
SELECT vq_register_handler('ht_inline', 'ht_maybe(jsonb, vq.job_context)', queue => 'ht');
SELECT vq_register_handler('ht_other', 'ht_maybe(jsonb, vq.job_context)', queue => 'other');
SELECT vq_register_destination('ht.dest', 'ht_dest(text, jsonb, jsonb, jsonb)');
SQL

# ---------------------------------------------------------------------------
log "1. a stubborn handler claimed visibly (max_attempts 2), 200 other jobs meanwhile"
before="$(executors)"
id="$(q "SELECT vq_enqueue('ht_slow', '{\"stubborn\": true}', max_attempts => 2)")"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job WHERE execution_id = '$id' AND state = 'RUNNING')" 10 "the stubborn job RUNNING"
t0="$(now_ms)"
q "SELECT vq_enqueue('ht_other', jsonb_build_object('tag', 'other')) FROM generate_series(1, 200)" >/dev/null
wait_state "$id" DEAD_LETTER 20
secs="$(awk -v ms="$(($(now_ms) - t0))" 'BEGIN { printf "%.1f", ms / 1000 }')"
tr="$(q "SELECT string_agg(kind || '/' || attempt_number || ':' || from_state || '>' || to_state, ' ' ORDER BY id)
          FROM vq.job_transition WHERE execution_id = '$id'")"
log "job $id: DEAD_LETTER after ${secs} s; transitions: $tr"
[[ "$tr" == "CLAIMED/0:ENQUEUED>RUNNING ABANDONED/0:RUNNING>ENQUEUED CLAIMED/1:ENQUEUED>RUNNING ABANDONED/1:RUNNING>DEAD_LETTER" ]] ||
    fail "expected one ABANDONED transition per attempt, then DEAD_LETTER; found: $tr"
awk -v s="$secs" 'BEGIN { exit !(s <= 12) }' || fail "two attempts took ${secs} s, expected <= 12 s (2 x (1.5 s timeout + 2 s escalation) + restarts)"
err="$(q "SELECT error FROM vq.job_transition WHERE execution_id = '$id' AND kind = 'ABANDONED' ORDER BY id LIMIT 1")"
[[ "$err" == "execution timed out after 1500 ms; the handler ignored the cancel"* ]] || fail "ABANDONED error: $err"
wait_for "SELECT count(*) = 200 FROM ht_done WHERE tag = 'other'" 10 "the 200 other jobs"
after="$(executors)"
[[ "$after" != "$before" ]] || fail "the executors are the same processes ($after): none was replaced"
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 \
    "two executors again"
log "ok: $err; executors $before -> $after"

# ---------------------------------------------------------------------------
log "2. a stubborn job in an inline batch (max_attempts 1)"
q "SELECT vq_enqueue('ht_inline', jsonb_build_object('tag', 'warm')) FROM generate_series(1, 20)" >/dev/null
wait_for "SELECT count(*) = 20 FROM ht_done WHERE tag = 'warm'" 10 "warm-up jobs"
ids="$(qs <<'SQL'
BEGIN;
SELECT vq_enqueue('ht_inline', jsonb_build_object('tag', 'batch')) FROM generate_series(1, 5);
SELECT vq_enqueue('ht_inline', '{"stubborn": true}', max_attempts => 1);
SELECT vq_enqueue('ht_inline', jsonb_build_object('tag', 'batch')) FROM generate_series(1, 5);
COMMIT;
SQL
)"
sid="$(echo "$ids" | sed -n 6p)"
wait_state "$sid" DEAD_LETTER 15
tr="$(q "SELECT string_agg(kind || '/' || attempt_number || ':' || from_state || '>' || to_state, ' ' ORDER BY id)
          FROM vq.job_transition WHERE execution_id = '$sid'")"
[[ "$tr" == "ABANDONED/0:ENQUEUED>DEAD_LETTER" || "$tr" == "CLAIMED/0:ENQUEUED>RUNNING ABANDONED/0:RUNNING>DEAD_LETTER" ]] ||
    fail "inline stubborn job: expected one ABANDONED transition to DEAD_LETTER, found: $tr"
wait_for "SELECT count(*) = 10 FROM ht_done WHERE tag = 'batch'" 10 "the batch's other jobs"
assert_eq 10 "$(q "SELECT count(DISTINCT execution_id) FROM ht_done WHERE tag = 'batch'")" "distinct batch jobs done"
log "ok: $tr; the 10 other jobs completed once each"

# ---------------------------------------------------------------------------
log "3. a stubborn destination function"
before="$(executors)"
oid="$(q "SELECT vq_outbox_publish_to('ht.dest', 'x', '{}')")"
wait_for "SELECT attempts = 1 AND status = 'PENDING' AND next_attempt_at IS NOT NULL FROM vq.outbox WHERE id = $oid" 15 \
    "the outbox row recorded as a retryable failure"
err="$(q "SELECT last_error FROM vq.outbox WHERE id = $oid")"
[[ "$err" == "retryable: destination function still running"*"execution timeout (1500 ms)"* ]] || fail "outbox row last_error: $err"
q "UPDATE ht_flag SET stubborn = false" >/dev/null
[[ "$(executors)" != "$before" ]] || fail "no executor was replaced"
log "ok: $err"

log "PASS"

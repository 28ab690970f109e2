#!/usr/bin/env bash
# live_logs.sh: the vq_log lines and the progress of a running handler are saved in vq.job_log
# and vq.job while it runs (by the saver the launcher starts every vq.progress_flush_interval_ms,
# 500 here) and kept when the attempt fails; every line exactly once, in order.
#   1. a handler logging a line every 400 ms for 3.2 s, then raising: its first lines are in
#      vq.job_log while it still runs; after it is dead-lettered all 8 lines, once each, in order.
#   2. a handler logging 300 lines of ~110 bytes (more than one executor's 4 kB live log holds)
#      over 1.5 s, then returning: lines appear while it runs; at the end exactly 300, in order.
#   3. with one executor (vq.executors_per_database = vq.max_executors = 1: no other executor
#      could save anything) and vq.progress_flush_interval_ms = 1000, a handler that logs two
#      lines at once, sets its progress (10, 3 done) and sleeps 4 s, logs a third line and
#      sleeps 4 s more: the first two lines and the progress are in vq.job_log / vq.job within
#      3 s (a tick, the saver's start, slack) of the job's start, the third within 3 s of being
#      logged, each time while the job is still RUNNING; at the end the three lines, once
#      each, in order.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

cleanup() {
    set +e
    cleanup_configs
}
trap cleanup EXIT

log "setup: vq.progress_flush_interval_ms = 500, two executors, handlers"
set_config vq.progress_flush_interval_ms 500
wait_for "SELECT count(*) >= 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
              AND datname = current_database()" 10 "two executors"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('ll', sleep_delay_ms => 100, max_concurrent_jobs => 10);
CREATE FUNCTION ll_slow(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..8 LOOP
        PERFORM vq_log('INFO', 'step ' || i, jsonb_build_object('i', i));
        PERFORM pg_sleep(0.4);
    END LOOP;
    RAISE 'failed after 8 steps';
END $$;
CREATE FUNCTION ll_many(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.15);
    FOR i IN 1..300 LOOP
        PERFORM vq_log('DEBUG', lpad(i::text, 4, '0') || ' ' || repeat('x', 100));
        IF i % 20 = 0 THEN PERFORM pg_sleep(0.1); END IF;
    END LOOP;
END $$;
CREATE FUNCTION ll_alone(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'at once');
    PERFORM vq_log('INFO', 'right after', '{"n": 2}');
    PERFORM vq_progress_set_total(10);
    PERFORM vq_progress_add(3);
    PERFORM pg_sleep(4);
    PERFORM vq_log('INFO', 'after a pause');
    PERFORM pg_sleep(4);
END $$;
SELECT vq_register_handler('ll_slow', 'll_slow(jsonb)', queue => 'll', max_attempts => 1);
SELECT vq_register_handler('ll_many', 'll_many(jsonb)', queue => 'll');
SELECT vq_register_handler('ll_alone', 'll_alone(jsonb)', queue => 'll');
SQL

log "1. lines while it runs, all kept when it fails"
J="$(q "SELECT vq_enqueue('ll_slow', '{}')")"
wait_for "SELECT count(*) >= 2 FROM vq.job_log WHERE execution_id = '$J'" 3 "2 lines of $J saved"
STATE="$(q "SELECT state FROM vq.job WHERE execution_id = '$J'")"
[[ "$STATE" == ENQUEUED || "$STATE" == RUNNING ]] || fail "$J was $STATE when its first lines were saved (expected still running)"
wait_state "$J" DEAD_LETTER 10
assert_eq "step 1,step 2,step 3,step 4,step 5,step 6,step 7,step 8" \
    "$(q "SELECT string_agg(message, ',' ORDER BY id) FROM vq.job_log WHERE execution_id = '$J'")" \
    "the lines of $J, once each, in order"
assert_eq 8 "$(q "SELECT count(*) FROM vq.job_log WHERE execution_id = '$J' AND fields ->> 'i' = substr(message, 6)")" \
    "the fields of the lines of $J"

log "2. more lines than a live log holds"
M="$(q "SELECT vq_enqueue('ll_many', '{}')")"
wait_for "SELECT count(*) > 0 FROM vq.job_log WHERE execution_id = '$M'" 5 "lines of $M saved"
STATE="$(q "SELECT state FROM vq.job WHERE execution_id = '$M'")"
[[ "$STATE" == ENQUEUED || "$STATE" == RUNNING ]] || fail "$M was $STATE when its first lines were saved (expected still running)"
wait_state "$M" COMPLETED 10
assert_eq "300|300|true" \
    "$(q "SELECT count(*) || '|' || count(DISTINCT message) || '|' ||
                 (array_agg(left(message, 4) ORDER BY id) = ARRAY(SELECT lpad(g::text, 4, '0') FROM generate_series(1, 300) g))
            FROM vq.job_log WHERE execution_id = '$M'")" \
    "300 lines of $M, once each, in order"

log "3. one executor: lines and progress saved while it runs, whenever they were logged"
one_executor
set_config vq.progress_flush_interval_ms 1000
# within about a tick: the saver is started at the launcher's next look (a tick at most), plus
# its process start (a second of slack for a loaded machine)
SAVED_WITHIN=3
A="$(q "SELECT vq_enqueue('ll_alone', '{}')")"
wait_for "SELECT state = 'RUNNING' FROM vq.job WHERE execution_id = '$A'" 10 "$A RUNNING"
running_at="$(now_ms)"
wait_for "SELECT count(*) = 2 FROM vq.job_log WHERE execution_id = '$A'" "$SAVED_WITHIN" \
    "the two lines $A logged at once, saved within ${SAVED_WITHIN} s of its start"
wait_for "SELECT progress_total = 10 AND progress_succeeded = 3 FROM vq.job WHERE execution_id = '$A'" \
    "$SAVED_WITHIN" "the progress of $A, saved within ${SAVED_WITHIN} s of its start"
assert_eq RUNNING "$(q "SELECT state FROM vq.job WHERE execution_id = '$A'")" \
    "the state of $A when its first lines and progress were saved ($(($(now_ms) - running_at)) ms after it ran)"
# the third line is logged 4 s after the start; the handler returns 4 s later
wait_for "SELECT count(*) = 3 FROM vq.job_log WHERE execution_id = '$A'" $((4 + SAVED_WITHIN)) \
    "the line $A logged after its pause, saved within ${SAVED_WITHIN} s"
assert_eq RUNNING "$(q "SELECT state FROM vq.job WHERE execution_id = '$A'")" \
    "the state of $A when its third line was saved ($(($(now_ms) - running_at)) ms after it ran)"
wait_state "$A" COMPLETED 15
assert_eq "at once,right after,after a pause|2" \
    "$(q "SELECT string_agg(message, ',' ORDER BY id) || '|' || max(fields ->> 'n') FROM vq.job_log WHERE execution_id = '$A'")" \
    "the lines of $A, once each, in order (and the fields of the second)"
log "PASS"

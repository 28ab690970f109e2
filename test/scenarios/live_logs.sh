#!/usr/bin/env bash
# live_logs.sh: the vq_log lines of a handler running longer than 100 ms are saved in vq.job_log
# while it runs (by another executor, every vq.progress_flush_interval_ms = 500 here) and kept
# when the attempt fails; every line exactly once, in order.
#   1. a handler logging a line every 400 ms for 3.2 s, then raising: its first lines are in
#      vq.job_log while it still runs; after it is dead-lettered all 8 lines, once each, in order.
#   2. a handler logging 300 lines of ~110 bytes (more than one executor's 4 kB live log holds)
#      over 1.5 s, then returning: lines appear while it runs; at the end exactly 300, in order.
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
SELECT vq_register_handler('ll_slow', 'll_slow(jsonb)', queue => 'll', max_attempts => 1);
SELECT vq_register_handler('ll_many', 'll_many(jsonb)', queue => 'll');
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
log "PASS"

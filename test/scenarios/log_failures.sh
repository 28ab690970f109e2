#!/usr/bin/env bash
# log_failures.sh: vq.log_failures (off by default; superuser-only) puts one LOG line in the
# server log for every failed, abandoned or dead-lettered job attempt, naming the execution id,
# the attempt, the handler, the queue, the role that enqueued it, what comes of it and the
# error (cut at vq.log_max_line_bytes, like the stored text):
#   1. off (the default): a failing job leaves no such line;
#   2. on: a function handler that fails twice (max_attempts 2) logs "failed, retry at ..."
#      for attempt 0 and "failed, dead-lettered" for attempt 1, from the executor; a 1 MB
#      error is cut in the line too;
#   3. a job cut by vq.execution_timeout_ms logs "abandoned, retried at once";
#   4. a worker's vq_fail (of a job it took with vq_take_jobs) logs from the worker's own
#      session ("failed, dead-lettered"); a taken job whose lease expires logs "abandoned,
#      dead-lettered: lease expired ...", from an executor;
#   5. a plain role cannot change the setting (42501).
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

SERVER_LOG="${VQ_CLUSTER_DIR:?}/server.log"
TENANT="vq_lf_tenant_$$"
cleanup() {
    set +e
    cleanup_configs
    drop_roles "$TENANT"
}
trap cleanup EXIT

# lines: the vq_job failure lines the server logged after byte offset $1 for execution id $2
lines() { tail -c +"$1" "$SERVER_LOG" | grep -F "vq_job: job $2 " || true; }
log_offset() { echo $(($(stat -c %s "$SERVER_LOG") + 1)); }

log "setup: a role, a queue, handlers"
qs >/dev/null <<SQL
CREATE ROLE "$TENANT";
SELECT vq_create_queue('lf', sleep_delay_ms => 100, backoff_strategy => 'FIXED', backoff_base_delay_ms => 100);
CREATE FUNCTION lf_fail(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    IF p ? 'big' THEN RAISE EXCEPTION 'big %', repeat('z', 1000000); END IF;
    RAISE EXCEPTION 'lf boom %', p ->> 'n';
END \$\$;
CREATE FUNCTION lf_slow(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN IF c.attempt_number = 0 THEN PERFORM pg_sleep(30); END IF; END \$\$;
GRANT EXECUTE ON FUNCTION lf_fail(jsonb), lf_slow(jsonb, vq.job_context) TO "$TENANT";
SELECT vq_register_handler('lf_fail', 'lf_fail(jsonb)', queue => 'lf', max_attempts => 2);
SELECT vq_register_handler('lf_slow', 'lf_slow(jsonb, vq.job_context)', queue => 'lf', max_attempts => 2);
SELECT vq_register_notify_handler('lf_n', 'lf_channel', queue => 'lf', max_attempts => 1);
SELECT vq_grant_producer('lf_n', '$TENANT');
SQL

log "1. off: nothing logged"
assert_eq off "$(q "SHOW vq.log_failures")" "vq.log_failures by default"
start="$(log_offset)"
J0="$(q_as "$TENANT" "SELECT vq_enqueue('lf_fail', '{\"n\": 0}')")"
wait_state "$J0" DEAD_LETTER 20
assert_eq "" "$(lines "$start" "$J0")" "failure lines with vq.log_failures off"

log "2. on: each failed attempt of a function handler, from the executor"
set_config vq.log_failures on
start="$(log_offset)"
J1="$(q_as "$TENANT" "SELECT vq_enqueue('lf_fail', '{\"n\": 1}')")"
wait_state "$J1" DEAD_LETTER 20
want1="vq_job: job $J1 attempt 0 of handler \"lf_fail\" (queue \"lf\", role $TENANT) failed, retry at "
want2="vq_job: job $J1 attempt 1 of handler \"lf_fail\" (queue \"lf\", role $TENANT) failed, dead-lettered: lf boom 1"
# (the lines are written before the commits that make the attempts' outcomes visible)
got="$(lines "$start" "$J1")"
[[ "$(grep -c . <<<"$got")" == 2 ]] || fail "expected 2 failure lines for $J1, got: $got"
grep -qF -- "LOG:  $want1" <<<"$got" || fail "no line [LOG:  $want1...] in: $got"
grep -F -- "$want1" <<<"$got" | grep -qE ': lf boom 1$' || fail "the retry line does not end with the error: $got"
grep -qF -- "LOG:  $want2" <<<"$got" || fail "no line [LOG:  $want2] in: $got"
# a 1 MB error: the line carries it cut, as stored
start="$(log_offset)"
JB="$(q_as "$TENANT" "SELECT vq_enqueue('lf_fail', '{\"big\": 1}', max_attempts => 1)")"
wait_state "$JB" DEAD_LETTER 20
got="$(lines "$start" "$JB")"
[[ "$(grep -c . <<<"$got")" == 1 ]] || fail "expected 1 failure line for $JB, got $(grep -c . <<<"$got")"
((${#got} < 8192 + 300)) || fail "the line of a 1 MB error is ${#got} bytes long"
grep -qE 'dead-lettered: big z+ \[cut: 1000004 bytes in all\]$' <<<"$got" || fail "the cut error is not in the line: ${got:0:300}"

log "3. an attempt cut by the execution timeout"
set_config vq.execution_timeout_ms 1000
start="$(log_offset)"
JS="$(q_as "$TENANT" "SELECT vq_enqueue('lf_slow', '{}')")"
wait_state "$JS" COMPLETED 20
reset_config vq.execution_timeout_ms
got="$(lines "$start" "$JS")"
grep -qF -- "LOG:  vq_job: job $JS attempt 0 of handler \"lf_slow\" (queue \"lf\", role $TENANT) abandoned, retried at once: execution timed out after 1000 ms" <<<"$got" ||
    fail "no abandoned line for $JS in: $got"

log "4. a worker's vq_fail, logged by its session; a lease that expires"
start="$(log_offset)"
JN="$(q_as "$TENANT" "SELECT vq_enqueue('lf_n', '{}')")"
assert_eq "$JN" "$(q "SELECT string_agg(execution_id::text, ',') FROM vq_take_jobs('{lf_n}', 10)")" "the take (vq_take_jobs)"
assert_eq t "$(q "SELECT vq_fail('$JN', 'consumer says no')")" "vq_fail accepted"
got="$(lines "$start" "$JN")"
grep -qF -- "LOG:  vq_job: job $JN attempt 0 of handler \"lf_n\" (queue \"lf\", role $TENANT) failed, dead-lettered: consumer says no" <<<"$got" ||
    fail "no line for the consumer's failure of $JN in: $got"
start="$(log_offset)"
JL="$(q_as "$TENANT" "SELECT vq_enqueue('lf_n', '{}')")"
assert_eq "$JL" "$(q "SELECT string_agg(execution_id::text, ',') FROM vq_take_jobs('{lf_n}', 10, interval '1 s')")" \
    "the take with a lease of 1 s"
wait_state "$JL" DEAD_LETTER 10
got="$(lines "$start" "$JL")"
[[ "$(grep -c . <<<"$got")" == 1 ]] || fail "expected 1 failure line for $JL, got: $got"
grep -qE -- "LOG:  vq_job: job $JL attempt 0 of handler \"lf_n\" \(queue \"lf\", role $TENANT\) abandoned, dead-lettered: lease expired at .* with no reply from the worker$" <<<"$got" ||
    fail "no line for the expired lease of $JL in: $got"

log "5. superuser-only"
err="$(q_as "$TENANT" "SET vq.log_failures = off" 2>&1)" && fail "a plain role set vq.log_failures"
[[ "$err" == *"permission denied to set parameter \"vq.log_failures\""* ]] || fail "unexpected error: $err"
log "PASS"

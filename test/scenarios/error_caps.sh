#!/usr/bin/env bash
# error_caps.sh: error texts are stored within vq.log_max_line_bytes (8192 bytes by default),
# like vq_log lines: a longer one is cut at a character boundary and ends with
# " [cut: N bytes in all]" (N: its whole length), on every path that stores one:
#   1. a function handler that raises a 1 MB message (an ASCII byte, then 2-byte characters,
#      so that a cut by bytes would split one): last_error of the dead letter and both FAILED
#      transitions;
#   2. a worker's vq_fail with 20 MB (10 M 2-byte characters) of a job it took (vq_take_jobs),
#      and the same by vq_reply_jobs (outcome 'fail'): last_error and the transition;
#   3. the outbox relay: a destination that returns RETRYABLE with a 1 MB message, and one
#      that raises one: vq.outbox.last_error;
#   4. an interceptor whose on_dispatch raises a 1 MB message: the ERROR line in the job's log,
#      for a function job (called inline) and for a NOTIFY job (queued at the take);
#   5. a short error is stored whole, without the mark.
# Each cut text is at most 8192 bytes, is the original's first characters (whole ones) and
# names the original's length.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

# each path is checked even when an earlier one fails (fail_summary at the end)
check_eq() { [[ "$1" == "$2" ]] || fail_later "$3: expected [$1], found [${2:0:200}]"; }
cleanup() {
    set +e
    q "SELECT vq_unregister_interceptor('ec_icpt')" >/dev/null 2>&1
}
trap cleanup EXIT

log "setup: queue, handlers, destinations, interceptor"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('ec', sleep_delay_ms => 100, backoff_strategy => 'FIXED', backoff_base_delay_ms => 100);
-- the big text: 'x' then 2-byte characters, N bytes in all (odd, so that a byte cut can split one)
CREATE FUNCTION ec_big(n int) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT 'x' || repeat('é', (n - 1) / 2) $$;
CREATE FUNCTION ec_fail(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION '%', CASE WHEN p ? 'short' THEN 'short error' ELSE public.ec_big(1000001) END; END $$;
CREATE FUNCTION ec_ok(p jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('ec_fail', 'ec_fail(jsonb)', queue => 'ec', max_attempts => 2);
SELECT vq_register_handler('ec_ok', 'ec_ok(jsonb)', queue => 'ec');
SELECT vq_register_notify_handler('ec_n', 'ec_channel', queue => 'ec', max_attempts => 1);
CREATE FUNCTION ec_dest_retry(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('RETRYABLE', public.ec_big(1000001))::vq.publish_result $$;
CREATE FUNCTION ec_dest_raise(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '%', public.ec_big(1000001); END $$;
SELECT vq_register_destination('ec.retry', 'ec_dest_retry(text, jsonb, jsonb, jsonb)');
SELECT vq_register_destination('ec.raise', 'ec_dest_raise(text, jsonb, jsonb, jsonb)');
CREATE FUNCTION ec_on_dispatch(c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF c.job_id LIKE 'icpt%' THEN RAISE EXCEPTION '%', public.ec_big(1000001); END IF;
END $$;
SELECT vq_register_interceptor('ec_icpt', on_dispatch => 'ec_on_dispatch(vq.job_context)');
-- "ok" when t is cut as the caps promise: within 8192 bytes, the first characters of
-- ec_big(n) (whole ones), then the mark naming n; else what is wrong with it
CREATE FUNCTION ec_check(t text, n int, prefix text DEFAULT '') RETURNS text LANGUAGE sql AS $$
    SELECT CASE
        WHEN t IS NULL THEN 'NULL'
        WHEN octet_length(t) > 8192 THEN format('%s bytes', octet_length(t))
        WHEN left(t, length(prefix)) <> prefix THEN 'not prefixed: ' || left(t, 60)
        WHEN substr(t, length(prefix) + 1) !~ ('^xé+ \[cut: ' || (octet_length(prefix) + n) || ' bytes in all\]$')
            THEN 'not the first whole characters, then the mark: ' || left(t, 40) || '...' || right(t, 40)
        ELSE 'ok' END
$$;
SQL

log "1. a function handler's 1 MB error"
F="$(q "SELECT vq_enqueue('ec_fail', '{}')")"
wait_state "$F" DEAD_LETTER 20
check_eq "ok" "$(q "SELECT ec_check(last_error, 1000001) FROM vq.job WHERE execution_id = '$F'")" \
    "last_error of the dead letter"
check_eq "ok ok" "$(q "SELECT string_agg(ec_check(error, 1000001), ' ' ORDER BY id) FROM vq.job_transition
                         WHERE execution_id = '$F' AND kind = 'FAILED'")" "the two FAILED transitions"
S="$(q "SELECT vq_enqueue('ec_fail', '{\"short\": 1}')")"
wait_state "$S" DEAD_LETTER 20
check_eq "short error" "$(q "SELECT last_error FROM vq.job WHERE execution_id = '$S'")" "a short error, whole"

log "2. a worker's vq_fail, and vq_reply_jobs 'fail', with 20 MB"
# reply_big HOW SQL RESULT: take the next ec_n job, reply with SQL (%s: its id; it returns RESULT) with
# the 20 MB error; check what is stored
reply_big() {
    local how="$1" n
    n="$(q "SELECT vq_enqueue('ec_n', '{}')")"
    assert_eq "$n|0" "$(q "SELECT string_agg(execution_id || '|' || attempt, ',') FROM vq_take_jobs('{ec_n}', 10)")" \
        "the NOTIFY job taken (vq_take_jobs)"
    # shellcheck disable=SC2059  # the reply is the format
    assert_eq "$3" "$(q "$(printf "$2" "$n")")" "$how accepted"
    check_eq "DEAD_LETTER|true|true" \
        "$(q "SELECT state || '|' || (octet_length(last_error) <= 8192) || '|' ||
                     (last_error ~ '^ü+ \[cut: 20971520 bytes in all\]$')
                FROM vq.job WHERE execution_id = '$n'")" "the worker's failure ($how), as stored"
    check_eq "t" "$(q "SELECT count(*) = 1 AND bool_and(octet_length(error) <= 8192
                                               AND error ~ '^ü+ \[cut: 20971520 bytes in all\]$')
                         FROM vq.job_transition WHERE execution_id = '$n' AND kind = 'FAILED'")" \
        "the worker's FAILED transition ($how)"
}
reply_big vq_fail "SELECT vq_fail('%s', repeat('ü', 10 * 1024 * 1024), 0)" t
reply_big vq_reply_jobs "SELECT count(*) FROM vq_reply_jobs(ARRAY['%s'::uuid], '{0}', '{fail}',
                                                              ARRAY[repeat('ü', 10 * 1024 * 1024)])" 0

log "3. the outbox relay's errors"
R1="$(q "SELECT vq_outbox_publish_to('ec.retry', 'd', '{}')")"
R2="$(q "SELECT vq_outbox_publish_to('ec.raise', 'd', '{}')")"
wait_for "SELECT count(*) = 2 FROM vq.outbox WHERE id IN ($R1, $R2) AND attempts >= 1" 10 "both rows tried once"
check_eq "ok" "$(q "SELECT ec_check(last_error, 1000001, 'retryable: ') FROM vq.outbox WHERE id = $R1")" \
    "last_error of the row whose destination returned RETRYABLE"
check_eq "ok" "$(q "SELECT ec_check(last_error, 1000001, 'retryable: ') FROM vq.outbox WHERE id = $R2")" \
    "last_error of the row whose destination raised"

log "4. an interceptor's 1 MB error"
I="$(q "SELECT vq_enqueue('ec_ok', '{}', job_id => 'icpt')")"
wait_state "$I" COMPLETED 10
check_eq "ok" \
    "$(q "SELECT ec_check(message, 1000001, 'interceptor \"ec_icpt\" (on_dispatch) failed: ')
            FROM vq.job_log WHERE execution_id = '$I' AND level = 'ERROR'")" \
    "the interceptor's ERROR line in the job's log"
IN="$(q "SELECT vq_enqueue('ec_n', '{}', job_id => 'icpt-n')")"
assert_eq "$IN" "$(q "SELECT string_agg(execution_id::text, ',') FROM vq_take_jobs('{ec_n}', 10)")" \
    "the NOTIFY job icpt-n taken (its on_dispatch queued)"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job_log WHERE execution_id = '$IN' AND level = 'ERROR')" 10 \
    "the ERROR line of the queued on_dispatch of $IN"
check_eq "ok" \
    "$(q "SELECT ec_check(message, 1000001, 'interceptor \"ec_icpt\" (on_dispatch) failed: ')
            FROM vq.job_log WHERE execution_id = '$IN' AND level = 'ERROR'")" \
    "the queued on_dispatch's ERROR line in the NOTIFY job's log"
assert_eq t "$(q "SELECT vq_complete('$IN', 0)")" "vq_complete of $IN"
fail_summary
log "PASS"

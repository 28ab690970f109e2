#!/usr/bin/env bash
# consumer_commands.sh: vq_consumer running one command per job, end to end.
#   0. usage: --help exits 0; no --handler, or a bad --concurrency, exits 2.
#   1. a command that exits 0 -> COMPLETED (history CLAIMED:0, COMPLETED:0), reached through
#      the "due" notification alone (--poll-interval 60), with the round trip timed; its stdin
#      is the payload and a newline (sha256), also for a 600 KB payload; a command that exits
#      3 -> FAILED transitions carrying its stderr, each retry taken no earlier than the
#      queue's LINEAR backoff (and woken by the notification when it came due), DEAD_LETTER
#      after max_attempts (3); no reply ignored by the server.
#   2. no consumer running: 20 NOTIFY jobs wait ENQUEUED (attempt 0, no transition) and hold
#      none of their queue's capacity (5): 100 function jobs of the same queue all complete;
#      one of the waiting jobs is cancelled (CANCELLED at once). `vq_consumer --once --batch 7
#      --concurrency 3` then completes the other 19, each run exactly once at attempt 0, and
#      exits 0; the cancelled one never ran.
#   3. exclusivity: two consumers (--concurrency 3 each) on one handler; 40 jobs: each
#      command runs once, history exactly CLAIMED:0,COMPLETED:0, no reply ignored.
#   4. a command's environment: PATH and the VQ_* variables, NC_FOO named with --pass-env;
#      not PGPASSWORD nor other variables of the consumer; a notification on the channel that
#      is none of the protocol's (escape sequence, newline) is logged with --verbose with both
#      escaped (\x1b, \x0a).
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

export PGCLIENTENCODING=UTF8
R_ENQ="vq_cc_enq_$$"       # plain role that enqueues
TMPD="$(mktemp -d /tmp/vq_cc.XXXXXX)"
# shellcheck source=test/scenarios/lib/consumer.sh
. "$(dirname "$0")/lib/consumer.sh"

cleanup() {
    local rc=$?
    set +e
    consumer_kill_all
    drop_roles "$R_ENQ"
    if ((rc != 0)); then
        for f in "$TMPD"/*.log; do
            [[ -s "$f" ]] && { echo "---- $f (last 40 lines)"; tail -n 40 "$f"; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

# The command (cmd.sh) connects with psql and records which consumer ran it: it needs these
# variables, which a command gets only when named with --pass-env.
PASS_ENV=(--pass-env PGHOST --pass-env PGPORT --pass-env PGUSER --pass-env PGDATABASE --pass-env NC_CONSUMER)
# The consumers' command: records what it got (execution id, attempt, job id, which
# consumer, sha256 and size of stdin) in nc_ran, then exits 3 with a message on stderr when
# the payload has a "fail" key, 0 otherwise.
cat >"$TMPD/cmd.sh" <<'SH'
#!/bin/sh
f=$(mktemp)
cat >"$f"
sha=$(sha256sum <"$f" | cut -c1-64)
bytes=$(wc -c <"$f")
psql -XAtq -v ON_ERROR_STOP=1 -c "INSERT INTO nc_ran (execution_id, attempt, job_id, consumer, sha, bytes)
    VALUES ('$VQ_EXECUTION_ID', $VQ_ATTEMPT, '$VQ_JOB_ID', '$NC_CONSUMER', '$sha', $bytes)" || exit 9
if grep -q '"fail"' "$f"; then
    rm -f "$f"
    echo "boom at attempt $VQ_ATTEMPT" >&2
    exit 3
fi
rm -f "$f"
exit 0
SH
chmod +x "$TMPD/cmd.sh"
# history JOB_ID_PATTERN: jobs whose history is not exactly CLAIMED:0,COMPLETED:0
bad_history() {
    q "SELECT count(*) FROM vq.job j WHERE job_id LIKE '$1' AND
           (SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY id) FROM vq.job_transition t
             WHERE t.execution_id = j.execution_id) IS DISTINCT FROM 'CLAIMED:0,COMPLETED:0'"
}

# ---- 0. usage ------------------------------------------------------------------------------
log "0. usage"
rc=0; "$CONSUMER" --help >/dev/null || rc=$?
assert_eq 0 "$rc" "exit status of vq_consumer --help"
rc=0; "$CONSUMER" -- true 2>/dev/null || rc=$?
assert_eq 2 "$rc" "exit status without --handler"
rc=0; "$CONSUMER" --handler x --concurrency 0 -- true 2>/dev/null || rc=$?
assert_eq 2 "$rc" "exit status with --concurrency 0"

# ---- setup -------------------------------------------------------------------------------
log "setup: a role, queues, NOTIFY handlers"
qs <<SQL >/dev/null
CREATE ROLE "$R_ENQ";
CREATE TABLE nc_ran (execution_id uuid, attempt int, job_id text, consumer text, sha text,
                     bytes bigint, at timestamptz DEFAULT clock_timestamp());
-- retries: LINEAR 500 ms base -> 1000 ms before attempt 1, 1500 ms before attempt 2
SELECT vq_create_queue('nc_e2e_q', sleep_delay_ms => 200, max_concurrent_jobs => 50,
                       backoff_strategy => 'LINEAR', backoff_base_delay_ms => 500,
                       backoff_max_delay_ms => 5000);
SELECT vq_register_notify_handler('nc_e2e', 'nc_e2e_ch', 'nc_e2e_q', max_attempts => 3);
-- a queue of capacity 5 shared by a NOTIFY handler and a function handler
SELECT vq_create_queue('nc_share_q', sleep_delay_ms => 100, instances => 1, max_concurrent_jobs => 5);
SELECT vq_register_notify_handler('nc_share', 'nc_share_ch', 'nc_share_q');
CREATE TABLE nc_fn_done (execution_id uuid);
CREATE FUNCTION nc_fn(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO public.nc_fn_done VALUES (ctx.execution_id); END \$\$;
SELECT vq_register_handler('nc_fn', 'nc_fn(jsonb, vq.job_context)', queue => 'nc_share_q');
SELECT vq_grant_producer('nc_e2e', '$R_ENQ');
SQL

# ---- 1. end to end -------------------------------------------------------------------------
log "1. end to end"
NC_CONSUMER=c1 consumer_start c1 --handler nc_e2e --poll-interval 60 --verbose "${PASS_ENV[@]}" -- "$TMPD/cmd.sh"
consumer_ready c1   # its first take found nothing: from now on only a notification brings it a job

t0="$(now_ms)"
ID_OK="$(q_as "$R_ENQ" "SELECT vq_enqueue('nc_e2e', '{\"hello\": \"world\"}', job_id => 'e2e-ok')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_OK'" 3 \
    "job e2e-ok COMPLETED through the notification (consumer poll interval is 60 s)"
t1="$(now_ms)"
RT_MS="$(q "SELECT round(extract(epoch FROM (finished_at - created_at)) * 1000) FROM vq.job WHERE execution_id = '$ID_OK'")"
log "   round trip enqueue -> reply committed: ${RT_MS} ms (seen by the test after $((t1 - t0)) ms)"
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED" "$(transitions "$ID_OK")" "transitions of e2e-ok"
assert_eq "1|0|$(q "SELECT encode(sha256(convert_to('{\"hello\": \"world\"}'::jsonb::text || E'\n', 'UTF8')), 'hex')")" \
    "$(q "SELECT count(*) || '|' || min(attempt) || '|' || min(sha) FROM nc_ran WHERE execution_id = '$ID_OK'")" \
    "runs|attempt|stdin sha256 of e2e-ok's command"
assert_sql "SELECT finished_at IS NOT NULL AND last_error IS NULL AND lease_until IS NULL FROM vq.job WHERE execution_id = '$ID_OK'" \
    "e2e-ok finished_at set, no last_error, no lease"

log "   a 600 KB payload through stdin"
ID_BIG="$(q "SELECT vq_enqueue('nc_e2e', jsonb_build_object('blob', repeat('ab\"\\é€ ', 50000), 'n', 1), job_id => 'e2e-big')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_BIG'" 10 "job e2e-big COMPLETED"
expect="$(q "SELECT octet_length(payload::text) + 1 || '|' || encode(sha256(convert_to(payload::text || E'\n', 'UTF8')), 'hex')
               FROM vq.job WHERE execution_id = '$ID_BIG'")"
(("${expect%%|*}" > 300000)) || fail "test setup: big payload is only ${expect%%|*} bytes"
assert_eq "$expect" "$(q "SELECT bytes || '|' || sha FROM nc_ran WHERE execution_id = '$ID_BIG'")" \
    "bytes|sha256 of the 600 KB payload as the command read it on stdin"

log "   a failing command: FAILED with its stderr, retried after the backoff, DEAD_LETTER at max_attempts"
ID_FAIL="$(q "SELECT vq_enqueue('nc_e2e', '{\"fail\": true}', job_id => 'e2e-fail')")"
wait_for "SELECT state = 'DEAD_LETTER' FROM vq.job WHERE execution_id = '$ID_FAIL'" 15 \
    "job e2e-fail DEAD_LETTER after 3 failed attempts (now: $(job_state "$ID_FAIL"))"
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED,CLAIMED:1:ENQUEUED>RUNNING,FAILED:1:RUNNING>ENQUEUED,CLAIMED:2:ENQUEUED>RUNNING,FAILED:2:RUNNING>DEAD_LETTER" \
    "$(transitions "$ID_FAIL")" "transitions of e2e-fail"
got="$(q "SELECT string_agg(attempt_number || ':' || (error LIKE 'command exited with status 3: boom at attempt ' || attempt_number), ',' ORDER BY id)
            FROM vq.job_transition WHERE execution_id = '$ID_FAIL' AND kind = 'FAILED'")"
assert_eq "0:true,1:true,2:true" "$got" "FAILED transitions carry 'command exited with status 3: boom at attempt N'"
assert_sql "SELECT attempt_number = 2 AND finished_at IS NOT NULL AND last_error LIKE '%boom at attempt 2%'
              FROM vq.job WHERE execution_id = '$ID_FAIL'" "dead-lettered e2e-fail: attempt 2, finished_at, last_error"
# each retry was taken no earlier than failure + backoff(n), and not much later (the consumer
# polls every 60 s: the "due" notification of the retry's time woke it)
got="$(q "WITH t AS (SELECT kind, attempt_number AS a, at FROM vq.job_transition WHERE execution_id = '$ID_FAIL')
          SELECT string_agg(c.a || ':' || (c.at - f.at >= vq_backoff_delay('LINEAR', 500, 5000, c.a))
                                || ':' || (c.at - f.at < vq_backoff_delay('LINEAR', 500, 5000, c.a) + interval '1.5 s'),
                            ',' ORDER BY c.a)
            FROM t f JOIN t c ON c.kind = 'CLAIMED' AND c.a = f.a + 1 WHERE f.kind = 'FAILED'")"
assert_eq "1:true:true,2:true:true" "$got" \
    "retry n taken within [backoff(n), backoff(n) + 1.5 s] after the failure (LINEAR 500/5000: 1 s, 1.5 s)"
assert_eq "0,1,2" "$(q "SELECT string_agg(attempt::text, ',' ORDER BY attempt) FROM nc_ran WHERE execution_id = '$ID_FAIL'")" \
    "attempts the failing command ran (once each)"
if grep -q "ignored by the server" "$TMPD/c1.log"; then
    fail "consumer c1 had a reply ignored: $(grep "ignored" "$TMPD/c1.log" | head -3)"
fi
consumer_stop c1
assert_eq 0 "$CONSUMER_RC" "exit status of c1 after SIGTERM"

# ---- 2. no consumer, then --once --------------------------------------------------------------
log "2. jobs wait for a consumer without holding their queue's capacity; then vq_consumer --once"
q "SELECT vq_enqueue_many('nc_share', array_agg(jsonb_build_object('i', i)), job_ids => array_agg('catch-' || i))
     FROM generate_series(1, 20) i" >/dev/null
q "SELECT vq_enqueue_many('nc_fn', array_fill('{}'::jsonb, ARRAY[100]))" >/dev/null
wait_for "SELECT count(*) = 100 FROM nc_fn_done" 20 "the 100 function jobs of the shared queue done, with 20 NOTIFY jobs waiting"
assert_eq "20|0|0" "$(q "SELECT count(*) FILTER (WHERE state = 'ENQUEUED') || '|' || max(attempt_number) || '|' ||
                              (SELECT count(*) FROM vq.job_transition t JOIN vq.job j2 USING (execution_id) WHERE j2.handler = 'nc_share')
                         FROM vq.job WHERE handler = 'nc_share'")" \
    "NOTIFY jobs ENQUEUED|highest attempt|transitions, with no consumer running"
ID_CANCEL="$(q "SELECT execution_id FROM vq.job WHERE job_id = 'catch-20'")"
assert_eq CANCELLED "$(q "SELECT vq_cancel('$ID_CANCEL')")" "vq_cancel of a NOTIFY job no consumer took"
rc=0
timeout 60 env NC_CONSUMER=once "$CONSUMER" --dbname "$CONNINFO" "${PASS_ENV[@]}" --handler nc_share --batch 7 --concurrency 3 --once \
    --verbose -- "$TMPD/cmd.sh" >"$TMPD/once.log" 2>&1 || rc=$?
assert_eq 0 "$rc" "exit status of vq_consumer --once"
assert_eq "19|1" "$(q "SELECT count(*) FILTER (WHERE state = 'COMPLETED') || '|' || count(*) FILTER (WHERE state = 'CANCELLED')
                        FROM vq.job WHERE job_id LIKE 'catch-%'")" "catch-up jobs COMPLETED|CANCELLED after --once"
got="$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) || '|' || count(*) FILTER (WHERE consumer = 'once' AND attempt = 0)
            FROM nc_ran WHERE job_id LIKE 'catch-%'")"
assert_eq "19|19|19" "$got" "catch-up command runs|distinct jobs|run by the --once consumer at attempt 0"
assert_eq 1 "$(bad_history 'catch-%')" "catch-up jobs whose history is not exactly CLAIMED:0,COMPLETED:0 (the cancelled one)"

# ---- 3. two consumers ----------------------------------------------------------------------------
log "3. exclusivity: two consumers take the same handler's jobs"
NC_CONSUMER=x1 consumer_start x1 --handler nc_e2e --concurrency 3 --batch 2 --poll-interval 60 --verbose "${PASS_ENV[@]}" -- "$TMPD/cmd.sh"
NC_CONSUMER=x2 consumer_start x2 --handler nc_e2e --concurrency 3 --batch 2 --poll-interval 60 --verbose "${PASS_ENV[@]}" -- "$TMPD/cmd.sh"
consumer_ready x1
consumer_ready x2
q "SELECT vq_enqueue_many('nc_e2e', array_agg(jsonb_build_object('i', i)), job_ids => array_agg('excl-' || i))
     FROM generate_series(1, 40) i" >/dev/null
wait_for "SELECT count(*) = 40 FROM vq.job WHERE job_id LIKE 'excl-%' AND state = 'COMPLETED'" 60 \
    "the 40 jobs COMPLETED by two consumers"
assert_eq "40|40" "$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) FROM nc_ran WHERE job_id LIKE 'excl-%'")" \
    "command runs|distinct jobs with two consumers"
assert_eq 0 "$(bad_history 'excl-%')" "jobs of two consumers whose history is not exactly CLAIMED:0,COMPLETED:0"
if grep -h "ignored" "$TMPD/x1.log" "$TMPD/x2.log" | grep -q .; then
    fail "a consumer's reply was ignored: $(grep -h "ignored" "$TMPD/x1.log" "$TMPD/x2.log" | head -3)"
fi
log "   split between the consumers: $(q "SELECT string_agg(consumer || '=' || n, ' ' ORDER BY consumer)
                                          FROM (SELECT consumer, count(*) n FROM nc_ran WHERE job_id LIKE 'excl-%' GROUP BY 1) s")"
consumer_stop x1
consumer_stop x2

# ---- 4. what a command sees, and what the consumer logs ------------------------------------------
log "4. a command's environment is minimal; the log escapes control characters"
printf '#!/bin/sh\nenv >"%s/env.$VQ_EXECUTION_ID"\n' "$TMPD" >"$TMPD/env.sh"
chmod +x "$TMPD/env.sh"
PGPASSWORD=not-for-jobs NC_SECRET=hidden NC_FOO=bar consumer_start env --handler nc_e2e --poll-interval 60 \
    --pass-env NC_FOO --verbose -- "$TMPD/env.sh"
consumer_ready env
ID_ENV="$(q "SELECT vq_enqueue('nc_e2e', '{}', job_id => 'env-1')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_ENV'" 5 "the env job COMPLETED"
envf="$TMPD/env.$ID_ENV"
[[ -s "$envf" ]] || fail "the command wrote no environment"
if grep -q '^PGPASSWORD=' "$envf"; then fail "PGPASSWORD reached the command"; fi
if grep -q '^NC_SECRET=' "$envf"; then fail "NC_SECRET (not passed) reached the command"; fi
grep -qx 'NC_FOO=bar' "$envf" || fail "NC_FOO (--pass-env) did not reach the command"
for v in "VQ_EXECUTION_ID=$ID_ENV" VQ_JOB_ID=env-1 VQ_ATTEMPT=0 VQ_HANDLER=nc_e2e; do
    grep -qx "$v" "$envf" || fail "$v missing from the command's environment"
done
grep -q '^PATH=' "$envf" || fail "PATH missing from the command's environment"
# a notification on the channel that is none of the protocol's, with an escape sequence and a newline
q "SELECT pg_notify('nc_e2e_ch', E'not ours \\x1b[31m red\\nforged line')" >/dev/null
log_wait env 'ignoring a notification' 5
if grep -q $'\x1b' "$TMPD/env.log" || grep -q '^forged line' "$TMPD/env.log"; then
    fail "the consumer logged a raw control character: $(grep -a 'ignoring' "$TMPD/env.log" | head -2)"
fi
grep -qF 'red\x0aforged line' "$TMPD/env.log" || fail "the newline was not escaped: $(grep -a 'ignoring' "$TMPD/env.log")"
grep -qF '\x1b[31m' "$TMPD/env.log" || fail "the escape character was not escaped: $(grep -a 'ignoring' "$TMPD/env.log")"
consumer_stop env

log "PASS consumer_commands (round trip ${RT_MS} ms)"

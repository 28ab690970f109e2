#!/usr/bin/env bash
# notify_consumer.sh: NOTIFY handlers end to end, with a psql listener and the reference
# consumer (vq_consumer).
#   1. message contents: a LISTENing session gets {"execution_id", "attempt": 0} and nothing
#      else, whatever the payload (small, null, 7000 and 9000 bytes); vq_take returns the
#      payload to the enqueuing role, no row to another role or for another handler name;
#      vq_job_payload() returns a payload to the enqueuing role and NULL to another role. The
#      announced jobs are RUNNING with worker_pid NULL and one CLAIMED transition.
#   2. end to end with vq_consumer: a command that exits 0 -> COMPLETED (CLAIMED + COMPLETED
#      transitions), reached through the notification alone (--poll-interval 60), with the
#      round trip timed; a 600 KB payload reaches the command's stdin intact (sha256); a
#      command that exits 3 -> FAILED transitions carrying its stderr, each retry no earlier
#      than the queue's LINEAR backoff, DEAD_LETTER after max_attempts (3).
#   3. catch-up: with no consumer running, 20 jobs are announced to nobody; `vq_consumer
#      --once` then completes all 20, each exactly once.
#   4. exclusivity: two consumers LISTEN on one channel; 30 jobs: each command runs once
#      (one row per execution in the command's log), one CLAIMED + one COMPLETED each, and
#      no reply is ignored.
#   5. a command's environment: PATH and the VQ_* variables, NC_FOO named with --pass-env;
#      not PGPASSWORD nor other variables of the consumer; a malformed notification with an
#      escape sequence and a newline is logged with both escaped (\x1b, \x0a).
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

export PGCLIENTENCODING=UTF8
CONSUMER="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}/vq_consumer"
CONNINFO="host=$PGHOST port=$PGPORT user=postgres dbname=$PGDATABASE"
R_ENQ="vq_nc_enq_$$"       # plain role that enqueues
R_OTHER="vq_nc_other_$$"   # plain role with no claim on R_ENQ's jobs
TMPD="$(mktemp -d /tmp/vq_nc.XXXXXX)"
declare -A CONSUMER_PID=() LISTENER_FD=() LISTENER_PID=()

cleanup() {
    local rc=$? n
    set +e
    for n in "${!CONSUMER_PID[@]}"; do consumer_stop "$n" 2>/dev/null; done
    for n in "${!LISTENER_PID[@]}"; do listener_stop "$n" 2>/dev/null; done
    cleanup_configs
    drop_roles "$R_ENQ" "$R_OTHER"
    if ((rc != 0)); then
        for f in "$TMPD"/*.log "$TMPD"/*.out; do
            [[ -s "$f" ]] && { echo "---- $f (last 40 lines)"; tail -n 40 "$f"; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

# ---- helpers -----------------------------------------------------------------------------
# shellcheck source=test/scenarios/lib/listener.sh
. "$(dirname "$0")/lib/listener.sh"

# The command (cmd.sh) connects with psql and records which consumer ran it: it needs these
# variables, which a command gets only when named with --pass-env.
PASS_ENV="--pass-env PGHOST --pass-env PGPORT --pass-env PGUSER --pass-env PGDATABASE --pass-env NC_CONSUMER"
# consumer_start NAME ARGS...: vq_consumer in the background (log in $TMPD/NAME.log)
consumer_start() {
    local name="$1"
    shift
    NC_CONSUMER="$name" "$CONSUMER" --dbname "$CONNINFO application_name=nc_$name" $PASS_ENV "$@" >"$TMPD/$name.log" 2>&1 &
    CONSUMER_PID[$name]=$!
}
# consumer_ready NAME: its session is idle after its startup vq_pull (LISTENing, waiting)
consumer_ready() {
    wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'nc_$1'
                               AND state = 'idle' AND query LIKE '%vq_pull%')" 10 "consumer $1 connected and idle after its first vq_pull"
}
# consumer_stop NAME: SIGTERM (it finishes its job and replies), then wait; SIGKILL after 10 s
consumer_stop() {
    local name="$1" pid="${CONSUMER_PID[$1]}" i
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    unset "CONSUMER_PID[$name]"
}

# The consumers' command: records what it got (execution id, attempt, job id, which
# consumer, sha256 and size of stdin) in nc_ran, then exits 3 with a message on stderr when
# the payload has a "fail" key, 0 otherwise.
cat >"$TMPD/cmd.sh" <<'EOF'
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
EOF
chmod +x "$TMPD/cmd.sh"

# ---- setup -------------------------------------------------------------------------------
log "setup: roles, queues, NOTIFY handlers"
qs <<SQL >/dev/null
CREATE ROLE "$R_ENQ";
CREATE ROLE "$R_OTHER";
CREATE TABLE nc_ran (execution_id uuid, attempt int, job_id text, consumer text, sha text,
                     bytes bigint, at timestamptz DEFAULT clock_timestamp());
SELECT vq_create_queue('nc_msg_q', sleep_delay_ms => 200);
-- retries: LINEAR 500 ms base -> 1000 ms before attempt 1, 1500 ms before attempt 2
SELECT vq_create_queue('nc_e2e_q', sleep_delay_ms => 200, max_concurrent_jobs => 50,
                       backoff_strategy => 'LINEAR', backoff_base_delay_ms => 500,
                       backoff_max_delay_ms => 5000);
SELECT vq_register_notify_handler('nc_msg', 'nc_msg_ch', 'nc_msg_q');
SELECT vq_register_notify_handler('nc_e2e', 'nc_e2e_ch', 'nc_e2e_q', max_attempts => 3);
-- enqueuing for a NOTIFY handler needs a producer grant
SELECT vq_grant_producer(h, '$R_ENQ') FROM unnest(ARRAY['nc_msg', 'nc_e2e']) h;
SQL

# ---- 1. message contents -------------------------------------------------------------------
log "1. message contents (psql listener)"
listener_start msg nc_msg_ch
ids="$(q_as "$R_ENQ" "SELECT string_agg(id::text, ' ' ORDER BY n) FROM (
          SELECT 1, vq_enqueue('nc_msg', '{\"k\": \"v\", \"quote\": \"a\\\"b\", \"u\": \"é€\", \"n\": [1, 2.5]}', job_id => 'msg-small')
          UNION ALL SELECT 2, vq_enqueue('nc_msg', NULL, job_id => 'msg-null')
          UNION ALL SELECT 3, vq_enqueue('nc_msg', jsonb_build_object('blob', repeat('m', 7000)), job_id => 'msg-7000')
          UNION ALL SELECT 4, vq_enqueue('nc_msg', jsonb_build_object('blob', repeat('x', 9000)), job_id => 'msg-9000')
        ) AS e(n, id)")"
read -r ID_SMALL ID_NULL ID_7000 ID_9000 <<<"$ids"
for id in $ids; do
    listener_wait msg "$id" 10
done

# An announcement names the job and nothing else: any role may LISTEN on any channel.
for id in $ids; do
    msg="$(notification msg "$id")"
    [[ -n "$msg" ]] || fail "no parsable notification for $id"
    got="$(qs -v "msg=$msg" -v "id=$id" <<'SQL'
SELECT CASE
    WHEN (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(m) k) <> ARRAY['attempt', 'execution_id']
        THEN 'keys other than execution_id and attempt: ' || left(m::text, 200)
    WHEN m->>'execution_id' <> j.execution_id::text THEN 'execution_id ' || (m->>'execution_id')
    WHEN m->'attempt' <> '0'::jsonb THEN 'attempt ' || (m->'attempt')::text
    ELSE 'ok' END
  FROM (SELECT :'msg'::jsonb AS m) x, vq.job j WHERE j.execution_id = :'id';
SQL
)"
    assert_eq ok "$got" "notification for job $(q "SELECT job_id FROM vq.job WHERE execution_id = '$id'")"
done
assert_eq t "$(q_as "$R_ENQ" "SELECT vq_job_payload('$ID_9000') = jsonb_build_object('blob', repeat('x', 9000))")" \
    "vq_job_payload() of the 9000-byte job, as the enqueuing role"
assert_eq t "$(q_as "$R_OTHER" "SELECT vq_job_payload('$ID_9000') IS NULL")" \
    "vq_job_payload() of the 9000-byte job, as an unrelated role (must be NULL)"
assert_eq t "$(q "SELECT vq_job_payload('$ID_9000') = jsonb_build_object('blob', repeat('x', 9000))")" \
    "vq_job_payload() of the 9000-byte job, as the superuser"
assert_eq t "$(q_as "$R_OTHER" "SELECT vq_job_payload(gen_random_uuid()) IS NULL")" \
    "vq_job_payload() of an unknown id (must be NULL)"

got="$(q "SELECT count(*) FILTER (WHERE state = 'RUNNING' AND worker_pid IS NULL AND consumer_claimed_at IS NULL
                                   AND started_at IS NOT NULL)
          FROM vq.job WHERE handler = 'nc_msg'")"
assert_eq 4 "$got" "announced jobs RUNNING with worker_pid NULL and no consumer claim yet"
for id in $ids; do
    assert_eq "CLAIMED:0:ENQUEUED>RUNNING" "$(transitions "$id")" "transitions of announced job $id"
done
# the payload comes from vq_take, which checks who is asking
assert_eq 0 "$(q_as "$R_OTHER" "SELECT count(*) FROM vq_take('$ID_SMALL', 0)")" \
    "vq_take of another role's announced job (no row)"
assert_eq 0 "$(q_as "$R_ENQ" "SELECT count(*) FROM vq_take('$ID_SMALL', 0, 'another_handler')")" \
    "vq_take naming another handler (no row)"
assert_eq t "$(q_as "$R_ENQ" "SELECT payload = jsonb_build_object('k', 'v', 'quote', 'a\"b', 'u', 'é€', 'n', jsonb_build_array(1, 2.5))
                               FROM vq_take('$ID_SMALL', 0, 'nc_msg')")" \
    "vq_take by the enqueuing role returns the payload"
listener_stop msg
# answer them (superuser) so they leave the queue's capacity
for id in $ids; do
    assert_eq t "$(q "SELECT vq_complete('$id', 0)")" "vq_complete of announced job $id by the superuser"
done
assert_eq 4 "$(q "SELECT count(*) FROM vq.job WHERE handler = 'nc_msg' AND state = 'COMPLETED'")" \
    "nc_msg jobs COMPLETED after the replies"

# ---- 2. end to end with the reference consumer --------------------------------------------------
log "2. end to end with vq_consumer"
consumer_start c1 --channel nc_e2e_ch --handler nc_e2e --poll-interval 60 --verbose -- "$TMPD/cmd.sh"
consumer_ready c1   # its startup vq_pull found nothing: from now on only a notification brings it a job

t0="$(now_ms)"
ID_OK="$(q "SELECT vq_enqueue('nc_e2e', '{\"hello\": \"world\"}', job_id => 'e2e-ok')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_OK'" 3 \
    "job e2e-ok COMPLETED through the notification (consumer poll interval is 60 s)"
t1="$(now_ms)"
RT_MS="$(q "SELECT round(extract(epoch FROM (t.at - j.created_at)) * 1000)
              FROM vq.job j JOIN vq.job_transition t USING (execution_id)
             WHERE j.execution_id = '$ID_OK' AND t.kind = 'COMPLETED'")"
log "   round trip enqueue -> reply committed: ${RT_MS} ms (seen by the test after $((t1 - t0)) ms)"
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED" "$(transitions "$ID_OK")" "transitions of e2e-ok"
assert_eq "1|0|$(q "SELECT encode(sha256(convert_to('{\"hello\": \"world\"}'::jsonb::text || E'\n', 'UTF8')), 'hex')")" \
    "$(q "SELECT count(*) || '|' || min(attempt) || '|' || min(sha) FROM nc_ran WHERE execution_id = '$ID_OK'")" \
    "runs|attempt|stdin sha256 of e2e-ok's command"
assert_sql "SELECT finished_at IS NOT NULL AND last_error IS NULL AND worker_pid IS NULL FROM vq.job WHERE execution_id = '$ID_OK'" \
    "e2e-ok finished_at set, no last_error"

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
got="$(q "SELECT string_agg(attempt_number || ':' || (error LIKE 'command exited with status 3%boom at attempt ' || attempt_number || '%'), ',' ORDER BY id)
            FROM vq.job_transition WHERE execution_id = '$ID_FAIL' AND kind = 'FAILED'")"
assert_eq "0:true,1:true,2:true" "$got" "FAILED transitions carry 'command exited with status 3: boom at attempt N'"
assert_sql "SELECT attempt_number = 2 AND finished_at IS NOT NULL AND last_error LIKE '%boom at attempt 2%'
              FROM vq.job WHERE execution_id = '$ID_FAIL'" "dead-lettered e2e-fail: attempt 2, finished_at, last_error"
# each retry was claimed no earlier than failure + backoff(n), and not much later
got="$(q "WITH t AS (SELECT kind, attempt_number AS a, at FROM vq.job_transition WHERE execution_id = '$ID_FAIL')
          SELECT string_agg(c.a || ':' || (c.at - f.at >= vq_backoff_delay('LINEAR', 500, 5000, c.a))
                                || ':' || (c.at - f.at < vq_backoff_delay('LINEAR', 500, 5000, c.a) + interval '1.5 s'),
                            ',' ORDER BY c.a)
            FROM t f JOIN t c ON c.kind = 'CLAIMED' AND c.a = f.a + 1 WHERE f.kind = 'FAILED'")"
assert_eq "1:true:true,2:true:true" "$got" \
    "retry n claimed within [backoff(n), backoff(n) + 1.5 s] after the failure (LINEAR 500/5000: 1 s, 1.5 s)"
assert_eq "0,1,2" "$(q "SELECT string_agg(attempt::text, ',' ORDER BY attempt) FROM nc_ran WHERE execution_id = '$ID_FAIL'")" \
    "attempts the failing command ran (once each)"
if grep -q "ignored by the server" "$TMPD/c1.log"; then
    fail "consumer c1 had a reply ignored: $(grep "ignored" "$TMPD/c1.log" | head -3)"
fi

# ---- 3. catch-up after consumer downtime ------------------------------------------------------
log "3. catch-up: jobs announced while no consumer runs, then vq_consumer --once"
consumer_stop c1
q "SELECT vq_enqueue_many('nc_e2e', array_agg(jsonb_build_object('i', i)), job_ids => array_agg('catch-' || i))
     FROM generate_series(1, 20) i" >/dev/null
wait_for "SELECT count(*) = 20 FROM vq.job WHERE job_id LIKE 'catch-%' AND state = 'RUNNING' AND consumer_claimed_at IS NULL" 10 \
    "the 20 catch-up jobs announced (RUNNING) to nobody"
rc=0
timeout 30 env NC_CONSUMER=once "$CONSUMER" --dbname "$CONNINFO" $PASS_ENV --channel nc_e2e_ch --handler nc_e2e --batch 7 --once \
    --verbose -- "$TMPD/cmd.sh" >"$TMPD/once.log" 2>&1 || rc=$?
assert_eq 0 "$rc" "exit status of vq_consumer --once"
assert_eq 20 "$(q "SELECT count(*) FROM vq.job WHERE job_id LIKE 'catch-%' AND state = 'COMPLETED'")" \
    "catch-up jobs COMPLETED after --once"
got="$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) || '|' || count(*) FILTER (WHERE consumer = 'once')
            FROM nc_ran WHERE job_id LIKE 'catch-%'")"
assert_eq "20|20|20" "$got" "catch-up command runs|distinct jobs|run by the --once consumer"
got="$(q "SELECT count(*) FROM vq.job j WHERE job_id LIKE 'catch-%' AND
              (SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY id) FROM vq.job_transition t
                WHERE t.execution_id = j.execution_id) <> 'CLAIMED:0,COMPLETED:0'")"
assert_eq 0 "$got" "catch-up jobs whose history is not exactly CLAIMED:0,COMPLETED:0"

# ---- 4. two consumers on one channel --------------------------------------------------------------
log "4. exclusivity: two consumers LISTEN on the same channel"
consumer_start x1 --channel nc_e2e_ch --handler nc_e2e --batch 1 --poll-interval 60 --verbose -- "$TMPD/cmd.sh"
consumer_start x2 --channel nc_e2e_ch --handler nc_e2e --batch 1 --poll-interval 60 --verbose -- "$TMPD/cmd.sh"
consumer_ready x1
consumer_ready x2
q "SELECT vq_enqueue_many('nc_e2e', array_agg(jsonb_build_object('i', i)), job_ids => array_agg('excl-' || i))
     FROM generate_series(1, 30) i" >/dev/null
wait_for "SELECT count(*) = 30 FROM vq.job WHERE job_id LIKE 'excl-%' AND state = 'COMPLETED'" 20 \
    "the 30 jobs COMPLETED by two consumers"
got="$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) FROM nc_ran WHERE job_id LIKE 'excl-%'")"
assert_eq "30|30" "$got" "command runs|distinct jobs with two consumers on one channel"
got="$(q "SELECT count(*) FROM vq.job j WHERE job_id LIKE 'excl-%' AND
              (SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY id) FROM vq.job_transition t
                WHERE t.execution_id = j.execution_id) <> 'CLAIMED:0,COMPLETED:0'")"
assert_eq 0 "$got" "jobs of two consumers whose history is not exactly CLAIMED:0,COMPLETED:0"
if grep -h "ignored" "$TMPD/x1.log" "$TMPD/x2.log" | grep -q .; then
    fail "a consumer's reply was ignored: $(grep -h "ignored" "$TMPD/x1.log" "$TMPD/x2.log" | head -3)"
fi
log "   split between the consumers: $(q "SELECT string_agg(consumer || '=' || n, ' ' ORDER BY consumer)
                                          FROM (SELECT consumer, count(*) n FROM nc_ran WHERE job_id LIKE 'excl-%' GROUP BY 1) s")"
consumer_stop x1
consumer_stop x2

# ---- 5. what a command sees, and what the consumer logs ------------------------------------------
log "5. a command's environment is minimal; the log escapes control characters"
printf '#!/bin/sh\nenv >"%s/env.$VQ_EXECUTION_ID"\n' "$TMPD" >"$TMPD/env.sh"
chmod +x "$TMPD/env.sh"
PGPASSWORD=not-for-jobs NC_SECRET=hidden NC_FOO=bar "$CONSUMER" --dbname "$CONNINFO application_name=nc_env" \
    --channel nc_e2e_ch --handler nc_e2e --poll-interval 60 --pass-env NC_FOO -- "$TMPD/env.sh" >"$TMPD/env.log" 2>&1 &
CONSUMER_PID[env]=$!
consumer_ready env
ID_ENV="$(q "SELECT vq_enqueue('nc_e2e', '{}', job_id => 'env-1')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_ENV'" 5 "the env job COMPLETED"
envf="$TMPD/env.$ID_ENV"
[[ -s "$envf" ]] || fail "the command wrote no environment"
if grep -q '^PGPASSWORD=' "$envf"; then fail "PGPASSWORD reached the command"; fi
if grep -q '^NC_SECRET=' "$envf"; then fail "NC_SECRET (not passed) reached the command"; fi
grep -qx 'NC_FOO=bar' "$envf" || fail "NC_FOO (--pass-env) did not reach the command"
grep -qx "VQ_EXECUTION_ID=$ID_ENV" "$envf" || fail "VQ_EXECUTION_ID missing from the command's environment"
grep -q '^PATH=' "$envf" || fail "PATH missing from the command's environment"
# a notification on the channel that is not an announcement, with an escape sequence and a newline
q "SELECT pg_notify('nc_e2e_ch', E'not json \\x1b[31m red\\nforged line')" >/dev/null
for ((i = 0; i < 50; i++)); do grep -q 'ignoring a notification' "$TMPD/env.log" && break; sleep 0.1; done
grep -q 'ignoring a notification' "$TMPD/env.log" || fail "the consumer did not log the malformed notification"
if grep -q $'\x1b' "$TMPD/env.log" || grep -q '^forged line' "$TMPD/env.log"; then
    fail "the consumer logged a raw control character: $(grep -a 'ignoring' "$TMPD/env.log" | head -2)"
fi
grep -qF 'red\x0aforged line' "$TMPD/env.log" || fail "the newline was not escaped: $(grep -a 'ignoring' "$TMPD/env.log")"
consumer_stop env

log "PASS notify_consumer (round trip ${RT_MS} ms)"

#!/usr/bin/env bash
# consumer_coprocess.sh: vq_consumer --coprocess (one long-running command, one JSON line per
# job on its stdin, one answer line per job on its stdout, several lines outstanding).
# The coprocess of a-e is a sh loop: it appends its pid to a file when it starts, answers "ok"
# ("ok\r" for a "crlf" payload), answers an error line for {"kind": "fail"}, exits 3 on
# {"kind": "die"}, and writes the line it got for an {"echo": ...} payload to a file.
#   a. 50 jobs (notifications only: --poll-interval 60) -> all COMPLETED at attempt 0, each
#      CLAIMED:0,COMPLETED:0; an answer "ok\r" completes too; the coprocess was started once
#      (one pid line), is still running, is a child of the consumer and leads its own
#      process group.
#   b. a "fail" job (max_attempts 1) -> DEAD_LETTER, last_error = the answered line
#      exactly; the coprocess was not restarted.
#   c. a "die" job (max_attempts 1) -> DEAD_LETTER, last_error = "coprocess exited with
#      status 3 before answering", the dead coprocess reaped; the next job -> COMPLETED by a
#      new coprocess (two pid lines, distinct), and the consumer logged the restart.
#   d. a payload and job_id with quotes, backslashes, newline, tab, CR, a control character
#      and non-ASCII text: the coprocess got exactly one line, valid JSON (python3 when
#      available, and jsonb), equal to the job's fields, and byte for byte
#      {"execution_id": .., "job_id": .., "handler": .., "attempt": 0, "payload": <jsonb::text>}.
#   e. SIGTERM to the idle consumer -> it exits 0 within 10 s; the coprocess (EOF on its
#      stdin) exited 0 without needing a signal and is gone.
#   f. pipelining: a coprocess that reads five lines before it answers them completes 20 jobs
#      (it would wait forever for one line at a time).
#   g. --concurrency 2: two coprocesses started, each answered jobs.
#   h. a coprocess that reads nothing until told; 40 jobs of 8 kB (--pipeline 50) fill the
#      pipe: vq_cancel of the last job taken (not sent) -> CANCELLED 'cancelled before the
#      worker started it' at once; SIGTERM -> the consumer gives back the N jobs not sent
#      (logged: ENQUEUED again, attempt 0, no transition), waits for the answers of the sent
#      ones, which end COMPLETED once the coprocess reads (39 - N of them), and exits 0.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

export PGCLIENTENCODING=UTF8
TMPD="$(mktemp -d /tmp/vq_nco.XXXXXX)"
# shellcheck source=test/scenarios/lib/consumer.sh
. "$(dirname "$0")/lib/consumer.sh"
export NCO_DIR="$TMPD"   # passed to the coprocess with --pass-env


cleanup() {
    local rc=$? p
    set +e
    consumer_kill_all
    for f in "$TMPD"/pids*; do
        [[ -f "$f" ]] && while read -r p; do kill -KILL "$p" 2>/dev/null; done <"$f"
    done
    if ((rc != 0)); then
        for f in "$TMPD"/*.log "$TMPD"/pids* "$TMPD"/echo.line; do
            [[ -s "$f" ]] && { echo "---- $f (last 40 lines)"; tail -n 40 "$f"; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

pid_lines() { if [[ -f "$TMPD/pids" ]]; then wc -l <"$TMPD/pids" | tr -d ' '; else echo 0; fi; }
alive() { kill -0 "$1" 2>/dev/null; }

cat >"$TMPD/co.sh" <<'EOF'
#!/bin/sh
echo $$ >>"$NCO_DIR/pids"
while IFS= read -r line; do
    case "$line" in
    *'"payload": {"echo": '*)
        printf '%s\n' "$line" >"$NCO_DIR/echo.tmp" && mv "$NCO_DIR/echo.tmp" "$NCO_DIR/echo.line"
        echo ok ;;
    *'"payload": {"kind": "die"}'*) exit 3 ;;
    *'"payload": {"kind": "fail"}'*) printf '%s\n' 'failed: bad "input" \ at é' ;;
    *'"payload": {"kind": "crlf"}'*) printf 'ok\r\n' ;;
    *) echo ok ;;
    esac
done
EOF
chmod +x "$TMPD/co.sh"

# ---- setup ---------------------------------------------------------------------------------
log "setup: queue, NOTIFY handler, vq_consumer --coprocess"
qs <<'SQL' >/dev/null
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS vq_job;
SELECT vq_create_queue('nco_q', sleep_delay_ms => 200, max_concurrent_jobs => 100);
SELECT vq_register_notify_handler('nco', 'nco_ch', 'nco_q');
SQL
consumer_start co --handler nco --poll-interval 60 --coprocess --pass-env NCO_DIR --verbose -- "$TMPD/co.sh"
CPID="${CONSUMER_PID[co]}"
# idle after its first take: from now on only notifications bring it jobs
consumer_ready co
assert_eq 0 "$(pid_lines)" "coprocess starts before the first job (it is started lazily)"

# ---- a. persistent coprocess ----------------------------------------------------------------
log "a. 50 jobs through one coprocess"
q "SELECT vq_enqueue_many('nco', array_agg(jsonb_build_object('i', i)), job_ids => array_agg('norm-' || i))
     FROM generate_series(1, 50) i" >/dev/null
wait_for "SELECT count(*) = 50 FROM vq.job WHERE job_id LIKE 'norm-%' AND state = 'COMPLETED'" 30 \
    "the 50 jobs COMPLETED"
got="$(q "SELECT count(*) FROM vq.job j WHERE job_id LIKE 'norm-%' AND (attempt_number <> 0 OR
              (SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY id) FROM vq.job_transition t
                WHERE t.execution_id = j.execution_id) <> 'CLAIMED:0,COMPLETED:0')")"
assert_eq 0 "$got" "jobs not COMPLETED at attempt 0 with history exactly CLAIMED:0,COMPLETED:0"
ID_CRLF="$(q "SELECT vq_enqueue('nco', '{\"kind\": \"crlf\"}', job_id => 'crlf')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_CRLF'" 10 \
    "the job answered \"ok\\r\" COMPLETED"
assert_eq 1 "$(pid_lines)" "coprocess starts after 51 jobs"
CO1="$(head -n 1 "$TMPD/pids")"
alive "$CO1" || fail "the coprocess (pid $CO1) is not running after the jobs"
assert_eq "$CPID" "$(ps -o ppid= -p "$CO1" | tr -d ' ')" "parent of the coprocess"
assert_eq "$CO1" "$(ps -o pgid= -p "$CO1" | tr -d ' ')" "process group of the coprocess (its own)"
if grep -q "ignored" "$TMPD/co.log"; then
    fail "a reply was ignored: $(grep "ignored" "$TMPD/co.log" | head -3)"
fi
t0="$(now_ms)"
ID_RT="$(q "SELECT vq_enqueue('nco', '{\"rt\": 1}', job_id => 'rt')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_RT'" 5 "job rt COMPLETED"
RT_MS="$(q "SELECT round(extract(epoch FROM (t.at - j.created_at)) * 1000)
              FROM vq.job j JOIN vq.job_transition t USING (execution_id)
             WHERE j.execution_id = '$ID_RT' AND t.kind = 'COMPLETED'")"
log "   round trip enqueue -> reply committed: ${RT_MS} ms (seen by the test after $(($(now_ms) - t0)) ms)"
log "PASS a: 51 jobs COMPLETED at attempt 0 by one coprocess (pid $CO1)"

# ---- b. an error answer ---------------------------------------------------------------------
log "b. an error answer dead-letters the job with that line"
ID_FAIL="$(q "SELECT vq_enqueue('nco', '{\"kind\": \"fail\"}', max_attempts => 1, job_id => 'fail')")"
wait_for "SELECT state = 'DEAD_LETTER' FROM vq.job WHERE execution_id = '$ID_FAIL'" 10 \
    "job fail DEAD_LETTER"
assert_eq 'failed: bad "input" \ at é' "$(q "SELECT last_error FROM vq.job WHERE execution_id = '$ID_FAIL'")" \
    "last_error of the failed job"
assert_eq "CLAIMED:0,FAILED:0" \
    "$(q "SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$ID_FAIL'")" \
    "transitions of the failed job"
assert_eq 1 "$(pid_lines)" "coprocess starts after an error answer"
alive "$CO1" || fail "the coprocess (pid $CO1) is not running after an error answer"
log "PASS b: error answer -> DEAD_LETTER with last_error = the line"

# ---- c. the coprocess dies --------------------------------------------------------------------
log "c. the coprocess exits before answering; the next job gets a new one"
ID_DIE="$(q "SELECT vq_enqueue('nco', '{\"kind\": \"die\"}', max_attempts => 1, job_id => 'die')")"
wait_for "SELECT state = 'DEAD_LETTER' FROM vq.job WHERE execution_id = '$ID_DIE'" 10 \
    "job die DEAD_LETTER"
assert_eq "coprocess exited with status 3 before answering" \
    "$(q "SELECT last_error FROM vq.job WHERE execution_id = '$ID_DIE'")" "last_error of the job the coprocess died on"
# the consumer reaps it before replying: no zombie left behind
alive "$CO1" && fail "the dead coprocess (pid $CO1) still exists (not reaped) after its job's reply"
ID_AFTER="$(q "SELECT vq_enqueue('nco', '{\"after\": \"die\"}', job_id => 'after-die')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_AFTER'" 10 \
    "job after-die COMPLETED by a new coprocess"
assert_eq 2 "$(pid_lines)" "coprocess starts after it died once"
CO2="$(sed -n 2p "$TMPD/pids")"
[[ "$CO2" != "$CO1" ]] || fail "the restarted coprocess has the old pid $CO1"
alive "$CO2" || fail "the restarted coprocess (pid $CO2) is not running"
grep -q "coprocess restarted (pid $CO2" "$TMPD/co.log" ||
    fail "the consumer did not log the restart of the coprocess (pid $CO2)"
log "PASS c: exit 3 before answering -> failed job, coprocess restarted (pid $CO2)"

# ---- d. escaping ----------------------------------------------------------------------------
log "d. special characters reach the coprocess intact, as one JSON line"
ID_ECHO="$(qs <<'SQL'
SELECT vq_enqueue('nco',
    jsonb_build_object('echo', E'quote " backslash \\ newline \n tab \t cr \r ctrl \x01 é € 😀 \u2028 end',
                       'list', '[1, 2.5, null, true, "x\"y"]'::jsonb),
    job_id => E'echo "id" \\ \n\t\x02 é');
SQL
)"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$ID_ECHO'" 10 \
    "job echo COMPLETED"
[[ -f "$TMPD/echo.line" ]] || fail "the coprocess wrote no echo.line for the echo job"
assert_eq 1 "$(wc -l <"$TMPD/echo.line" | tr -d ' ')" "lines the coprocess read for the echo job"
line="$(cat "$TMPD/echo.line")"
if python3 -c 'import json' 2>/dev/null; then
    python3 -c '
import json, sys
d = json.loads(sys.argv[1])
keys = list(d)
if keys != ["execution_id", "job_id", "handler", "attempt", "payload"]:
    sys.exit("keys: %r" % keys)
' "$line" || fail "the echo job line is not the expected JSON object (python3): $line"
else
    log "   (no python3: JSON validity checked with jsonb only)"
fi
got="$(qs -v "line=$line" -v "id=$ID_ECHO" <<'SQL'
SELECT CASE
    WHEN :'line'::jsonb <> jsonb_build_object('execution_id', execution_id::text, 'job_id', job_id,
                                             'handler', handler, 'attempt', 0, 'payload', payload)
        THEN 'fields differ'
    WHEN :'line' <> format('{"execution_id": %s, "job_id": %s, "handler": %s, "attempt": %s, "payload": %s}',
                           to_json(execution_id::text), to_json(job_id), to_json(handler), attempt_number,
                           payload::text)
        THEN 'text differs from the documented format'
    ELSE 'ok' END
  FROM vq.job WHERE execution_id = :'id';
SQL
)" || fail "the echo job line is not valid JSON (jsonb): $line"
assert_eq ok "$got" "the job line the coprocess read (line: $line)"
log "PASS d: the job line is one line of valid JSON equal to the job"

# ---- e. stop ----------------------------------------------------------------------------------
log "e. SIGTERM: the consumer exits 0 and the coprocess is gone"
kill -TERM "$CPID"
consumer_exit co 10
assert_eq 0 "$CONSUMER_RC" "exit status of the consumer after SIGTERM"
alive "$CO2" && fail "the coprocess (pid $CO2) still exists after the consumer exited"
grep -q "coprocess (pid $CO2) exited with status 0" "$TMPD/co.log" ||
    fail "the consumer did not log the coprocess's own exit (status 0) at EOF"
if grep -q "sending SIG" "$TMPD/co.log"; then
    fail "the coprocess needed a signal to stop: $(grep "sending SIG" "$TMPD/co.log" | head -3)"
fi
log "PASS e: consumer exited 0; the coprocess exited at EOF and was reaped"

# ---- f. pipelining ------------------------------------------------------------------------------
log "f. several job lines outstanding: a coprocess that answers five at a time"
cat >"$TMPD/five.sh" <<'SH'
#!/bin/sh
echo $$ >>"$NCO_DIR/pids.five"
while :; do
    for i in 1 2 3 4 5; do IFS= read -r line || exit 0; done
    printf 'ok\nok\nok\nok\nok\n'
done
SH
chmod +x "$TMPD/five.sh"
consumer_start five --handler nco --pipeline 10 --coprocess --pass-env NCO_DIR -- "$TMPD/five.sh"
consumer_ready five
q "SELECT vq_enqueue_many('nco', array_fill('{}'::jsonb, ARRAY[20]), job_ids => ARRAY(SELECT 'five-' || i FROM generate_series(1, 20) i))" >/dev/null
wait_for "SELECT count(*) = 20 FROM vq.job WHERE job_id LIKE 'five-%' AND state = 'COMPLETED' AND attempt_number = 0" 20 \
    "the 20 jobs answered five at a time COMPLETED"
assert_eq 1 "$(wc -l <"$TMPD/pids.five" | tr -d ' ')" "coprocess starts for the 20 jobs"
consumer_stop five
assert_eq 0 "$CONSUMER_RC" "exit status of the consumer after SIGTERM"
log "PASS f: 20 jobs through a coprocess that needs five lines before it answers"

# ---- g. two coprocesses --------------------------------------------------------------------------
log "g. --concurrency 2: two coprocesses"
cat >"$TMPD/two.sh" <<'SH'
#!/bin/sh
echo $$ >>"$NCO_DIR/pids.two"
while IFS= read -r line; do echo "$$" >>"$NCO_DIR/answers.two"; echo ok; done
SH
chmod +x "$TMPD/two.sh"
consumer_start two --handler nco --concurrency 2 --coprocess --pass-env NCO_DIR -- "$TMPD/two.sh"
consumer_ready two
q "SELECT vq_enqueue_many('nco', array_fill('{}'::jsonb, ARRAY[20]), job_ids => ARRAY(SELECT 'two-' || i FROM generate_series(1, 20) i))" >/dev/null
wait_for "SELECT count(*) = 20 FROM vq.job WHERE job_id LIKE 'two-%' AND state = 'COMPLETED' AND attempt_number = 0" 20 \
    "the 20 jobs of two coprocesses COMPLETED"
assert_eq 2 "$(sort -u "$TMPD/pids.two" | wc -l | tr -d ' ')" "coprocesses started"
assert_eq 2 "$(sort -u "$TMPD/answers.two" | wc -l | tr -d ' ')" "coprocesses that answered jobs"
consumer_stop two
log "PASS g: two coprocesses"

# ---- h. stopping with job lines not sent ----------------------------------------------------------
log "h. a full pipe: cancel of a job not sent, SIGTERM gives back the others not sent"
cat >"$TMPD/block.sh" <<'SH'
#!/bin/sh
echo $$ >>"$NCO_DIR/pids.block"
while [ ! -e "$NCO_DIR/go" ]; do sleep 0.05; done
while IFS= read -r line; do echo ok; done
SH
chmod +x "$TMPD/block.sh"
# 39 jobs, then one more in a later transaction: it comes last in take order (scheduled_at)
q "SELECT vq_enqueue_many('nco', array_fill(jsonb_build_object('blob', repeat('x', 8000)), ARRAY[39]),
                          job_ids => ARRAY(SELECT 'blk-' || i FROM generate_series(1, 39) i))" >/dev/null
ID_LAST="$(q "SELECT vq_enqueue('nco', jsonb_build_object('blob', repeat('x', 8000)), job_id => 'blk-last')")"
consumer_start block --handler nco --batch 50 --pipeline 50 --coprocess --pass-env NCO_DIR --verbose -- "$TMPD/block.sh"
wait_for "SELECT count(*) = 40 FROM vq.job WHERE job_id LIKE 'blk-%' AND state = 'RUNNING'" 10 "the 40 jobs taken"
log_wait block "took 40 job" 5
assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$ID_LAST')")" "vq_cancel of the last job taken"
wait_state "$ID_LAST" CANCELLED 5
assert_eq "cancelled before the worker started it" "$(q "SELECT last_error FROM vq.job WHERE execution_id = '$ID_LAST'")" \
    "last_error of the job cancelled before its line was sent"
log_wait block "cancel requested before it was sent to the coprocess" 5
kill -TERM "${CONSUMER_PID[block]}"
log_wait block "stopping: gave back [0-9]+ job" 5
N="$(sed -n 's/.*stopping: gave back \([0-9]*\) job.*/\1/p' "$TMPD/block.log")"
((N > 0 && N < 39)) || fail "jobs given back at the stop: $N (expected some, not all)"
wait_for "SELECT count(*) = $N FROM vq.job WHERE job_id LIKE 'blk-%' AND state = 'ENQUEUED'" 5 "the $N jobs given back ENQUEUED"
assert_eq "0|0" "$(q "SELECT max(attempt_number) || '|' || (SELECT count(*) FROM vq.job_transition t JOIN vq.job j2 USING (execution_id)
                                                              WHERE j2.job_id LIKE 'blk-%' AND j2.state = 'ENQUEUED')
                       FROM vq.job WHERE job_id LIKE 'blk-%' AND state = 'ENQUEUED'")" \
    "highest attempt|transitions of the jobs given back"
assert_eq "$((39 - N))" "$(q "SELECT count(*) FROM vq.job WHERE job_id LIKE 'blk-%' AND state = 'RUNNING'")" \
    "jobs sent to the coprocess, still RUNNING while it reads nothing"
touch "$TMPD/go"
consumer_exit block 20
assert_eq 0 "$CONSUMER_RC" "exit status of the consumer after SIGTERM"
assert_eq "$((39 - N))|$N|1" "$(q "SELECT count(*) FILTER (WHERE state = 'COMPLETED' AND attempt_number = 0) || '|' ||
                                        count(*) FILTER (WHERE state = 'ENQUEUED') || '|' || count(*) FILTER (WHERE state = 'CANCELLED')
                                   FROM vq.job WHERE job_id LIKE 'blk-%'")" "blk jobs COMPLETED|ENQUEUED|CANCELLED after the stop"
log "PASS h: $((39 - N)) sent jobs answered and COMPLETED, $N given back, 1 cancelled before it was sent"

log "PASS consumer_coprocess (round trip ${RT_MS} ms)"

#!/usr/bin/env bash
# consumer_concurrency.sh: vq_consumer --concurrency, leases, cancellation and stopping.
# The command records when it starts and ends (files) and sleeps as long as its payload says.
#   a. parallel: --concurrency 4, four jobs sleeping 2 s: all four run at the same time (the
#      latest start comes before the earliest end), all COMPLETED at attempt 0.
#   b. bounded: --concurrency 3, nine jobs sleeping 1 s: never more than 3 at once, and 3 at
#      some point.
#   c. the queue's capacity: a queue of max_concurrent_jobs 2, --concurrency 5, five jobs:
#      never more than 2 at once.
#   d. a paused queue: nothing taken while it is paused (the job stays ENQUEUED); resumed,
#      the job is COMPLETED.
#   e. lease: --lease 1, a job running 3 s: its lease is extended while it runs (lease_until
#      moves past the first lease) and it ends COMPLETED at attempt 0, never ABANDONED.
#   f. cancellation: vq_cancel of a running job -> its command gets SIGTERM (its process is
#      gone), the job ends CANCELLED with 'cancelled while running: command killed by signal 15'.
#   g. graceful stop: two jobs running, three waiting; SIGTERM -> the consumer logs that it waits,
#      takes nothing more, the two finish COMPLETED at attempt 0, the three stay ENQUEUED at
#      attempt 0 with no transition, and it exits 0.
#   h. stop timeout: --stop-timeout 1 and a job sleeping 60 s (max_attempts 1): SIGTERM -> the
#      command gets SIGTERM after 1 s, the job is DEAD_LETTER 'command killed by signal 15',
#      the consumer exits 0 within 10 s.  A second SIGTERM does the same at once (stop timeout
#      60 s).
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

TMPD="$(mktemp -d /tmp/vq_ncc.XXXXXX)"
# shellcheck source=test/scenarios/lib/consumer.sh
. "$(dirname "$0")/lib/consumer.sh"
export NCC_DIR="$TMPD/runs"
mkdir -p "$NCC_DIR"

cleanup() {
    local rc=$?
    set +e
    consumer_kill_all
    for f in "$NCC_DIR"/*.pid; do   # (each command leads its own process group)
        [[ -f "$f" ]] && kill -KILL -- "-$(cat "$f")" 2>/dev/null
    done
    if ((rc != 0)); then
        for f in "$TMPD"/*.log; do
            [[ -s "$f" ]] && { echo "---- $f (last 30 lines)"; tail -n 30 "$f"; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

cat >"$TMPD/job.sh" <<'SH'
#!/bin/sh
s=$(sed -n 's/.*"sleep": \([0-9.]*\).*/\1/p')
date +%s.%N >"$NCC_DIR/$VQ_JOB_ID.start"
echo $$ >"$NCC_DIR/$VQ_JOB_ID.pid"
sleep "${s:-0}"
date +%s.%N >"$NCC_DIR/$VQ_JOB_ID.end"
SH
chmod +x "$TMPD/job.sh"

# enqueue HANDLER PREFIX N SLEEP [MAX_ATTEMPTS]: N jobs PREFIX-1..N sleeping SLEEP seconds
enqueue() {
    q "SELECT vq_enqueue_many('$1', array_fill(jsonb_build_object('sleep', $4), ARRAY[$3]),
                              job_ids => ARRAY(SELECT '$2-' || i FROM generate_series(1, $3) i)
                              ${5:+, max_attempts => $5})" >/dev/null
}
# max_overlap PREFIX: most jobs PREFIX-* running at once, from their start and end files
max_overlap() {
    local f
    for f in "$NCC_DIR/$1"-*.start; do
        echo "$(cat "$f") 1"
        echo "$(cat "${f%.start}.end") -1"
    done | sort -n -k1,1 -k2,2 | awk '{ n += $2; if (n > m) m = n } END { print m + 0 }'
}
# started PREFIX: how many jobs PREFIX-* started
started() { find "$NCC_DIR" -name "$1-*.start" | wc -l | tr -d ' '; }
# wait_started PREFIX N SECS: until N jobs PREFIX-* started (their command runs)
wait_started() {
    local deadline=$(($(now_ms) + $3 * 1000))
    until (($(started "$1") >= $2)); do
        (($(now_ms) < deadline)) || fail "$(started "$1") of $2 $1 jobs started within $3 s"
        sleep 0.05
    done
}
completed() { q "SELECT count(*) FROM vq.job WHERE job_id LIKE '$1-%' AND state = 'COMPLETED' AND attempt_number = 0"; }

log "setup: queues and NOTIFY handlers"
qs <<'SQL' >/dev/null
SELECT vq_create_queue('ncc_q', sleep_delay_ms => 200, max_concurrent_jobs => 100);
SELECT vq_register_notify_handler('ncc', 'ncc_ch', 'ncc_q');
SELECT vq_create_queue('ncc_cap_q', sleep_delay_ms => 200, max_concurrent_jobs => 2);
SELECT vq_register_notify_handler('ncc_cap', 'ncc_cap_ch', 'ncc_cap_q');
SQL

# ---- a. parallel ---------------------------------------------------------------------------
log "a. --concurrency 4: four 2-second jobs run at the same time"
consumer_start a --handler ncc --concurrency 4 --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready a
enqueue ncc par 4 2
wait_for "SELECT count(*) = 4 FROM vq.job WHERE job_id LIKE 'par-%' AND state = 'COMPLETED'" 20 "the four jobs COMPLETED"
assert_eq 4 "$(completed par)" "par jobs COMPLETED at attempt 0"
assert_eq 4 "$(max_overlap par)" "most par jobs running at once"
consumer_stop a

# ---- b. bounded ----------------------------------------------------------------------------
log "b. --concurrency 3: never more than three at once"
consumer_start b --handler ncc --concurrency 3 --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready b
enqueue ncc bnd 9 1
wait_for "SELECT count(*) = 9 FROM vq.job WHERE job_id LIKE 'bnd-%' AND state = 'COMPLETED'" 30 "the nine jobs COMPLETED"
assert_eq 9 "$(completed bnd)" "bnd jobs COMPLETED at attempt 0"
assert_eq 3 "$(max_overlap bnd)" "most bnd jobs running at once"
consumer_stop b

# ---- c. the queue's capacity -----------------------------------------------------------------
log "c. a queue of capacity 2 under --concurrency 5"
consumer_start c --handler ncc_cap --concurrency 5 --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready c
enqueue ncc_cap cap 5 1
wait_for "SELECT count(*) = 5 FROM vq.job WHERE job_id LIKE 'cap-%' AND state = 'COMPLETED'" 30 "the five jobs COMPLETED"
assert_eq 2 "$(max_overlap cap)" "most jobs of the capacity-2 queue running at once"

# ---- d. a paused queue ---------------------------------------------------------------------------
log "d. a paused queue gives nothing"
q "SELECT vq_pause_queue('ncc_cap_q')" >/dev/null
enqueue ncc_cap pause 1 0
assert_stays "SELECT state || '/' || attempt_number FROM vq.job WHERE job_id = 'pause-1'" 1.5 "job of a paused queue (must stay ENQUEUED)"
assert_eq "ENQUEUED/0" "$(q "SELECT state || '/' || attempt_number FROM vq.job WHERE job_id = 'pause-1'")" "job of a paused queue"
q "SELECT vq_resume_queue('ncc_cap_q')" >/dev/null
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE job_id = 'pause-1'" 10 "the job COMPLETED after vq_resume_queue"
consumer_stop c

# ---- e. lease ------------------------------------------------------------------------------------
log "e. --lease 1: a 3-second job keeps its lease"
consumer_start e --handler ncc --lease 1 --concurrency 2 --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready e
ID="$(q "SELECT vq_enqueue('ncc', '{\"sleep\": 3}', job_id => 'lease-1')")"
wait_for "SELECT state = 'RUNNING' AND lease_until > consumer_claimed_at + interval '1.5 s' FROM vq.job WHERE execution_id = '$ID'" 10 \
    "the lease of lease-1 extended past its first second" "$ID"
wait_state "$ID" COMPLETED 10
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED" "$(transitions "$ID")" "history of lease-1"

# ---- f. cancellation -------------------------------------------------------------------------
log "f. vq_cancel of a running job stops its command"
ID="$(q "SELECT vq_enqueue('ncc', '{\"sleep\": 60}', job_id => 'cancel-1')")"
wait_started cancel 1 10
assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$ID')")" "vq_cancel of the running job"
wait_state "$ID" CANCELLED 10
assert_eq "cancelled while running: command killed by signal 15" "$(q "SELECT last_error FROM vq.job WHERE execution_id = '$ID'")" \
    "last_error of the cancelled job"
if kill -0 "$(cat "$NCC_DIR/cancel-1.pid")" 2>/dev/null; then fail "the cancelled job's command still runs"; fi
log_wait e "cancel requested: sending SIGTERM to its command" 5
consumer_stop e
assert_eq 0 "$CONSUMER_RC" "exit status of consumer e"

# ---- g. graceful stop --------------------------------------------------------------------------
log "g. SIGTERM: running jobs finish and are replied, nothing more is taken"
consumer_start g --handler ncc --concurrency 2 --verbose --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready g
enqueue ncc stop 2 3
wait_started stop 2 10
enqueue ncc wait 3 0
assert_eq "3" "$(q "SELECT count(*) FROM vq.job WHERE job_id LIKE 'wait-%' AND state = 'ENQUEUED'")" "waiting jobs ENQUEUED while the consumer is full"
kill -TERM "${CONSUMER_PID[g]}"
log_wait g "stopping: waiting up to 30 s for 2 running job" 5
consumer_exit g 15
assert_eq 0 "$CONSUMER_RC" "exit status of consumer g after SIGTERM"
assert_eq 2 "$(completed stop)" "jobs running at SIGTERM, COMPLETED at attempt 0"
assert_eq "3|0|0" "$(q "SELECT count(*) FILTER (WHERE state = 'ENQUEUED') || '|' || max(attempt_number) || '|' ||
                         (SELECT count(*) FROM vq.job_transition t JOIN vq.job j2 USING (execution_id) WHERE j2.job_id LIKE 'wait-%')
                    FROM vq.job WHERE job_id LIKE 'wait-%'")" "waiting jobs ENQUEUED|highest attempt|transitions after the stop"

# ---- h. stop timeout ---------------------------------------------------------------------------
log "h. --stop-timeout 1: a long command is stopped"
consumer_start h --handler ncc --stop-timeout 1 --concurrency 1 --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready h
q "SELECT vq_cancel(execution_id) FROM vq.job WHERE job_id LIKE 'wait-%'" >/dev/null
enqueue ncc slow 1 60 1
wait_started slow 1 10
kill -TERM "${CONSUMER_PID[h]}"
consumer_exit h 10
assert_eq 0 "$CONSUMER_RC" "exit status of consumer h after SIGTERM"
assert_eq "DEAD_LETTER|command killed by signal 15" "$(q "SELECT state || '|' || last_error FROM vq.job WHERE job_id = 'slow-1'")" \
    "the slow job after the stop timeout"
log "   a second SIGTERM stops the command at once"
consumer_start h2 --handler ncc --stop-timeout 60 --concurrency 1 --pass-env NCC_DIR -- "$TMPD/job.sh"
consumer_ready h2
enqueue ncc slower 1 60 1
wait_started slower 1 10
kill -TERM "${CONSUMER_PID[h2]}"
log_wait h2 "stopping: waiting up to 60 s" 5
kill -TERM "${CONSUMER_PID[h2]}"
consumer_exit h2 10
assert_eq 0 "$CONSUMER_RC" "exit status of consumer h2 after two SIGTERMs"
assert_eq "DEAD_LETTER|command killed by signal 15" "$(q "SELECT state || '|' || last_error FROM vq.job WHERE job_id = 'slower-1'")" \
    "the slower job after a second SIGTERM"

log "PASS consumer_concurrency"

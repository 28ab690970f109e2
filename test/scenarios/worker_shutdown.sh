#!/usr/bin/env bash
# worker_shutdown.sh: server stop and executor termination while jobs run.
#   (a) pg_ctl stop -m fast while a 2 s handler runs (claimed visibly): the handler is within
#       vq.shutdown_grace_ms (default 5 s), so it finishes during the shutdown and the server
#       stops within the grace + margin. After the restart the job is COMPLETED exactly once
#       (one effect row, one COMPLETED transition, no ABANDONED), nothing is RUNNING, and the
#       vq_log lines it wrote before the shutdown are in vq.job_log.
#   (b) pg_terminate_backend() on one executor while it runs a 0.5 s job: the executor finishes
#       that job (COMPLETED, not ABANDONED) and exits; the launcher starts a new process for the
#       same executor number within 3 s; every job completes, none is lost or run twice.
#   (c) a handler longer than the grace (pg_sleep(30)), on its last attempt (max_attempts 1),
#       with vq.shutdown_grace_ms = 1000: pg_ctl stop -m fast returns within 5 s; the handler is
#       cancelled at the end of the grace and the job INTERRUPTED: back to ENQUEUED with its
#       attempt unchanged (a stop costs no attempt), run again after the restart (a flag
#       flipped while the first run sleeps makes the second one fast) and COMPLETED; the first
#       run's vq_log line is kept (logs are flushed on every ending path, stop included).
#   (d) the same with a handler that catches the cancel and sleeps again: the launcher
#       terminates its executor 2 s after the cancel; the job is still INTERRUPTED (recorded as
#       the process exits), not dead-lettered; the stop takes at most 7 s.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
: "${VQ_REPO_ROOT:?}" "${VQ_CLUSTER_DATA:?}" "${VQ_CLUSTER_DIR:?}"
# shellcheck source=scripts/lib.sh
. "$VQ_REPO_ROOT/scripts/lib.sh"

elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

start_server() {
    vq_pg_ctl -l "$VQ_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null || fail "pg_ctl start failed"
}
# stop_fast: pg_ctl stop -m fast; STOP_SECS is how long it took.
STOP_SECS=""
stop_fast() {
    local t0
    t0="$(now_s)"
    vq_pg_ctl -m fast -w -t 60 stop >/dev/null || fail "pg_ctl stop -m fast failed"
    STOP_SECS="$(elapsed "$t0" "$(now_s)")"
}

cleanup() {
    set +e
    pg_isready -q || start_server
    cleanup_configs
}
trap cleanup EXIT

# transition_kinds EXECUTION_ID: "KIND/attempt KIND/attempt ..." in order.
transition_kinds() {
    q "SELECT string_agg(kind || '/' || attempt_number, ' ' ORDER BY id) FROM vq.job_transition
        WHERE execution_id = '$1'"
}

# ---------------------------------------------------------------------------
log "setup: queue sd, effect and flag tables"
q "SELECT vq_create_queue('sd', sleep_delay_ms => 100, max_concurrent_jobs => 10)" >/dev/null
q "CREATE TABLE sd_effect (execution_id uuid PRIMARY KEY, attempt_number integer NOT NULL,
                           at timestamptz NOT NULL DEFAULT clock_timestamp())" >/dev/null
q "CREATE TABLE sd_flag (slow boolean NOT NULL)" >/dev/null
q "INSERT INTO sd_flag VALUES (true)" >/dev/null

# ---------------------------------------------------------------------------
log "(a) pg_ctl stop -m fast while a 2 s handler runs"
q "CREATE FUNCTION sd_two(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN
       PERFORM vq_log('INFO', 'two: started', jsonb_build_object('attempt', ctx.attempt_number));
       PERFORM pg_sleep(2);
       INSERT INTO public.sd_effect (execution_id, attempt_number) VALUES (ctx.execution_id, ctx.attempt_number);
       PERFORM vq_log('INFO', 'two: finished');
   END \$\$" >/dev/null
q "SELECT vq_register_handler('two', 'sd_two(jsonb, vq.job_context)', queue => 'sd')" >/dev/null
a_id="$(q "SELECT vq_enqueue('two', '{}')")"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job j JOIN pg_stat_activity a ON a.pid = j.worker_pid
                     WHERE j.execution_id = '$a_id' AND j.state = 'RUNNING' AND a.wait_event = 'PgSleep')" 15 \
    "(a) job $a_id RUNNING in pg_sleep"
stop_fast
log "(a) server stopped in ${STOP_SECS} s (vq.shutdown_grace_ms = 5000)"
start_server
awk -v s="$STOP_SECS" 'BEGIN { exit !(s <= 8) }' ||
    fail_later "(a) pg_ctl stop -m fast took ${STOP_SECS} s, expected <= 8 s (grace 5 s + margin)"

wait_for "SELECT state NOT IN ('ENQUEUED', 'RUNNING') FROM vq.job WHERE execution_id = '$a_id'" 20 \
    "(a) job $a_id to end"
tr_a="$(transition_kinds "$a_id")"
log "(a) job $a_id: $(q "SELECT state FROM vq.job WHERE execution_id = '$a_id'"), transitions: $tr_a"
[[ "$(q "SELECT state FROM vq.job WHERE execution_id = '$a_id'")" == COMPLETED ]] ||
    fail "(a) expected job $a_id COMPLETED, found $(q "SELECT state || ' / ' || coalesce(last_error, '') FROM vq.job WHERE execution_id = '$a_id'")"
[[ "$(q "SELECT count(*) FROM vq.job_transition WHERE execution_id = '$a_id' AND kind = 'COMPLETED'")" == 1 ]] ||
    fail "(a) expected exactly one COMPLETED transition for $a_id, found: $tr_a"
[[ "$(q "SELECT count(*) FROM sd_effect WHERE execution_id = '$a_id'")" == 1 ]] ||
    fail "(a) expected exactly one effect row for $a_id"
# 2 s is within the 5 s grace: the executor must let it finish rather than abandon it.
[[ "$tr_a" == "CLAIMED/0 COMPLETED/0" ]] ||
    fail_later "(a) a 2 s handler within the 5 s shutdown grace should finish during the shutdown (CLAIMED/0 COMPLETED/0), found: $tr_a"
a_attempt="$(q "SELECT attempt_number FROM vq.job WHERE execution_id = '$a_id'")"
logs_a="$(q "SELECT string_agg(message, ', ' ORDER BY id) FROM vq.job_log
              WHERE execution_id = '$a_id' AND attempt_number = $a_attempt")"
log "(a) vq_log lines of the completed attempt: $logs_a"
[[ "$logs_a" == "two: started, two: finished" ]] ||
    fail "(a) expected the log lines 'two: started, two: finished' of attempt $a_attempt, found: '$logs_a'"
n="$(q "SELECT count(*) FROM vq.job WHERE state = 'RUNNING'")"
((n == 0)) || fail "(a) $n job(s) left RUNNING"

# ---------------------------------------------------------------------------
log "(b) pg_terminate_backend on an executor running a 0.5 s job"
q "CREATE FUNCTION sd_half(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN
       PERFORM pg_sleep(0.5);
       INSERT INTO public.sd_effect (execution_id, attempt_number) VALUES (ctx.execution_id, ctx.attempt_number);
   END \$\$" >/dev/null
q "SELECT vq_register_handler('half', 'sd_half(jsonb, vq.job_context)', queue => 'sd')" >/dev/null
wait_for "SELECT count(*) >= 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 15 \
    "(b) the executors to be up"
q "SELECT cardinality(vq_enqueue_many('half', array_agg(jsonb_build_object('i', i)))) FROM generate_series(1, 8) i" >/dev/null
# (on one of the executors that always run, 0 and 1: one started on demand for the slow jobs is
# not started again once they are done, which a busy machine makes likelier to happen first)
always="split_part(a.application_name, ':', 1) IN ('vq_job executor 0', 'vq_job executor 1')"
# (looked for and read in one query: a job seen sleeping may have ended by a second look)
b_row=""
for ((i = 0; i < 300; i++)); do
    b_row="$(q "SELECT j.execution_id, j.worker_pid, split_part(a.application_name, ':', 1)
                  FROM vq.job j JOIN pg_stat_activity a ON a.pid = j.worker_pid
                 WHERE j.handler = 'half' AND j.state = 'RUNNING' AND a.wait_event = 'PgSleep' AND $always
                 LIMIT 1")"
    [[ -z "$b_row" ]] || break
    sleep 0.05
done
[[ -n "$b_row" ]] || fail "(b) no 'half' job RUNNING in pg_sleep on executor 0 or 1 within 15 s"
IFS='|' read -r b_id b_pid b_app <<<"$b_row"
t_term="$(now_s)"
[[ "$(q "SELECT pg_terminate_backend($b_pid)")" == t ]] || fail "(b) pg_terminate_backend($b_pid) returned false"
log "(b) terminated $b_app (pid $b_pid) while it ran job $b_id"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $b_pid)" 10 \
    "(b) executor $b_pid to exit"
t_exit="$(now_s)"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                     AND datname = current_database() AND application_name = '$b_app' AND pid <> $b_pid)" 10 \
    "(b) a new '$b_app' process"
t_new="$(now_s)"
b_new_pid="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                 AND datname = current_database() AND application_name = '$b_app' AND pid <> $b_pid")"
log "(b) $b_pid exited $(elapsed "$t_term" "$t_exit") s after the SIGTERM; new pid $b_new_pid appeared $(elapsed "$t_exit" "$t_new") s after its exit"
awk -v s="$(elapsed "$t_exit" "$t_new")" 'BEGIN { exit !(s <= 3) }' ||
    fail_later "(b) the launcher restarted $b_app $(elapsed "$t_exit" "$t_new") s after it exited, expected <= 3 s"
tr_b="$(transition_kinds "$b_id")"
[[ "$tr_b" == "CLAIMED/0 COMPLETED/0" ]] ||
    fail "(b) the terminated executor should have finished its current job $b_id (CLAIMED/0 COMPLETED/0), found: $tr_b"
c_at_ok="$(q "SELECT at <= to_timestamp($t_exit) FROM vq.job_transition WHERE execution_id = '$b_id' AND kind = 'COMPLETED'")"
[[ "$c_at_ok" == t ]] || fail "(b) job $b_id completed after its executor had exited (not by that executor)"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE handler = 'half' AND state IN ('ENQUEUED', 'RUNNING'))" 20 \
    "(b) all 'half' jobs to end"
states="$(q "SELECT string_agg(state || '=' || n, ', ' ORDER BY state)
               FROM (SELECT state::text, count(*) n FROM vq.job WHERE handler = 'half' GROUP BY 1) s")"
[[ "$states" == "COMPLETED=8" ]] || fail "(b) expected COMPLETED=8, found: $states"
n="$(q "SELECT count(*) FROM vq.job j JOIN sd_effect e USING (execution_id) WHERE j.handler = 'half'")"
((n == 8)) || fail "(b) expected 8 effect rows, found $n"
n="$(q "SELECT count(*) FROM vq.job_transition t JOIN vq.job j USING (execution_id)
         WHERE j.handler = 'half' AND t.kind <> 'CLAIMED' AND t.kind <> 'COMPLETED'")"
((n == 0)) || fail "(b) expected only CLAIMED and COMPLETED transitions, found $n other(s)"
n="$(q "SELECT count(*) FROM vq.job_transition t JOIN vq.job j USING (execution_id)
         WHERE j.handler = 'half' AND t.kind = 'COMPLETED'")"
((n == 8)) || fail "(b) expected 8 COMPLETED transitions, found $n"

# ---------------------------------------------------------------------------
log "(c) a 30 s handler on its last attempt, vq.shutdown_grace_ms = 1000"
set_config vq.shutdown_grace_ms 1000
q "CREATE FUNCTION sd_long(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
   BEGIN
       PERFORM vq_log('INFO', 'long: attempt ' || ctx.attempt_number);
       IF (SELECT slow FROM public.sd_flag) THEN
           IF (p ->> 'stubborn')::boolean THEN
               LOOP
                   BEGIN PERFORM pg_sleep(30); EXCEPTION WHEN query_canceled THEN NULL; END;
               END LOOP;
           END IF;
           PERFORM pg_sleep(30);
       END IF;
       INSERT INTO public.sd_effect (execution_id, attempt_number) VALUES (ctx.execution_id, ctx.attempt_number);
   END \$\$" >/dev/null
# one handler name per run: a handler met for the first time is claimed visibly (RUNNING)
q "SELECT vq_register_handler(h, 'sd_long(jsonb, vq.job_context)', queue => 'sd') FROM unnest(ARRAY['long_c', 'long_d']) h" >/dev/null

# stop_while_long TAG PAYLOAD MAX_STOP_SECS: run a long_TAG job (max_attempts 1) into pg_sleep, stop
# the server fast, restart; the job must come back with its attempt unchanged and complete.
stop_while_long() {
    local tag="$1" payload="$2" max_secs="$3" id tr err e logs
    q "UPDATE sd_flag SET slow = true" >/dev/null
    id="$(q "SELECT vq_enqueue('long_$tag', '$payload', max_attempts => 1)")"
    wait_for "SELECT EXISTS (SELECT 1 FROM vq.job j JOIN pg_stat_activity a ON a.pid = j.worker_pid
                         WHERE j.execution_id = '$id' AND j.state = 'RUNNING' AND a.wait_event = 'PgSleep')" 15 \
        "($tag) job $id RUNNING in pg_sleep"
    q "UPDATE sd_flag SET slow = false" >/dev/null   # the first run has read it already
    stop_fast
    log "($tag) server stopped in ${STOP_SECS} s (vq.shutdown_grace_ms = 1000)"
    start_server
    awk -v s="$STOP_SECS" -v m="$max_secs" 'BEGIN { exit !(s <= m) }' ||
        fail_later "($tag) pg_ctl stop -m fast took ${STOP_SECS} s with a 1 s grace, expected <= $max_secs s"

    wait_for "SELECT state NOT IN ('ENQUEUED', 'RUNNING') FROM vq.job WHERE execution_id = '$id'" 20 \
        "($tag) job $id to end"
    tr="$(transition_kinds "$id")"
    log "($tag) job $id: $(q "SELECT state FROM vq.job WHERE execution_id = '$id'"), transitions: $tr"
    [[ "$tr" == "CLAIMED/0 INTERRUPTED/0 CLAIMED/0 COMPLETED/0" ]] ||
        fail "($tag) expected CLAIMED/0 INTERRUPTED/0 CLAIMED/0 COMPLETED/0 (a stop costs no attempt: the job was on its last one), found: $tr"
    err="$(q "SELECT from_state || ' -> ' || to_state || ': ' || coalesce(error, '<null>') FROM vq.job_transition
               WHERE execution_id = '$id' AND kind = 'INTERRUPTED'")"
    log "($tag) INTERRUPTED: $err"
    [[ "$err" == "RUNNING -> ENQUEUED: interrupted by a stop"*"attempt does not count" ]] ||
        fail "($tag) the INTERRUPTED transition should go RUNNING -> ENQUEUED saying the stop interrupted it, found: $err"
    e="$(q "SELECT string_agg(attempt_number::text, ',') FROM sd_effect WHERE execution_id = '$id'")"
    [[ "$e" == 0 ]] || fail "($tag) expected one effect row, from attempt 0, found attempts: '$e'"
    logs="$(q "SELECT string_agg(attempt_number || ':' || message, ', ' ORDER BY id) FROM vq.job_log
                WHERE execution_id = '$id'")"
    log "($tag) vq_log lines: $logs"
    [[ "$logs" == "0:long: attempt 0, 0:long: attempt 0" ]] ||
        fail_later "($tag) both runs' log lines should be kept (logs are flushed on every ending path, stop included), found: '$logs'"
    n="$(q "SELECT count(*) FROM vq.job WHERE state = 'RUNNING'")"
    ((n == 0)) || fail "($tag) $n job(s) left RUNNING"
}
stop_while_long c '{}' 5

log "(d) the same with a handler that swallows the cancel: its executor is terminated"
stop_while_long d '{"stubborn": true}' 7
reset_config vq.shutdown_grace_ms

fail_summary
log "PASS: worker shutdown"

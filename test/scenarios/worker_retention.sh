#!/usr/bin/env bash
# worker_retention.sh: executor 0 deletes finished jobs with their history and logs.
#   With vq.retention_finished = 5 s and vq.retention_dead_letter = 8 s (long enough for the
#   checks before them to run on a busy machine):
#    - COMPLETED (inline/visible) and CANCELLED (one enqueued, one ended by cooperative
#      cancellation while it ran) jobs disappear, with their vq.job_transition and vq.job_log rows in the same instant,
#      no sooner than finished_at + 5 s and within 3 s after that; DEAD_LETTER jobs the same
#      with 8 s;
#    - unfinished jobs are kept with their history: ENQUEUED in the future, ENQUEUED for a
#      retry (FAILED once), RUNNING a long handler (on executor 1, while executor 0 deletes).
#   With -1 for both settings nothing is deleted (3 s).
#   Under load, with vq.retention_finished = 0: 20,000 fast jobs (vq_enqueue_many); within
#   10 s after they all completed vq.job holds no COMPLETED row, and no transition or log row
#   is left without its job; 1,000 jobs enqueued while the deletion goes on all complete
#   within 5 s. Timings are printed.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
on_exit() {
    local rc=$?
    set +e
    # no long handler may outlive the script
    q "SELECT count(vq_cancel(execution_id)) FROM vq.running_jobs" >/dev/null 2>&1
    cleanup_configs
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# ---- helpers -------------------------------------------------------------------------------

# history EID: "<state> t=<transitions> l=<logs>" (state "gone" once the row is deleted).
history() {
    q "SELECT coalesce((SELECT state::text FROM vq.job WHERE execution_id = '$1'), 'gone')
              || ' t=' || (SELECT count(*) FROM vq.job_transition WHERE execution_id = '$1')
              || ' l=' || (SELECT count(*) FROM vq.job_log WHERE execution_id = '$1')"
}

# finished_ms EID: finished_at in ms since the epoch.
finished_ms() {
    q "SELECT (extract(epoch FROM finished_at) * 1000)::bigint FROM vq.job WHERE execution_id = '$1'"
}

orphans_sql="SELECT (SELECT count(*) FROM vq.job_transition t
                      WHERE NOT EXISTS (SELECT 1 FROM vq.job j WHERE j.execution_id = t.execution_id))
                    || ' transitions, ' ||
                    (SELECT count(*) FROM vq.job_log l
                      WHERE NOT EXISTS (SELECT 1 FROM vq.job j WHERE j.execution_id = l.execution_id))
                    || ' logs'"

# ---- objects -------------------------------------------------------------------------------
log "setup: queues, handlers"
qs >/dev/null <<'SQL'
-- a failed attempt is retried an hour later: the job stays ENQUEUED with its history
SELECT vq_create_queue('rq', sleep_delay_ms => 100, max_concurrent_jobs => 10, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => 3600000, backoff_max_delay_ms => 3600000);
SELECT vq_create_queue('bulk', sleep_delay_ms => 100, max_concurrent_jobs => 500);
CREATE TABLE ticks (execution_id uuid PRIMARY KEY);

CREATE FUNCTION h_ok(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'ok', jsonb_build_object('attempt', c.attempt_number));
END $$;
CREATE FUNCTION h_fail(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('WARN', 'about to fail');
    RAISE EXCEPTION 'planned failure of attempt %', c.attempt_number;
END $$;
-- runs until cancelled (at most 30 s)
CREATE FUNCTION h_long(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'long job');
    FOR i IN 1 .. 600 LOOP
        EXIT WHEN vq_job_cancelled();
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;
CREATE FUNCTION h_noop(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF (p ->> 'log')::boolean THEN
        PERFORM vq_log('DEBUG', 'noop');
    END IF;
END $$;
CREATE FUNCTION h_tick(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.ticks VALUES (c.execution_id);
    PERFORM vq_log('DEBUG', 'tick');
END $$;
SELECT vq_register_handler('ok', 'h_ok(jsonb, vq.job_context)', 'rq');
SELECT vq_register_handler('fail', 'h_fail(jsonb, vq.job_context)', 'rq');
SELECT vq_register_handler('long', 'h_long(jsonb, vq.job_context)', 'rq');
SELECT vq_register_handler('noop', 'h_noop(jsonb)', 'bulk');
SELECT vq_register_handler('tick', 'h_tick(jsonb, vq.job_context)', 'bulk');
SQL
wait_for "SELECT count(*) = 2 FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 \
    "the 2 executors of $PGDATABASE"

# ==== retention 5 s / 8 s =====================================================================
set_config vq.retention_finished 5
set_config vq.retention_dead_letter 8
# (the long job's log line stays unsaved while it runs: its history must read the same before and after)
set_config vq.progress_flush_interval_ms 0

# A long job RUNNING on executor 1 (executor 0 deletes): start two, one per executor, and let
# the one on executor 0 end by cooperative cancellation (it is CANCELLED, then deleted too).
log "two long jobs, one per executor"
r1="$(q "SELECT vq_enqueue('long', '{}')")"
r2="$(q "SELECT vq_enqueue('long', '{}')")"
wait_for "SELECT count(DISTINCT worker_pid) = 2 FROM vq.job
           WHERE execution_id IN ('$r1', '$r2') AND state = 'RUNNING'" 10 "both long jobs RUNNING"
on_ex0="$(q "SELECT j.execution_id FROM vq.job j JOIN pg_stat_activity a ON a.pid = j.worker_pid
              WHERE j.execution_id IN ('$r1', '$r2') AND split_part(a.application_name, ':', 1) = 'vq_job executor 0'")"
[[ -n "$on_ex0" ]] || fail "neither long job runs on 'vq_job executor 0' (both executors should be busy)"
if [[ "$on_ex0" == "$r1" ]]; then R0="$r1" R="$r2"; else R0="$r2" R="$r1"; fi
assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$R0')")" "vq_cancel of the long job on executor 0"
wait_state "$R0" CANCELLED 5
declare -A fin=()
fin[R0]="$(finished_ms "$R0")"

log "finished and unfinished jobs"
C="$(q "SELECT vq_enqueue('ok', '{}')")"
D="$(q "SELECT vq_enqueue('fail', '{}', max_attempts => 1)")"
F2="$(q "SELECT vq_enqueue('fail', '{}', max_attempts => 3)")"
X="$(q "SELECT vq_enqueue('ok', '{}', run_at => now() + interval '1 hour')")"
# shellcheck disable=SC2034  # F is read indirectly, as ${!n}
F="$(q "SELECT vq_enqueue('ok', '{}', run_at => now() + interval '1 hour')")"
assert_eq CANCELLED "$(q "SELECT vq_cancel('$X')")" "vq_cancel of a future job"
fin[X]="$(finished_ms "$X")"
wait_state "$C" COMPLETED 5
fin[C]="$(finished_ms "$C")"
wait_state "$D" DEAD_LETTER 5
fin[D]="$(finished_ms "$D")"
wait_for "SELECT state = 'ENQUEUED' AND attempt_number = 1 AND scheduled_at > now() + interval '50 minutes'
            FROM vq.job WHERE execution_id = '$F2'" 5 "job $F2 re-enqueued an hour later after a failure"

# what each job holds before retention (transitions: CLAIMED only for visible claims)
for v in "C:COMPLETED:[12]:1" "R0:CANCELLED:2:1" "D:DEAD_LETTER:[12]:1" "X:CANCELLED:1:0" \
         "F2:ENQUEUED:[12]:1" "F:ENQUEUED:0:0" "R:RUNNING:1:0"; do
    IFS=: read -r name st nt nl <<<"$v"
    h="$(history "${!name}")"
    [[ "$h" =~ ^$st\ t=$nt\ l=$nl$ ]] || fail "job $name (${!name}) before retention: expected $st t=$nt l=$nl, found $h"
done
assert_eq "vq_job executor 1" \
    "$(q "SELECT split_part(a.application_name, ':', 1) FROM vq.job j JOIN pg_stat_activity a ON a.pid = j.worker_pid
           WHERE j.execution_id = '$R'")" "executor of the long RUNNING job"
keep_before="$(for n in F F2 R; do echo "$n $(history "${!n}")"; done)"

# Watch the finished jobs go: when each row disappears, and that its transitions and logs
# went with it (never a moment with orphans).
declare -A ret=() gone=()
for n in C R0 X; do ret[$n]=5; done
ret[D]=8
for n in C R0 X D; do
    [[ -n "${fin[$n]:-}" ]] || fail "job $n has no finished_at (deleted before the checks could read it?)"
done
deadline=$((fin[D] + 8000 + 3000))
values=""
for n in C R0 X D; do values+="('$n', '${!n}'::uuid),"; done
watch_sql="SELECT coalesce(string_agg(v.n, ',' ORDER BY v.n) FILTER (WHERE j.execution_id IS NULL), '') || '|' ||
                  (SELECT count(*) FROM vq.job_transition t JOIN (VALUES ${values%,}) w(n, id) ON t.execution_id = w.id
                    WHERE NOT EXISTS (SELECT 1 FROM vq.job j2 WHERE j2.execution_id = w.id)) + 
                  (SELECT count(*) FROM vq.job_log l JOIN (VALUES ${values%,}) w(n, id) ON l.execution_id = w.id
                    WHERE NOT EXISTS (SELECT 1 FROM vq.job j2 WHERE j2.execution_id = w.id))
             FROM (VALUES ${values%,}) v(n, id) LEFT JOIN vq.job j ON j.execution_id = v.id"
log "waiting for C, R0, X (5 s) and D (8 s) to be deleted"
while ((${#gone[@]} < 4)); do
    IFS='|' read -r gone_list orphans <<<"$(q "$watch_sql")"
    t="$(now_ms)"
    assert_eq 0 "$orphans" "transitions/logs left by a deleted job (gone: $gone_list)"
    for n in ${gone_list//,/ }; do
        [[ -n "${gone[$n]:-}" ]] || gone[$n]="$t"
    done
    if ((t > deadline)); then
        fail "jobs not deleted in time: gone so far [${!gone[*]}] of C R0 X D"
    fi
    sleep 0.02
done
for n in C R0 X D; do
    age=$((gone[$n] - fin[$n]))
    log "job $n deleted $age ms after finished_at (retention ${ret[$n]} s)"
    ((age >= ret[$n] * 1000)) || fail "job $n deleted ${age} ms after finished_at, before its retention of ${ret[$n]} s"
    ((age <= ret[$n] * 1000 + 3000)) || fail "job $n deleted ${age} ms after finished_at, more than 3 s after its retention of ${ret[$n]} s"
done
keep_after="$(for n in F F2 R; do echo "$n $(history "${!n}")"; done)"
assert_eq "$keep_before" "$keep_after" "unfinished jobs and their history after retention"

log "end the long job"
assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$R')")" "vq_cancel of the long job"
wait_state "$R" CANCELLED 5

# ==== -1: keep everything =====================================================================
log "retention -1: nothing is deleted"
set_config vq.retention_finished -1
set_config vq.retention_dead_letter -1
C2="$(q "SELECT vq_enqueue('ok', '{}')")"
D2="$(q "SELECT vq_enqueue('fail', '{}', max_attempts => 1)")"
X2="$(q "SELECT vq_enqueue('ok', '{}', run_at => now() + interval '1 hour')")"
assert_eq CANCELLED "$(q "SELECT vq_cancel('$X2')")" "vq_cancel of a future job"
wait_state "$C2" COMPLETED 5
wait_state "$D2" DEAD_LETTER 5
assert_stays "SELECT (SELECT count(*) FROM vq.job) || ' jobs, ' || (SELECT count(*) FROM vq.job_transition)
                     || ' transitions, ' || (SELECT count(*) FROM vq.job_log) || ' logs'" 3 \
    "jobs, transitions and logs with retention -1"
for n in C2 D2 X2 R; do
    [[ "$(history "${!n}")" != gone* ]] || fail "job $n deleted with retention -1"
done

# ==== under load: retention 0 =================================================================
reset_config vq.retention_dead_letter
set_config vq.retention_finished 0
NBULK=20000 NTICK=1000
log "enqueue $NBULK fast jobs"
t0="$(now_ms)"
q "SELECT cardinality(vq_enqueue_many('noop', array_agg(jsonb_build_object('i', g, 'log', g % 10 = 0))))
     FROM generate_series(1, $NBULK) g" >/dev/null
t_enq="$(now_ms)"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE handler = 'noop' AND state IN ('ENQUEUED', 'RUNNING'))" 40 \
    "all $NBULK jobs finished"
t_done="$(now_ms)"
IFS='|' read -r backlog dead <<<"$(q "SELECT count(*) FILTER (WHERE state = 'COMPLETED') || '|' ||
                                            count(*) FILTER (WHERE state = 'DEAD_LETTER')
                                       FROM vq.job WHERE handler = 'noop'")"
assert_eq 0 "$dead" "bulk jobs dead-lettered"
log "$NBULK jobs done $((t_done - t0)) ms after the enqueue began (enqueue took $((t_enq - t0)) ms); $backlog COMPLETED rows left to delete"

if ((backlog > 0)); then
    # enqueue the next jobs as soon as the deletion has begun
    wait_for "SELECT count(*) < $backlog FROM vq.job WHERE state = 'COMPLETED'" 10 \
        "retention to start deleting the $backlog COMPLETED rows"
fi
log "enqueue $NTICK more jobs while the deletion goes on ($(q "SELECT count(*) FROM vq.job WHERE state = 'COMPLETED'") COMPLETED rows left)"
q "SELECT cardinality(vq_enqueue_many('tick', array_agg('{}'::jsonb))) FROM generate_series(1, $NTICK)" >/dev/null
t_tick0="$(now_ms)"
wait_for "SELECT count(*) = $NTICK FROM ticks" 5 "the $NTICK jobs enqueued during the deletion completed"
t_ticks="$(now_ms)"
left_ms=$((t_done + 10000 - $(now_ms)))
((left_ms > 0)) || left_ms=1
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE state = 'COMPLETED')" \
    "$(awk -v m="$left_ms" 'BEGIN { printf "%.3f", m / 1000 }')" \
    "no COMPLETED job left, within 10 s after the $NBULK jobs finished"
t_clean="$(now_ms)"
assert_eq "0 transitions, 0 logs" "$(q "$orphans_sql")" "transitions/logs whose job was deleted"
# retention_finished does not apply to dead letters (7 days by default) nor to unfinished jobs
[[ "$(history "$D2")" == "DEAD_LETTER t="[12]" l=1" ]] ||
    fail "dead-lettered job D2 with vq.retention_finished = 0: expected kept, found $(history "$D2")"
for n in F F2; do
    [[ "$(history "${!n}")" == ENQUEUED* ]] || fail "job $n with vq.retention_finished = 0: expected ENQUEUED, found $(history "${!n}")"
done
log "the $NTICK jobs completed $((t_ticks - t_tick0)) ms after their enqueue; no COMPLETED row $((t_clean - t_done)) ms after the $NBULK jobs finished"
log "PASS worker_retention"

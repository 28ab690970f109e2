#!/usr/bin/env bash
# worker_operations.sh: the operations functions with live executors.
#   - pause / resume: jobs of a paused queue (sleep_delay_ms = 60000, so only a wake-up can start
#     them quickly) stay ENQUEUED and show as due in vq.queue_stats and vq_metrics(); after
#     vq_resume_queue they all complete within 3 s (the resume wakes the executors); a rolled-back
#     resume leaves the queue paused and the jobs waiting.
#   - dead letter and re-drive: a handler that fails while a flag is set dead-letters its jobs
#     (max_attempts 1); vq.dead_letters and vq.queue_stats count them; with the flag cleared,
#     vq_redrive(execution_id) brings one back (attempt 0, a REDRIVEN transition) and it completes
#     within 3 s; vq_redrive(handler => ...) brings the rest; a second re-drive finds nothing; a
#     re-drive by a role without the grant is refused.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
ROLE="vq_ops_stranger_$$"
on_exit() {
    local rc=$?
    set +e
    drop_roles "$ROLE"
    cleanup_configs
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

log "setup: queues (sleep_delay_ms 60000), a handler that fails while ops_flag.fail is set"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('pq', sleep_delay_ms => 60000);
SELECT vq_create_queue('dq', sleep_delay_ms => 60000);
CREATE TABLE ops_flag (fail boolean NOT NULL);
INSERT INTO ops_flag VALUES (true);
CREATE TABLE ops_runs (n int PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION h_ops(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ctx.queue = 'dq' AND (SELECT fail FROM ops_flag) THEN
        RAISE EXCEPTION 'ops failure %', payload->>'n';
    END IF;
    INSERT INTO ops_runs (n) VALUES ((payload->>'n')::int);
END $$;
SELECT vq_register_handler('ops_p', 'h_ops(jsonb, vq.job_context)', queue => 'pq');
SELECT vq_register_handler('ops_d', 'h_ops(jsonb, vq.job_context)', queue => 'dq', max_attempts => 1);
SQL

# ---- pause / resume ----------------------------------------------------------------------
log "pause: 20 jobs of a paused queue wait"
q "SELECT vq_pause_queue('pq')" >/dev/null
q "SELECT count(vq_enqueue('ops_p', jsonb_build_object('n', g))) FROM generate_series(1, 20) g" >/dev/null
wait_for "SELECT due = 20 AND paused FROM vq.queue_stats WHERE queue = 'pq'" 5 "vq.queue_stats shows 20 due jobs of the paused queue"
assert_eq 't' "$(q "SELECT 'vq_jobs{queue=\"pq\",state=\"due\",scope=\"all\"} 20' IN (SELECT * FROM vq_metrics())")" \
    "vq_metrics() reports the 20 due jobs"
assert_stays "SELECT count(*) FROM ops_runs" 1 "runs while the queue is paused"
assert_eq 20 "$(q "SELECT count(*) FROM vq.job WHERE queue = 'pq' AND state = 'ENQUEUED'")" "jobs still ENQUEUED"

log "a rolled-back resume changes nothing"
q "BEGIN; SELECT vq_resume_queue('pq'); ROLLBACK;" >/dev/null
assert_stays "SELECT count(*) FROM ops_runs" 1 "runs after a rolled-back resume"
assert_eq t "$(q "SELECT paused FROM vq.queue WHERE name = 'pq'")" "queue paused after the rolled-back resume"

log "resume: the jobs run at once (not at the next poll, 60 s away)"
t0="$(now_ms)"
q "SELECT vq_resume_queue('pq')" >/dev/null
wait_for "SELECT count(*) = 20 FROM vq.job WHERE queue = 'pq' AND state = 'COMPLETED'" 3 \
    "all 20 jobs COMPLETED within 3 s of vq_resume_queue"
log "  all 20 completed $(($(now_ms) - t0)) ms after the resume"
wait_for "SELECT due = 0 AND completed = 20 AND NOT paused FROM vq.queue_stats WHERE queue = 'pq'" 5 \
    "vq.queue_stats after the resume"

# ---- dead letter and re-drive ------------------------------------------------------------
log "dead letter: 5 jobs fail with max_attempts 1"
q "SELECT count(vq_enqueue('ops_d', jsonb_build_object('n', 100 + g))) FROM generate_series(1, 5) g" >/dev/null
wait_for "SELECT count(*) = 5 FROM vq.dead_letters WHERE handler = 'ops_d'" 10 "5 dead letters"
assert_eq 5 "$(q "SELECT dead_letter FROM vq.queue_stats WHERE queue = 'dq'")" "dead_letter count in vq.queue_stats"
assert_eq 5 "$(q "SELECT count(*) FROM vq.dead_letters WHERE last_error LIKE 'ops failure 10_'")" "last_error of the dead letters"

log "a role without the grant cannot re-drive"
q "CREATE ROLE $ROLE LOGIN" >/dev/null
out="$(psql -XAtq -U "$ROLE" -c "SELECT vq_redrive(handler => 'ops_d')" 2>&1 || true)"
[[ "$out" == *"permission denied"* ]] || fail "vq_redrive by $ROLE: expected permission denied, got [$out]"
assert_eq 5 "$(q "SELECT count(*) FROM vq.dead_letters WHERE handler = 'ops_d'")" "dead letters after the refused re-drive"

log "re-drive one job by execution id (flag cleared): it runs at once"
q "UPDATE ops_flag SET fail = false" >/dev/null
one="$(q "SELECT execution_id FROM vq.dead_letters WHERE handler = 'ops_d' ORDER BY execution_id LIMIT 1")"
assert_eq 1 "$(q "SELECT vq_redrive('$one'::uuid)")" "vq_redrive(execution_id) result"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$one'" 3 "the re-driven job COMPLETED within 3 s"
assert_eq "0|1|1" "$(q "SELECT j.attempt_number || '|' ||
        (SELECT count(*) FROM vq.job_transition t WHERE t.execution_id = j.execution_id AND t.kind = 'REDRIVEN') || '|' ||
        (SELECT count(*) FROM vq.job_transition t WHERE t.execution_id = j.execution_id AND t.kind = 'COMPLETED')
        FROM vq.job j WHERE j.execution_id = '$one'")" "attempt, REDRIVEN and COMPLETED transitions of the re-driven job"
assert_eq 4 "$(q "SELECT count(*) FROM vq.dead_letters WHERE handler = 'ops_d'")" "dead letters left"

log "re-drive the rest by handler"
assert_eq 4 "$(q "SELECT vq_redrive(handler => 'ops_d')")" "vq_redrive(handler) result"
wait_for "SELECT count(*) = 5 FROM vq.job WHERE handler = 'ops_d' AND state = 'COMPLETED'" 3 "all 5 COMPLETED within 3 s"
assert_eq 5 "$(q "SELECT count(*) FROM ops_runs WHERE n BETWEEN 101 AND 105")" "runs of the re-driven jobs"
assert_eq 0 "$(q "SELECT vq_redrive(handler => 'ops_d')")" "a second re-drive finds nothing"
wait_for "SELECT dead_letter = 0 AND completed = 5 FROM vq.queue_stats WHERE queue = 'dq'" 5 "vq.queue_stats after the re-drive"
log "PASS"

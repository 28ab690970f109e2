#!/usr/bin/env bash
# worker_timing.sh: when the executors start jobs, and how many at once.
#   - future jobs: 50 jobs due 100..1500 ms ahead (queue sleep_delay_ms = 60000, so only the
#     next-due wake-up can start them) never start before scheduled_at, and start within
#     300 ms of it;
#   - commit wake-up (queue sleep_delay_ms = 60000): with the executors idle, a committed
#     enqueue starts within 200 ms; a transaction that enqueues then waits 1 s starts its job
#     only after COMMIT (and within 200 ms of it); a rolled-back enqueue runs nothing; a job
#     due 2 s ahead starts within 200 ms of its scheduled_at;
#   - capacity (vq.executors_per_database = 3, handlers sleeping 300 ms): instances 1 x
#     max_concurrent_jobs 1 never runs two at once; vq_alter_queue to instances 2 runs exactly
#     two at once in distinct executor processes, then max_concurrent_jobs 3 three at once,
#     without restarting the executors; executors waiting for capacity do not spin.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
on_exit() {
    local rc=$?
    cleanup_configs
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# ms SQL_INTERVAL_EXPRESSION...: a SELECT list item giving the interval in whole ms.
ms() { echo "round(extract(epoch FROM ($1)) * 1000)::int"; }

log "setup: queues (sleep_delay_ms 60000), runs table, handler"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('tq', sleep_delay_ms => 60000);
SELECT vq_create_queue('wq', sleep_delay_ms => 60000);
SELECT vq_create_queue('cq', sleep_delay_ms => 200, max_concurrent_jobs => 1, instances => 1);
CREATE TABLE runs (
    id            bigserial PRIMARY KEY,
    tag           text NOT NULL,
    execution_id  uuid NOT NULL,
    scheduled_at  timestamptz NOT NULL,   -- from the job_context
    started_at    timestamptz NOT NULL,   -- clock_timestamp() when the handler began
    ended_at      timestamptz NOT NULL,
    pid           int NOT NULL
);
CREATE TABLE marks (tag text PRIMARY KEY, at timestamptz NOT NULL);
CREATE FUNCTION h_rec(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    IF p ? 'sleep_ms' THEN
        PERFORM pg_sleep((p ->> 'sleep_ms')::float8 / 1000);
    END IF;
    INSERT INTO runs (tag, execution_id, scheduled_at, started_at, ended_at, pid)
    VALUES (p ->> 'tag', c.execution_id, c.scheduled_at, t0, clock_timestamp(), pg_backend_pid());
END $$;
SELECT vq_register_handler('rec', 'h_rec(jsonb, vq.job_context)');
SQL

# wait_idle QUEUE: nothing of QUEUE is enqueued or running, and no executor runs anything.
wait_idle() {
    wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE queue = '$1' AND state IN ('ENQUEUED', 'RUNNING'))
              AND NOT EXISTS (SELECT 1 FROM vq.running_jobs)" 10 "queue $1 and the executors idle"
}

# =============================================================================================
log "future jobs: 50 jobs due 100..1500 ms ahead start on time, never early"
q "SELECT count(vq_enqueue('rec', jsonb_build_object('tag', 'future-' || i),
                           clock_timestamp() + make_interval(secs => (100 + (i - 1) * 1400.0 / 49) / 1000), 'tq'))
     FROM generate_series(1, 50) i" >/dev/null
wait_for "SELECT count(*) = 50 FROM runs WHERE tag LIKE 'future-%'" 6 "the 50 future jobs to run"
assert_eq 0 "$(q "SELECT count(*) FROM runs r JOIN vq.job j USING (execution_id)
                   WHERE r.tag LIKE 'future-%' AND (r.scheduled_at <> j.scheduled_at OR j.state <> 'COMPLETED')")" \
    "future jobs completed, with the job_context scheduled_at of their row"
v="$(q "SELECT string_agg(tag || ' started ' || $(ms "started_at - scheduled_at") || ' ms', ', ' ORDER BY id)
          FROM runs WHERE tag LIKE 'future-%' AND started_at < scheduled_at")"
assert_eq "" "$v" "future jobs that started before their scheduled_at"
stats="$(q "SELECT $(ms "min(started_at - scheduled_at)") || ' ' || $(ms "avg(started_at - scheduled_at)") || ' ' ||
                   $(ms "max(started_at - scheduled_at)")
              FROM runs WHERE tag LIKE 'future-%'")"
read -r lmin lavg lmax <<<"$stats"
log "  lateness after scheduled_at: min $lmin ms, avg $lavg ms, max $lmax ms"
((lmax <= 300)) || fail "a future job started $lmax ms after its scheduled_at (bound 300 ms; min $lmin, avg $lavg)"

# =============================================================================================
log "commit wake-up: queue wq polls every 60 s; a committed enqueue starts at once"
lat=()
for i in 1 2 3 4 5; do
    wait_idle wq
    qs >/dev/null <<SQL
BEGIN;
SELECT vq_enqueue('rec', '{"tag": "wake-$i"}', NULL, 'wq');
INSERT INTO marks VALUES ('wake-$i', clock_timestamp());
COMMIT;
SQL
    wait_for "SELECT EXISTS (SELECT 1 FROM runs WHERE tag = 'wake-$i')" 5 "job wake-$i to run"
    read -r v after <<<"$(q "SELECT $(ms "r.started_at - m.at") || ' ' || (r.started_at > m.at)
                               FROM runs r JOIN marks m USING (tag) WHERE tag = 'wake-$i'")"
    [[ "$after" == true ]] || fail "job wake-$i started before the end of its enqueuing transaction ($v ms)"
    ((v <= 200)) || fail "job wake-$i started $v ms after its enqueue committed (expected <= 200)"
    lat+=("$v")
done
log "  start after commit: ${lat[*]} ms"

log "a transaction that enqueues and waits 1 s: its job starts only after COMMIT"
wait_idle wq
qs >/dev/null <<'SQL'
BEGIN;
SELECT vq_enqueue('rec', '{"tag": "late-commit"}', NULL, 'wq');
SELECT pg_sleep(1);
INSERT INTO marks VALUES ('late-commit', clock_timestamp());
COMMIT;
SQL
wait_for "SELECT EXISTS (SELECT 1 FROM runs WHERE tag = 'late-commit')" 5 "job late-commit to run"
v="$(q "SELECT $(ms "r.started_at - m.at") || ' ' || (r.started_at > m.at) || ' ' || $(ms "m.at - r.scheduled_at")
          FROM runs r JOIN marks m USING (tag) WHERE tag = 'late-commit'")"
read -r after started_after due_before <<<"$v"
[[ "$started_after" == true ]] || fail "job late-commit started ${after} ms after the last statement before COMMIT (must be after it)"
((after <= 200)) || fail "job late-commit started $after ms after its COMMIT (expected <= 200)"
((due_before >= 1000)) || fail "job late-commit was due only $due_before ms before its commit (expected >= 1000: due at enqueue)"
log "  started $after ms after COMMIT (it had been due for $due_before ms)"

log "a rolled-back enqueue runs nothing"
qs >/dev/null <<'SQL'
BEGIN;
SELECT vq_enqueue('rec', '{"tag": "rolled-back"}', NULL, 'wq');
ROLLBACK;
SQL
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'tag' = 'rolled-back'")" "job rows of a rolled-back enqueue"
assert_stays "SELECT count(*) FROM runs WHERE tag = 'rolled-back'" 0.7 "runs of a rolled-back enqueue"
assert_eq 0 "$(q "SELECT count(*) FROM runs WHERE tag = 'rolled-back'")" "runs of a rolled-back enqueue"

log "a job due 2 s ahead (queue polls every 60 s) starts within 200 ms of its time"
wait_idle wq
q "SELECT vq_enqueue('rec', '{\"tag\": \"due-2s\"}', clock_timestamp() + interval '2 s', 'wq')" >/dev/null
wait_for "SELECT EXISTS (SELECT 1 FROM runs WHERE tag = 'due-2s')" 5 "job due-2s to run"
v="$(q "SELECT $(ms "started_at - scheduled_at") || ' ' || (started_at >= scheduled_at) FROM runs WHERE tag = 'due-2s'")"
read -r late not_early <<<"$v"
[[ "$not_early" == true ]] || fail "job due-2s started before its scheduled_at ($late ms)"
((late <= 200)) || fail "job due-2s started $late ms after its scheduled_at (expected <= 200)"
log "  started $late ms after scheduled_at"

# =============================================================================================
log "capacity: 3 executors; queue cq with instances 1, max_concurrent_jobs 1"
set_config vq.executors_per_database 3
wait_for "SELECT count(*) = 3 FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'vq_job executor'" \
    10 "3 executors serving this database"
# the three that always run (more may start on demand while all three run jobs, and exit after idling)
BASE_PIDS="SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
            WHERE datname = current_database() AND backend_type = 'vq_job executor'
              AND split_part(application_name, ':', 1) IN ('vq_job executor 0', 'vq_job executor 1', 'vq_job executor 2')"
pids_before="$(q "$BASE_PIDS")"

# cpu_ticks: user + system clock ticks used so far by this database's executors ('' if unknown).
cpu_ticks() {
    local pid total=0 f
    for pid in ${pids_before//,/ }; do
        f="/proc/$pid/stat"
        [[ -r "$f" ]] || { echo ""; return; }
        # fields after the command name (which is in parentheses): utime and stime are 12th and 13th
        total=$((total + $(sed -E 's/^.*\) //' "$f" | awk '{ print $12 + $13 }')))
    done
    echo "$total"
}

# run_batch TAG: 6 jobs of 300 ms on queue cq, enqueued together; waits for them.
run_batch() {
    q "SELECT count(vq_enqueue('rec', jsonb_build_object('tag', '$1-' || i, 'sleep_ms', 300), NULL, 'cq'))
         FROM generate_series(1, 6) i" >/dev/null
    wait_for "SELECT count(*) = 6 FROM runs WHERE tag LIKE '$1-%'" 15 "the 6 jobs $1-* to run"
}
# overlap TAG: the most runs of TAG-* in progress at one instant, and the number of
# overlapping pairs that ran in distinct processes.
overlap() {
    q "SELECT (SELECT max(n) FROM (SELECT count(*) AS n FROM runs a JOIN runs b
                                    ON b.tag LIKE '$1-%' AND b.started_at <= a.started_at AND b.ended_at > a.started_at
                                 WHERE a.tag LIKE '$1-%' GROUP BY a.id) s)
           || ' ' ||
           (SELECT count(*) FROM runs a JOIN runs b ON a.id < b.id AND a.started_at < b.ended_at AND b.started_at < a.ended_at
             WHERE a.tag LIKE '$1-%' AND b.tag LIKE '$1-%' AND a.pid <> b.pid)
           || ' ' || $(ms "max(ended_at) - min(started_at)") FROM runs WHERE tag LIKE '$1-%'"
}

t0=$(date +%s%N)
ticks0="$(cpu_ticks)"
run_batch one
ticks1="$(cpu_ticks)"
wall_ms=$((($(date +%s%N) - t0) / 1000000))
read -r most pairs span <<<"$(overlap one)"
log "  instances 1 x max_concurrent_jobs 1: at most $most at once, 6 jobs in $span ms"
assert_eq 1 "$most" "jobs of queue cq (capacity 1) running at once"
((span >= 1800)) || fail "6 serialized jobs of 300 ms took only $span ms"
if [[ -n "$ticks0" && -n "$ticks1" ]]; then
    hz="$(getconf CLK_TCK)"
    cpu_ms=$(((ticks1 - ticks0) * 1000 / hz))
    log "  executors used $cpu_ms ms of CPU in $wall_ms ms while the queue was at capacity"
    # the handlers sleep; executors waiting for capacity should sleep too, not poll in a loop
    # (checked at the end, so that the capacity checks below still run)
    if ((cpu_ms * 4 > wall_ms)); then
        fail_later "executors used $cpu_ms ms of CPU in $wall_ms ms while every running job slept: executors waiting for capacity spin instead of sleeping"
    fi
else
    log "  (executor CPU time not measurable here: /proc/PID/stat not readable)"
fi

log "vq_alter_queue cq instances 2: exactly two at once, in distinct executors"
q "SELECT vq_alter_queue('cq', instances => 2)" >/dev/null
run_batch two
read -r most pairs span <<<"$(overlap two)"
log "  instances 2 x max_concurrent_jobs 1: at most $most at once ($pairs overlapping pairs in distinct processes), $span ms"
assert_eq 2 "$most" "jobs of queue cq (capacity 2) running at once"
((pairs >= 1)) || fail "no two jobs of queue cq (capacity 2) overlapped in distinct processes"

log "vq_alter_queue cq instances 1, max_concurrent_jobs 3: three at once"
q "SELECT vq_alter_queue('cq', instances => 1, max_concurrent_jobs => 3)" >/dev/null
run_batch three
read -r most pairs span <<<"$(overlap three)"
log "  instances 1 x max_concurrent_jobs 3: at most $most at once ($pairs overlapping pairs in distinct processes), $span ms"
assert_eq 3 "$most" "jobs of queue cq (capacity 3) running at once"

assert_eq 0 "$(q "SELECT count(*) FROM runs r WHERE r.tag ~ '^(one|two|three)-'
                   AND r.pid NOT IN (SELECT pid FROM pg_stat_activity
                                      WHERE datname = current_database() AND backend_type = 'vq_job executor')")" \
    "jobs run by processes other than this database's executors"
assert_eq "$pids_before" "$(q "$BASE_PIDS")" \
    "executor processes 0-2 (configuration changes must not restart them)"

fail_summary
log "PASS"

#!/usr/bin/env bash
# executor_quiet.sh: executors leave running jobs and running handlers alone.
#   1. the orphan rescue locks no live job: while one executor runs a long job visibly and
#      the other runs slow jobs inline (so its transactions last), a session that tries to
#      lock the long job's row with NOWAIT every 50 ms never finds it locked, and the long job
#      is recorded COMPLETED as soon as its handler returns.
#   2. the execution-timeout watch is one timer armed for the deadline: a handler sleeping
#      for 3 s is not woken in between (its process makes a handful of voluntary context
#      switches in 2 s, not one per 50 ms).
#   3. an idle database's executors wake no more often than its queue's poll interval: in a
#      second database whose only queue polls every 5 s (the default queue), after one job
#      ran (so the cancel poll of a handler was armed and disarmed) and once the executors
#      slept 1.5 s in a row (longer than the housekeeping tick that follows work), each
#      executor makes at most 2 voluntary context switches (the sleep a wake ends, and a lock
#      wait) per wake the poll interval allows over a 15-s sample: 2 x (15 / 5 + 1) = 8.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

IDLE_DB="${PGDATABASE}_idle"
cleanup() {
    set +e
    cleanup_configs
    PGOPTIONS='-c client_min_messages=warning' dropdb --if-exists --force "$IDLE_DB" >/dev/null 2>&1
}
trap cleanup EXIT

log "setup: two executors, every handler inline after its first run"
set_config vq.executors_per_database 2
set_config vq.inline_handler_ms 60000
qs >/dev/null <<'SQL'
SELECT vq_create_queue('eq_q', sleep_delay_ms => 200, max_concurrent_jobs => 50);
CREATE FUNCTION public.eq_sleep(p jsonb) RETURNS void LANGUAGE plpgsql
    AS $$ BEGIN PERFORM pg_sleep((p ->> 'secs')::float8); END $$;
SELECT vq_register_handler('eq_long', 'public.eq_sleep(jsonb)', queue => 'eq_q');
SELECT vq_register_handler('eq_busy', 'public.eq_sleep(jsonb)', queue => 'eq_q');
SQL
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
           AND datname = current_database()" 20 "two executors serving the database"

# ---- 1. the orphan rescue does not lock live jobs ------------------------------------------
log "1. eq_busy runs once visibly (its first run), later ones inline"
id="$(q "SELECT vq_enqueue('eq_busy', '{\"secs\": 0.01}')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 10 "eq_busy warm-up"

log "1. a long job runs visibly in one executor"
long="$(q "SELECT vq_enqueue('eq_long', '{\"secs\": 7}')")"
wait_for "SELECT state = 'RUNNING' AND worker_pid IS NOT NULL FROM vq.job WHERE execution_id = '$long'" 10 \
    "the long job RUNNING"
q "SELECT vq_enqueue_many('eq_busy', array_fill('{\"secs\": 0.3}'::jsonb, ARRAY[25]))" >/dev/null

log "1. probe the long job's row lock for 4 s while the other executor works inline"
probe="$(q "DO \$\$
DECLARE
    locked int := 0;
BEGIN
    FOR i IN 1..80 LOOP
        BEGIN
            PERFORM 1 FROM vq.job WHERE execution_id = '$long' FOR UPDATE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            locked := locked + 1;
        END;
        COMMIT;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RAISE NOTICE 'locked=%', locked;
END \$\$" -v VERBOSITY=terse 2>&1)"
busy_done="$(q "SELECT count(*) FROM vq.job WHERE handler = 'eq_busy' AND state = 'COMPLETED'")"
((busy_done > 3)) || fail "the other executor completed only $busy_done eq_busy jobs during the probe (expected it busy)"
assert_eq "NOTICE:  locked=0" "$probe" "probes that found the long job's row locked by an executor"

log "1. the long job is recorded COMPLETED as soon as its handler returns"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$long'" 15 "the long job COMPLETED"
assert_sql "SELECT finished_at - started_at < interval '7.5 s' FROM vq.job WHERE execution_id = '$long'" \
    "the long job's outcome was written without waiting for another executor's transaction"
wait_for "SELECT count(*) = 26 FROM vq.job WHERE handler = 'eq_busy' AND state = 'COMPLETED'" 30 \
    "every eq_busy job COMPLETED"

# ---- 2. one timer for the execution deadline ------------------------------------------------
log "2. a handler sleeping 3 s is not woken by a watch timer"
reset_config vq.inline_handler_ms   # eq_long (7 s) is claimed visibly again: it shows its pid
id="$(q "SELECT vq_enqueue('eq_long', '{\"secs\": 3}')")"
wait_for "SELECT state = 'RUNNING' AND worker_pid IS NOT NULL FROM vq.job WHERE execution_id = '$id'" 10 \
    "the sleeping job RUNNING"
pid="$(q "SELECT worker_pid FROM vq.job WHERE execution_id = '$id'")"
switches() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$pid/status"; }
before="$(switches)"
sleep 2
after="$(switches)"
q "SELECT 1 FROM vq.job WHERE execution_id = '$id' AND state = 'RUNNING'" | grep -q 1 ||
    fail "the sleeping job ended before the 2-s sample was over"
(((after - before) <= 10)) ||
    fail "the executor running a sleeping handler woke $((after - before)) times in 2 s (a periodic watch timer?)"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 10 "the sleeping job COMPLETED"

# ---- 3. an idle database's executors sleep through their poll interval --------------------
log "3. a second database, idle after one job"
createdb "$IDLE_DB" || fail "createdb $IDLE_DB failed"
PGDATABASE="$IDLE_DB" qs >/dev/null <<'SQL'
CREATE EXTENSION vq_job;
CREATE FUNCTION public.eq_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('eq_noop', 'public.eq_noop(jsonb)');
SQL
id="$(PGDATABASE="$IDLE_DB" q "SELECT vq_enqueue('eq_noop', '{}')")"
PGDATABASE="$IDLE_DB" wait_state "$id" COMPLETED 15
poll_ms="$(PGDATABASE="$IDLE_DB" q "SELECT max(sleep_delay_ms) || '|' || count(*) FROM vq.queue")"
[[ "$poll_ms" == "5000|1" ]] || fail "the idle database should have one queue polling every 5 s, found [$poll_ms] (ms|queues)"
poll_ms=5000
idle_executors="SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '$IDLE_DB'"
wait_for "SELECT count(*) = 2 AND bool_and(wait_event = 'Extension') FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = '$IDLE_DB'" 15 "both executors of $IDLE_DB asleep"
mapfile -t pids < <(q "$idle_executors")
switches_of() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/status"; }
counters() { local p; for p in "${pids[@]}"; do printf '%s ' "$(switches_of "$p")"; done; }
# settled: no executor woke for longer than the housekeeping tick (1 s) that follows work
deadline=$(($(now_ms) + 20000)) seen="$(counters)" since="$(now_ms)"
while (($(now_ms) - since < 1500)); do
    (($(now_ms) < deadline)) || fail "the executors of $IDLE_DB never slept 1.5 s in a row within 20 s (switches: $seen)"
    sleep 0.05
    now="$(counters)"
    [[ "$now" == "$seen" ]] || { seen="$now"; since="$(now_ms)"; }
done
sample_ms=15000
declare -A before=()
for p in "${pids[@]}"; do
    before[$p]="$(switches_of "$p")"
done
t0="$(now_ms)"
wait_for "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint >= $((t0 + sample_ms))" 20 "the end of the sample"
elapsed_ms=$(($(now_ms) - t0))
bound=$((2 * (elapsed_ms / poll_ms + 1)))
for p in "${pids[@]}"; do
    [[ -r "/proc/$p/status" ]] || fail "executor $p of $IDLE_DB exited during the sample"
    n=$(($(switches_of "$p") - before[$p]))
    log "executor $p: $n voluntary context switches in $elapsed_ms ms (bound $bound: poll every $poll_ms ms)"
    ((n <= bound)) || fail "executor $p of an idle database woke $n times in $elapsed_ms ms; its poll interval ($poll_ms ms) allows $bound"
done
log "PASS"

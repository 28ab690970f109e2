#!/usr/bin/env bash
# executor_quiet.sh: executors leave running jobs and running handlers alone.
#   1. the orphan rescue locks no live job: while one executor runs a long job visibly and
#      the other runs slow jobs inline (so its transactions last), a session that tries to
#      lock the long job's row with NOWAIT every 50 ms never finds it locked, and the long job
#      is recorded COMPLETED as soon as its handler returns.
#   2. the execution-timeout watch is one timer armed for the deadline: a handler sleeping
#      for 3 s is not woken in between (its process makes a handful of voluntary context
#      switches in 2 s, not one per 50 ms).
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

trap cleanup_configs EXIT

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
log "PASS"

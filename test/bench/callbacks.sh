#!/usr/bin/env bash
# test/bench/callbacks.sh — what administrators' callbacks cost the drain.
#
# Drain of BENCH_CALLBACK_JOBS (default 50,000) due no-op PL/pgSQL jobs with 2 executors and
# vq.batch_size 500, in three set-ups, interleaved over BENCH_ROUNDS rounds (default 3):
#   none         no callback registered
#   interceptor  one interceptor whose on_dispatch and on_complete are no-op PL/pgSQL functions
#   listener     one transition listener (a no-op PL/pgSQL function) subscribed to everything
# rate = N / (max(finished_at) - T), the backlog loaded in one transaction due at T = load start
# + BENCH_DRAIN_DELAY s (default 4), as in workers.sh; and the executors' CPU time per job (user +
# system, from /proc; vq.max_executors = 2 keeps the set of executors fixed), which other load on
# a shared machine disturbs far less than the rate. Prints each run and the medians with their
# ratio to "none" (for CPU: none's CPU per job / the set-up's, i.e. the rate ratio on an idle
# machine). Goal: interceptor >= 0.8 x none.
#
# Run by ./scripts/bench (VQ_TEST_ONLY=callbacks): a fresh durable cluster, vq_job preloaded;
# creates the database vq_bench_callbacks and drops it at the end; settings reset even on error.
set -euo pipefail

PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
DB=vq_bench_callbacks
PARTS=""
CHANGED_SETTINGS=()
N="${BENCH_CALLBACK_JOBS:-50000}"
ROUNDS="${BENCH_ROUNDS:-3}"
DELAY="${BENCH_DRAIN_DELAY:-4}"
# shellcheck source=test/bench/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

die() { echo "callbacks bench: ERROR: $*" >&2; exit 1; }
cleanup() {
    local rc=$?
    set +e
    reset_gucs 2>/dev/null
    PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
    exit "$rc"
}
trap cleanup EXIT

# wait_sql SQL SECS WHAT: poll SQL (a boolean) every 50 ms until true, or die after SECS.
wait_sql() {
    local end=$((SECONDS + $2))
    until [[ "$(q "$1" 2>/dev/null)" == t ]]; do
        ((SECONDS < end)) || die "timed out after $2 s waiting for $3"
        sleep 0.05
    done
}

PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
"$PG_BIN/createdb" "$DB"
"${PSQL[@]}" -d "$DB" >/dev/null <<'SQL'
CREATE EXTENSION vq_job;
SELECT vq_create_queue('bench', sleep_delay_ms => 100, max_concurrent_jobs => 10000);
CREATE FUNCTION noop(p jsonb) RETURNS void LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
SELECT vq_register_handler('noop', 'noop(jsonb)', queue => 'bench');
CREATE FUNCTION on_dispatch(c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
CREATE FUNCTION on_complete(c vq.job_context, o text, e text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
CREATE FUNCTION on_transition(t vq.job_transition, j vq.job) RETURNS void LANGUAGE plpgsql AS $$ BEGIN NULL; END $$;
ALTER TABLE vq.job_active SET (autovacuum_enabled = off);
ALTER TABLE vq.job_finished SET (autovacuum_enabled = off);
SQL
set_guc vq.executors_per_database 2
set_guc vq.batch_size 500
set_guc vq.max_executors 2
wait_sql "SELECT count(*) = 2 FROM pg_stat_activity WHERE datname = current_database()
          AND backend_type = 'vq_job executor'" 30 "2 executors"

# setup NAME: register the callbacks of set-up NAME only.
setup() {
    q "SELECT vq_unregister_interceptor('bench'), vq_unregister_transition_listener('bench')" >/dev/null
    case "$1" in
        interceptor) q "SELECT vq_register_interceptor('bench', 'on_dispatch(vq.job_context)',
                                                       'on_complete(vq.job_context, text, text)')" >/dev/null ;;
        listener) q "SELECT vq_register_transition_listener('bench', 'on_transition(vq.job_transition, vq.job)')" >/dev/null ;;
    esac
}

# executor_cpu: the CPU time (clock ticks, user + system) of this database's executors so far.
executor_cpu() {
    local pid total=0 f
    for pid in $(q "SELECT pid FROM pg_stat_activity WHERE datname = current_database()
                     AND backend_type = 'vq_job executor'"); do
        read -r -a f < <(cut -d' ' -f14,15 "/proc/$pid/stat")
        total=$((total + f[0] + f[1]))
    done
    echo "$total"
}

# drain NAME ROUND: one drain; appends "NAME rate cpu_us_per_job" to $RESULTS.
drain() {
    local t rate cpu0 cpu1 cpu
    setup "$1"
    q "TRUNCATE vq.job, vq.job_transition_data, vq.job_log" >/dev/null
    q "CHECKPOINT" >/dev/null
    t="$(q "SELECT now() + interval '$DELAY s' FROM (SELECT vq_enqueue_many('noop',
               array_fill('{\"n\": 1}'::jsonb, ARRAY[$N]), now() + interval '$DELAY s')) x")"
    q "ANALYZE vq.job" >/dev/null
    cpu0="$(executor_cpu)"
    wait_sql "SELECT NOT EXISTS (SELECT 1 FROM vq.job_active)" 600 "the drain of $1"
    cpu1="$(executor_cpu)"
    cpu="$(awk -v a="$cpu0" -v b="$cpu1" -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN { printf "%.1f", (b - a) * 1e6 / hz / n }')"
    rate="$(q "SELECT round($N / extract(epoch FROM max(finished_at) - '$t'::timestamptz))
                 FROM vq.job_finished WHERE state = 'COMPLETED'")"
    [[ "$(q "SELECT count(*) FROM vq.job_finished WHERE state = 'COMPLETED'")" == "$N" ]] ||
        die "$1: not every job COMPLETED"
    printf '  round %d  %-12s %8s jobs/s %6s us CPU/job\n' "$2" "$1" "$rate" "$cpu"
    echo "$1 $rate $cpu" >>"$RESULTS"
}

RESULTS="$(mktemp)"
log "callbacks bench: $N jobs, 2 executors, batch 500, $ROUNDS rounds (load $(loadavg))"
for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then order=(none interceptor listener); else order=(listener interceptor none); fi
    for s in "${order[@]}"; do drain "$s" "$r"; done
done

median_of() { # SETUP COLUMN
    awk -v s="$1" -v c="$2" '$1 == s { print $c }' "$RESULTS" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
base="$(median_of none 2)"
base_cpu="$(median_of none 3)"
log ""
log "| set-up | median jobs/s | ratio to none | median CPU us/job | CPU ratio (none / set-up) |"
log "|---|---:|---:|---:|---:|"
for s in none interceptor listener; do
    m="$(median_of "$s" 2)"
    c="$(median_of "$s" 3)"
    log "| $s | $m | $(ratio "$m" "$base") | $c | $(ratio "$base_cpu" "$c") |"
done
rm -f "$RESULTS"

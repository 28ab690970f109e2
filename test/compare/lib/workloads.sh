# shellcheck shell=bash
# test/compare/lib/workloads.sh — the workloads of scripts/compare, run against the current
# system's cluster (PGHOST PGPORT PGUSER PGDATABASE exported by cmp_cluster_start). Source after
# scripts/lib.sh and test/compare/lib/cluster.sh. Needs CMP_DIR, CMP_WORK, CMP_RESULTS,
# CMP_CONSUMER and CMP_BG_PIDS set by scripts/compare.
#
#   cmp_sizes MODE           set the counts and settings of MODE (full or quick)
#   cmp_run_system SYSTEM    run every workload for SYSTEM; figures go to CMP_RESULTS as
#                            "system<TAB>key<TAB>value" lines, raw output to CMP_WORK/raw

cmp_sizes() {
    CMP_ENQ_CLIENTS=8
    CMP_BATCH=1000
    CMP_LAT_GAP_MS=20
    CMP_STEADY_CLIENTS=4
    CMP_STEADY_RATE=300          # producer transactions per second (all clients), 10 jobs each
    CMP_STEADY_PER_TXN=10
    if [[ "$1" == quick ]]; then
        CMP_ENQ_JOBS=5000
        CMP_BATCH_JOBS=20000
        CMP_DRAIN_JOBS=20000
        CMP_LAT_JOBS=150
        CMP_STEADY_SECS=20
        CMP_STEADY_WINDOW=5
        CMP_VQ_DRAIN_DELAY=5
        # graphile-worker: c = concurrency, lq = local queue size, bd = completeJobBatchDelay (ms)
        CMP_GRAPHILE_DRAINS=("c=24,lq=1000,bd=0" "c=24,lq=1000,bd=250")
        # pg-boss: w = work() calls, b = batchSize, p = pollingIntervalSeconds (its minimum)
        CMP_PGBOSS_DRAINS=("w=2,b=5000,p=0.5" "w=1,b=10000,p=0.5")
        # vq_consumer --coprocess: k = consumers, b = --batch
        CMP_COPROC_DRAINS=("k=4,b=100")
        CMP_COPROC_JOBS=5000
    else
        CMP_ENQ_JOBS=20000
        CMP_BATCH_JOBS=100000
        CMP_DRAIN_JOBS=50000
        CMP_LAT_JOBS=500
        CMP_STEADY_SECS=60
        CMP_STEADY_WINDOW=10
        CMP_VQ_DRAIN_DELAY=8
        CMP_GRAPHILE_DRAINS=("c=10" "c=10,lq=500,bd=0" "c=24,lq=1000,bd=0" "c=24,lq=1000,bd=250")
        CMP_PGBOSS_DRAINS=("w=1,b=5000,p=0.5" "w=2,b=5000,p=0.5" "w=4,b=5000,p=0.5" "w=1,b=10000,p=0.5")
        CMP_COPROC_DRAINS=("k=4,b=100" "k=8,b=100")
        CMP_COPROC_JOBS=50000
    fi
    # The lowest poll interval each peer allows: pg-boss asserts >= 0.5 s; graphile-worker
    # enforces none (it is woken by LISTEN/NOTIFY; polling is its fallback): 10 ms.
    CMP_MIN_POLL_MS=([graphile]=10 [pgboss]=500)
}
declare -A CMP_MIN_POLL_MS

cmp_put() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$CMP_RESULTS"; }
cmp_q() { vq_psql -At -c "$1"; }
cmp_node() { node "$CMP_DIR/driver.js" "$@"; }
# cmp_field LINE KEY: the value of KEY in a driver's "key=value ..." line.
cmp_field() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p"; }
cmp_now_ms() { date +%s%3N; }

# cmp_wait SQL SECS WHAT: poll SQL (a boolean) every 20 ms until true; fail after SECS.
cmp_wait() {
    local deadline=$((SECONDS + $2))
    until [[ "$(cmp_q "$1")" == t ]]; do
        ((SECONDS < deadline)) || { vq_err "timed out after $2 s waiting for $3"; return 1; }
        sleep 0.02
    done
}

# cmp_reset SYSTEM: remove every job, so that each workload starts from empty tables.
cmp_reset() {
    case "$1" in
        vq) cmp_q "TRUNCATE vq.job, vq.job_transition_data, vq.job_log, compare.started, compare.plain" ;;
        graphile) cmp_q "TRUNCATE graphile_worker._private_jobs CASCADE" ;;
        pgboss) cmp_q "TRUNCATE pgboss.job" ;;
    esac >/dev/null
    cmp_q "VACUUM ANALYZE" >/dev/null 2>&1
    cmp_q "CHECKPOINT" >/dev/null
}

# cmp_pgbench NAME SQL PGBENCH-ARGS...: run SQL as a pgbench script; print its tps.
cmp_pgbench() {
    local name="$1" sql="$2" log="$CMP_WORK/raw/$CMP_SYS.$1.pgbench.log"
    shift 2
    printf '%s\n' "$sql" >"$CMP_WORK/$name.sql"
    "$VQ_PG_BIN/pgbench" -n "$@" -f "$CMP_WORK/$name.sql" >"$log" 2>&1 ||
        { tail -n 20 "$log" >&2; vq_err "pgbench $name failed"; return 1; }
    sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$log"
}

cmp_setup() {
    if [[ "$1" == vq ]]; then
        vq_psql -f "$CMP_DIR/vq_setup.sql" >/dev/null
        cmp_wait "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'" 30 \
            "vq_job's executors"
    else
        cmp_node setup "$1" >/dev/null
    fi
}

# --- enqueue ---------------------------------------------------------------------------------
cmp_enqueue() {
    local s="$1" out rate
    cmp_reset "$s"
    out="$(cmp_node enqueue "$s" "$CMP_ENQ_CLIENTS" "$CMP_ENQ_JOBS")"
    rate="$(cmp_field "$out" rate)"
    vq_log "$s: enqueue, client API, $CMP_ENQ_CLIENTS clients: $rate jobs/s"
    cmp_put "$s" enq_api "$rate"

    cmp_reset "$s"
    rate="$(cmp_pgbench enq_sql "$(cmp_node enqueue-sql "$s")" -c "$CMP_ENQ_CLIENTS" -j 2 \
            -t $((CMP_ENQ_JOBS / CMP_ENQ_CLIENTS)))"
    rate="$(fmt "$rate" 0)"
    vq_log "$s: enqueue, SQL (pgbench), $CMP_ENQ_CLIENTS clients: $rate jobs/s"
    cmp_put "$s" enq_sql "$rate"

    cmp_reset "$s"
    out="$(cmp_node batch "$s" "$CMP_BATCH_JOBS" "$CMP_BATCH")"
    rate="$(cmp_field "$out" rate)"
    vq_log "$s: batch enqueue, client API, $CMP_BATCH per transaction: $rate jobs/s"
    cmp_put "$s" batch "$rate"
}

# The plain-SQL ceilings of the enqueue workloads (on vq_job's cluster: a plain table).
cmp_enqueue_ceiling() {
    local rate
    cmp_reset vq
    rate="$(cmp_pgbench plain_enq "INSERT INTO compare.plain (queue, payload) VALUES ('default', '{\"n\": 1}');" \
            -c "$CMP_ENQ_CLIENTS" -j 2 -t $((CMP_ENQ_JOBS / CMP_ENQ_CLIENTS)))"
    cmp_put sql enq_sql "$(fmt "$rate" 0)"
    cmp_reset vq
    rate="$(cmp_pgbench plain_batch "INSERT INTO compare.plain (queue, payload)
            SELECT 'default', '{\"n\": 1}' FROM generate_series(1, $CMP_BATCH);" -c 1 -t $((CMP_BATCH_JOBS / CMP_BATCH)))"
    cmp_put sql batch "$(awk -v t="$rate" -v b="$CMP_BATCH" 'BEGIN { printf "%.0f", t * b }')"
    vq_log "sql: plain INSERT, $CMP_ENQ_CLIENTS clients: $(cmp_lookup sql enq_sql) rows/s;" \
        "INSERT ... SELECT of $CMP_BATCH: $(cmp_lookup sql batch) rows/s"
}
cmp_lookup() { awk -F'\t' -v s="$1" -v k="$2" '$1 == s && $2 == k { v = $3 } END { print v }' "$CMP_RESULTS"; }

# --- drain -----------------------------------------------------------------------------------
# Peers: every setting of the list, each on a fresh backlog; the best is the system's figure.
cmp_drain_peer() {
    local s="$1" setting out rate best="" best_set="" list
    if [[ "$s" == graphile ]]; then list=("${CMP_GRAPHILE_DRAINS[@]}"); else list=("${CMP_PGBOSS_DRAINS[@]}"); fi
    for setting in "${list[@]}"; do
        cmp_reset "$s"
        out="$(cmp_node drain "$s" "$CMP_DRAIN_JOBS" "$setting")"
        rate="$(cmp_field "$out" rate)"
        vq_log "$s: drain of $CMP_DRAIN_JOBS, $setting: $rate jobs/s"
        cmp_put "$s" "drain:$setting" "$rate"
        if [[ -z "$best" ]] || ge "$rate" "$best"; then best="$rate"; best_set="$setting"; fi
    done
    cmp_put "$s" drain "$best"
    cmp_put "$s" drain_setting "$best_set"
}

# vq_job with a PL/pgSQL handler, and the SQL ceiling: test/bench/workers.sh's drain part
# (executors 1-3 x batch 100/500; ceiling LIMIT 100/500 x 1/2 pgbench clients), one round, on
# this cluster. Its summary lines "  <label>  <jobs/s> <wall jobs/s> ..." are read back.
cmp_drain_vq() {
    local log="$CMP_WORK/raw/vq.workers_drain.log" label rate best="" best_set="" cbest="" cbest_set=""
    PGDATABASE=postgres BENCH_PARTS=drain BENCH_ROUNDS=1 BENCH_DRAIN_JOBS="$CMP_DRAIN_JOBS" BENCH_DRAIN_DELAY="$CMP_VQ_DRAIN_DELAY" \
        "$VQ_REPO_ROOT/test/bench/workers.sh" >"$log" 2>&1 ||
        { tail -n 30 "$log" >&2; vq_err "test/bench/workers.sh (drain) failed"; return 1; }
    while IFS='|' read -r label rate; do
        case "$label" in
            vq:*)
                cmp_put vq "drain:${label#vq: }" "$rate"
                if [[ -z "$best" ]] || ge "$rate" "$best"; then best="$rate"; best_set="${label#vq: }"; fi ;;
            ceiling:*)
                cmp_put sql "drain:${label#ceiling: }" "$rate"
                if [[ -z "$cbest" ]] || ge "$rate" "$cbest"; then cbest="$rate"; cbest_set="${label#ceiling: }"; fi ;;
        esac
    done < <(awk '/^drain \(medians/ { on = 1; next }
                  on && /^  (vq|ceiling): / { l = substr($0, 3, 36); sub(/ +$/, "", l); split(substr($0, 39), f, " ");
                                             print l "|" f[1] }
                  on && /^$/ { on = 0 }' "$log")
    [[ -n "$best" && -n "$cbest" ]] || { vq_err "no drain figures in $log"; return 1; }
    vq_log "vq: drain of $CMP_DRAIN_JOBS (PL/pgSQL handler), best $best jobs/s ($best_set); SQL ceiling best $cbest ($cbest_set)"
    cmp_put vq drain "$best"
    cmp_put vq drain_setting "$best_set"
    cmp_put sql drain "$cbest"
    cmp_put sql drain_setting "$cbest_set"
}

# vq_job with a NOTIFY handler run by vq_consumer --coprocess (sed answers "ok" to every job):
# the backlog (CMP_COPROC_JOBS) is loaded into the paused queue 'nq', the consumers start, the
# queue is resumed; rate = jobs / (last finished_at - resume). A consumer takes and replies in
# batches (--batch), with up to twice --batch lines outstanding in its coprocess.
cmp_drain_coproc() {
    local setting k b i t0 rate best="" best_set="" pids=()
    for setting in "${CMP_COPROC_DRAINS[@]}"; do
        k="$(sed -n 's/.*k=\([0-9]*\).*/\1/p' <<<"$setting")"
        b="$(sed -n 's/.*b=\([0-9]*\).*/\1/p' <<<"$setting")"
        cmp_reset vq
        cmp_q "SELECT vq_pause_queue('nq')" >/dev/null
        cmp_q "SELECT count(*) FROM unnest(vq_enqueue_many('nt', array_fill('{\"n\": 1}'::jsonb, ARRAY[$CMP_COPROC_JOBS])))" >/dev/null
        cmp_q "ANALYZE vq.job" >/dev/null
        pids=()
        for ((i = 1; i <= k; i++)); do
            "$CMP_CONSUMER" --dbname "dbname=$PGDATABASE" --channel compare_nt --handler nt --batch "$b" \
                --coprocess -- sed -u 's/.*/ok/' >"$CMP_WORK/raw/vq.consumer.$setting.$i.log" 2>&1 &
            pids+=($!)
            CMP_BG_PIDS+=($!)
        done
        # Listening: a consumer LISTENs, then takes (nothing: the queue is paused).
        cmp_wait "SELECT count(*) = $k FROM pg_stat_activity WHERE application_name = 'vq_consumer'
                  AND state = 'idle' AND query LIKE '%vq_take_jobs%'" 30 "$k consumer(s) listening"
        t0="$(cmp_q "SELECT vq_resume_queue('nq'); SELECT clock_timestamp()" | tail -n 1)"
        cmp_wait "SELECT count(*) = $CMP_COPROC_JOBS FROM vq.job WHERE handler = 'nt' AND state = 'COMPLETED'" 600 \
            "the consumers to complete $CMP_COPROC_JOBS jobs"
        rate="$(cmp_q "SELECT round($CMP_COPROC_JOBS / extract(epoch FROM max(finished_at) - '$t0'::timestamptz))
                       FROM vq.job WHERE handler = 'nt'")"
        kill "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
        vq_log "vq: drain of $CMP_COPROC_JOBS, vq_consumer --coprocess, $setting: $rate jobs/s"
        cmp_put vq "coproc:$setting" "$rate"
        if [[ -z "$best" ]] || ge "$rate" "$best"; then best="$rate"; best_set="$setting"; fi
    done
    cmp_put vq coproc "$best"
    cmp_put vq coproc_setting "$best_set"
}

# --- latency ---------------------------------------------------------------------------------
# cmp_latency SYSTEM TAG [POLL_MS]: idle workers, CMP_LAT_JOBS jobs CMP_LAT_GAP_MS apart.
cmp_latency() {
    local s="$1" tag="$2" poll="${3:-}" out k
    cmp_reset "$s"
    out="$(cmp_node latency "$s" "$CMP_LAT_JOBS" "$CMP_LAT_GAP_MS" "$poll")"
    echo "$out" >>"$CMP_WORK/raw/$s.latency.log"
    for k in ack_p50 ack_p95 ack_p99 call_p50 call_p95 call_p99; do
        cmp_put "$s" "lat_$tag:$k" "$(cmp_field "$out" "$k")"
    done
    vq_log "$s: latency ($tag${poll:+, poll $poll ms}): commit -> start p50/p95/p99" \
        "$(cmp_field "$out" ack_p50) / $(cmp_field "$out" ack_p95) / $(cmp_field "$out" ack_p99) ms;" \
        "call -> start $(cmp_field "$out" call_p50) / $(cmp_field "$out" call_p95) / $(cmp_field "$out" call_p99) ms"
}

# --- steady load with a held snapshot ----------------------------------------------------------
# Producers: CMP_STEADY_CLIENTS pgbench clients, CMP_STEADY_RATE transactions/s in all, each
# enqueueing CMP_STEADY_PER_TXN no-op jobs in one statement, for CMP_STEADY_SECS; a REPEATABLE READ
# transaction that has taken its snapshot is held open for the whole run. Workers: vq_job's
# executors at their defaults; the peers at their best drain setting. A sampler records the due
# backlog every second; per CMP_STEADY_WINDOW: start latency (handler start - job creation, the
# enqueuing transaction's start) p50 / p99 of the jobs started in it, and the backlog at its end.
cmp_backlog_sql() {
    case "$1" in
        vq) echo "SELECT count(*) FROM vq.job_active WHERE state = 'ENQUEUED' AND scheduled_at <= now()" ;;
        graphile) echo "SELECT count(*) FROM graphile_worker._private_jobs WHERE locked_at IS NULL AND run_at <= now()" ;;
        pgboss) echo "SELECT count(*) FROM pgboss.job WHERE name = 'noop' AND state = 'created' AND start_after <= now()" ;;
    esac
}
cmp_sampler() {  # cmp_sampler SYSTEM FILE: "epoch_ms backlog" every second until killed
    local sql
    sql="$(cmp_backlog_sql "$1")"
    while :; do
        printf '%s %s\n' "$(cmp_now_ms)" "$(cmp_q "$sql")" >>"$2"
        sleep 1
    done
}
# cmp_steady SYSTEM [NAME SETTING]: NAME (default SYSTEM) names the run's files and figures;
# SETTING describes vq_job's configuration.
cmp_steady() {
    local s="$1" name="${2:-$1}" setting="${3:-}" dir="$CMP_WORK/raw" jobs backlog snap_pid sampler_pid worker_pid="" t0 tps
    jobs="$dir/$name.steady.jobs"; backlog="$dir/$name.steady.backlog"
    cmp_reset "$s"
    : >"$backlog"
    if [[ "$s" != vq ]]; then
        setting="$(cmp_lookup "$s" drain_setting)"
        # node itself in the background (not a function's subshell), so that its pid is node's.
        node "$CMP_DIR/driver.js" worker "$s" "$setting" "$jobs" >"$dir/$name.steady.worker.log" 2>&1 &
        worker_pid=$!
        CMP_BG_PIDS+=("$worker_pid")
        local deadline=$((SECONDS + 30))
        until grep -q 'ready=1' "$dir/$name.steady.worker.log"; do
            ((SECONDS < deadline)) || { cat "$dir/$name.steady.worker.log" >&2; vq_err "$s worker did not start"; return 1; }
            sleep 0.1
        done
    fi
    PGAPPNAME=compare_snapshot vq_psql -c "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class;
        SELECT pg_sleep($CMP_STEADY_SECS + 2); COMMIT;" >/dev/null 2>&1 &
    snap_pid=$!
    CMP_BG_PIDS+=("$snap_pid")
    cmp_wait "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'compare_snapshot'
              AND backend_xmin IS NOT NULL AND state = 'active'" 10 "the held snapshot"
    cmp_sampler "$s" "$backlog" &
    sampler_pid=$!
    CMP_BG_PIDS+=("$sampler_pid")
    t0="$(cmp_now_ms)"
    tps="$(cmp_pgbench "steady${2:+-$2}" "$(cmp_node load-sql "$s" "$CMP_STEADY_PER_TXN")" -c "$CMP_STEADY_CLIENTS" -j 2 \
           -R "$CMP_STEADY_RATE" -T "$CMP_STEADY_SECS")"
    sleep 1   # the last window's jobs start
    kill "$sampler_pid" 2>/dev/null; wait "$sampler_pid" 2>/dev/null || true
    cmp_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'compare_snapshot'" >/dev/null
    wait "$snap_pid" 2>/dev/null || true
    if [[ -n "$worker_pid" ]]; then
        kill -TERM "$worker_pid"; wait "$worker_pid" || true
    else
        cmp_q "SELECT round(extract(epoch FROM created_at) * 1000, 3), round(extract(epoch FROM started_at) * 1000, 3)
               FROM vq.job WHERE handler = 'noop' AND started_at IS NOT NULL" | tr '|' ' ' >"$jobs"
    fi
    cmp_node windows "$jobs" "$backlog" "$t0" "$CMP_STEADY_WINDOW" "$CMP_STEADY_SECS" >"$dir/$name.steady.windows"
    cmp_put "$name" steady_setting "$setting"
    cmp_put "$name" steady_offered "$(awk -v t="$tps" -v n="$CMP_STEADY_PER_TXN" 'BEGIN { printf "%.0f", t * n }')"
    cmp_put "$name" steady_p50_max "$(awk '$3 != "-" && $3 > m { m = $3 } END { print m + 0 }' "$dir/$name.steady.windows")"
    cmp_put "$name" steady_p99_max "$(awk '$4 != "-" && $4 > m { m = $4 } END { print m + 0 }' "$dir/$name.steady.windows")"
    cmp_put "$name" steady_backlog_max "$(awk '$2 > m { m = $2 } END { print m + 0 }' "$backlog")"
    vq_log "$name: steady load with a held snapshot ($setting): windows (end s, started, p50 ms, p99 ms, backlog):"
    sed 's/^/    /' "$dir/$name.steady.windows"
}

# --- one system --------------------------------------------------------------------------------
cmp_run_system() {
    local s="$1"
    CMP_SYS="$s"
    mkdir -p "$CMP_WORK/raw"
    cmp_setup "$s"
    cmp_put "$s" version "$(cmp_version "$s")"
    if [[ "$s" == vq ]]; then
        cmp_q "SELECT vq_pause_queue('default')" >/dev/null    # enqueue alone is measured
        cmp_enqueue vq
        cmp_enqueue_ceiling
        cmp_q "SELECT vq_resume_queue('default')" >/dev/null
        cmp_drain_vq
        cmp_drain_coproc
        cmp_latency vq default
        # The default queue (max_concurrent_jobs 5) caps every claim at 5 jobs, one commit per 5
        # no-op jobs: below 3,000 jobs/s on 2 cores. Measured as shipped, then with room to batch.
        cmp_steady vq vq-defaults "queue 'default' as shipped (max_concurrent_jobs 5)"
        cmp_q "SELECT vq_alter_queue('default', max_concurrent_jobs => 100)" >/dev/null
        cmp_steady vq vq "queue 'default' with max_concurrent_jobs 100"
    else
        cmp_enqueue "$s"
        cmp_drain_peer "$s"
        cmp_latency "$s" default
        cmp_latency "$s" minpoll "${CMP_MIN_POLL_MS[$s]}"
        cmp_steady "$s"
    fi
}
cmp_version() {
    case "$1" in
        vq) cmp_q "SELECT extversion FROM pg_extension WHERE extname = 'vq_job'" ;;
        graphile) node -p "require('$CMP_DIR/node_modules/graphile-worker/package.json').version" ;;
        pgboss) node -p "require('$CMP_DIR/node_modules/pg-boss/package.json').version" ;;
    esac
}

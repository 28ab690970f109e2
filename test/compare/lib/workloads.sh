# shellcheck shell=bash
# test/compare/lib/workloads.sh — the workloads of scripts/compare, run against the current
# system's cluster (PGHOST PGPORT PGUSER PGDATABASE exported by cmp_cluster_start). Source after
# scripts/lib.sh and test/compare/lib/cluster.sh. Needs CMP_DIR, CMP_WORK, CMP_RESULTS,
# CMP_CONSUMER, CMP_PYTHON (empty: no Python rows) and CMP_BG_PIDS set by scripts/compare.
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
        # vq_job's external handler through clients/node's Worker: c = concurrency,
        # b = batchSize, p = pipelines (unset: the library's default)
        CMP_NODE_DRAINS=("c=1000,b=500" "c=2000,b=1000")
        # ... through clients/python: the class, c = concurrency, b = batch_size
        CMP_PY_DRAINS=("Worker:c=100" "AsyncWorker:c=100")
        # ... through vq_consumer --coprocess: k = consumers (default 1), n = --concurrency
        # (coprocesses per consumer), b = --batch
        CMP_COPROC_DRAINS=("n=2,b=200" "k=2,n=1,b=200")
        # the two-step SQL ceiling: pgbench clients
        CMP_CEIL2_CLIENTS=(1 2 4)
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
        CMP_NODE_DRAINS=("c=500,b=500" "c=1000,b=500" "c=1000,b=1000" "c=2000,b=1000" "c=2000,b=1000,p=4" "c=4000,b=2000,p=4")
        CMP_PY_DRAINS=("Worker:c=100" "Worker:c=500,b=500" "AsyncWorker:c=100" "AsyncWorker:c=500,b=500")
        CMP_COPROC_DRAINS=("n=1,b=200" "n=2,b=200" "n=4,b=1000" "k=2,n=1,b=200" "k=2,n=2,b=500")
        CMP_CEIL2_CLIENTS=(1 2 4)
    fi
    CMP_CEIL2_CLAIM=500          # rows the two-step ceiling claims per transaction
    # The lowest poll interval each peer allows: pg-boss asserts >= 0.5 s; graphile-worker
    # enforces none (it is woken by LISTEN/NOTIFY; polling is its fallback): 10 ms.
    CMP_MIN_POLL_MS=([graphile]=10 [pgboss]=500)
}
declare -A CMP_MIN_POLL_MS

cmp_put() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$CMP_RESULTS"; }
cmp_q() { vq_psql -At -c "$1"; }
cmp_node() { node "$CMP_DIR/driver.js" "$@"; }
cmp_python() { "$CMP_PYTHON" "$CMP_DIR/driver.py" "$@"; }
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
        vq) cmp_q "TRUNCATE vq.job, vq.job_transition_data, vq.job_log, compare.started, compare.plain, compare.plain_job" ;;
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

# --- drain through the worker protocol (vq_job's external handler 'ext', queue bench_ext) ------
# Every run: a backlog of CMP_DRAIN_JOBS jobs of 'ext' loaded (committed) and ANALYZEd, a
# CHECKPOINT, then the worker starts; rate = jobs / (the last finished_at - the worker's start).
# Node and Python: driver.js / driver.py time it in-process from the call that starts the worker
# (the process already running, connected for the load); vq_consumer: from just before the
# process is spawned.
CMP_EXT_DONE_SQL="SELECT NOT EXISTS (SELECT 1 FROM vq.job_active WHERE handler = 'ext')"
CMP_EXT_LOAD_SQL="SELECT count(*) FROM unnest(vq_enqueue_many('ext', array_fill('{\"n\": 1}'::jsonb, ARRAY[\$N])))"
cmp_ext_load() { cmp_q "${CMP_EXT_LOAD_SQL//\$N/$1}" >/dev/null; }

# cmp_best SYS KEY SETTING RATE: record a setting's rate as KEY:SETTING; cmp_best_put SYS KEY
# then records the best as KEY and its setting as KEY_setting.
declare -A CMP_BEST CMP_BEST_SET
cmp_best() {
    cmp_put "$1" "$2:$3" "$4"
    if [[ -z "${CMP_BEST[$1.$2]:-}" ]] || ge "$4" "${CMP_BEST[$1.$2]}"; then
        CMP_BEST[$1.$2]="$4"; CMP_BEST_SET[$1.$2]="$3"
    fi
}
cmp_best_put() {
    [[ -n "${CMP_BEST[$1.$2]:-}" ]] || return 0
    cmp_put "$1" "$2" "${CMP_BEST[$1.$2]}"
    cmp_put "$1" "$2_setting" "${CMP_BEST_SET[$1.$2]}"
}

# cmp_drain_lib KEY WHAT SETTINGS...: the handler in Node (KEY node: driver.js drain vqnode,
# clients/node's Worker) or in Python (KEY py: driver.py drain, clients/python's Worker or
# AsyncWorker), one fresh backlog per setting.
cmp_drain_lib() {
    local key="$1" what="$2" setting out rate log="$CMP_WORK/raw/vq.$1_drain.log"
    shift 2
    for setting in "$@"; do
        cmp_reset vq
        if [[ "$key" == node ]]; then
            out="$(cmp_node drain vqnode "$CMP_DRAIN_JOBS" "$setting" 2>>"$log")"
        else
            out="$(cmp_python drain "$CMP_DRAIN_JOBS" "$setting" 2>>"$log")"
        fi || { tail -n 20 "$log" >&2; vq_err "$what drain ($setting) failed"; return 1; }
        echo "$out" >>"$log"
        rate="$(cmp_field "$out" rate)"
        vq_log "vq: drain of $CMP_DRAIN_JOBS, $what, $setting: $rate jobs/s" \
            "(from the first handler start: $(cmp_field "$out" first_rate))"
        cmp_best vq "$key" "$setting" "$rate"
        cmp_put vq "${key}_first:$setting" "$(cmp_field "$out" first_rate)"
    done
    cmp_best_put vq "$key"
}
cmp_drain_node() { cmp_drain_lib node "clients/node Worker" "${CMP_NODE_DRAINS[@]}"; }
cmp_drain_python() {
    if [[ -z "$CMP_PYTHON" ]]; then
        vq_warn "vq: this checkout has no clients/python: the Python drain is skipped"
        return 0
    fi
    cmp_drain_lib py "clients/python" "${CMP_PY_DRAINS[@]}"
}

# K x vq_consumer --coprocess --concurrency N: N coprocesses each, each a sed answering "ok" to
# every job line (`stdbuf -oL sed` reads what the pipe holds and flushes each answer; `sed -u`
# would read one byte per system call and limit the consumer; Debian's awk, mawk, waits for a
# full input buffer before it answers anything, and stalls the consumer).
cmp_drain_coproc() {
    local setting k n b i t0 rate pids log stats
    for setting in "${CMP_COPROC_DRAINS[@]}"; do
        k="$(sed -n 's/.*k=\([0-9]*\).*/\1/p' <<<"$setting")"
        n="$(sed -n 's/.*n=\([0-9]*\).*/\1/p' <<<"$setting")"
        b="$(sed -n 's/.*b=\([0-9]*\).*/\1/p' <<<"$setting")"
        log="$CMP_WORK/raw/vq.consumer.$setting"
        cmp_reset vq
        cmp_ext_load "$CMP_DRAIN_JOBS"
        cmp_q "ANALYZE vq.job" >/dev/null
        cmp_q "CHECKPOINT" >/dev/null
        t0="$(cmp_q "SELECT clock_timestamp()")"
        pids=()
        for ((i = 1; i <= ${k:-1}; i++)); do
            "$CMP_CONSUMER" --dbname "dbname=$PGDATABASE" --handler ext --concurrency "$n" --batch "$b" \
                --coprocess -- stdbuf -oL sed 's/.*/ok/' >"$log.$i.log" 2>&1 &
            pids+=($!)
            CMP_BG_PIDS+=($!)
        done
        cmp_wait "$CMP_EXT_DONE_SQL" 300 "vq_consumer to complete $CMP_DRAIN_JOBS jobs" ||
            { tail -n 20 "$log".*.log >&2; return 1; }
        kill -TERM "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
        stats="$(cmp_q "SELECT count(*) FILTER (WHERE state = 'COMPLETED'),
                               round($CMP_DRAIN_JOBS / extract(epoch FROM max(finished_at) - '$t0'::timestamptz))
                        FROM vq.job WHERE handler = 'ext'")"
        [[ "${stats%%|*}" == "$CMP_DRAIN_JOBS" ]] ||
            { tail -n 20 "$log".*.log >&2; vq_err "vq_consumer ($setting): ${stats%%|*} of $CMP_DRAIN_JOBS jobs COMPLETED"; return 1; }
        rate="${stats#*|}"
        vq_log "vq: drain of $CMP_DRAIN_JOBS, vq_consumer --coprocess, $setting: $rate jobs/s"
        cmp_best vq coproc "$setting" "$rate"
    done
    cmp_best_put vq coproc
}

# The two-step SQL ceiling: the rows vq_enqueue_many writes for 'ext' (copied from
# vq.job_active) in compare.plain_job (vq.job_active's columns, indexes and storage parameters);
# pgbench clients loop over two transactions: the first claims CMP_CEIL2_CLAIM rows FOR UPDATE
# SKIP LOCKED in vq_take_jobs's order (priority, due time), marks them RUNNING and returns their
# ids and payloads (\gset: one row of two arrays); the second marks them COMPLETED by id.
# rate = jobs / (the last finished_at, clock_timestamp() in the second step - just before
# pgbench starts).
cmp_ceiling2() {
    local c per_client t0 stats rate sql="$CMP_WORK/ceiling2.sql" log
    cat >"$sql" <<SQL
WITH c AS (
  UPDATE compare.plain_job t
     SET state = 'RUNNING', started_at = now(), updated_at = now(), consumer_claimed_at = now(),
         lease_until = now() + interval '5 min'
   WHERE t.execution_id = ANY (ARRAY(
         SELECT execution_id FROM compare.plain_job
          WHERE queue = 'bench_ext' AND handler = 'ext' AND state = 'ENQUEUED' AND handler_function IS NULL
            AND scheduled_at <= now()
          ORDER BY priority DESC, scheduled_at, execution_id LIMIT $CMP_CEIL2_CLAIM FOR UPDATE SKIP LOCKED))
  RETURNING t.execution_id, t.payload)
SELECT coalesce(quote_literal(array_agg(execution_id)::text), '''{}''') AS ids, array_agg(payload) AS payloads FROM c \gset
UPDATE compare.plain_job SET state = 'COMPLETED', finished_at = clock_timestamp(), updated_at = now()
 WHERE execution_id = ANY (:ids::uuid[]);
SQL
    for c in "${CMP_CEIL2_CLIENTS[@]}"; do
        log="$CMP_WORK/raw/sql.ceiling2.c$c.pgbench.log"
        cmp_reset vq
        cmp_ext_load "$CMP_DRAIN_JOBS"
        cmp_q "INSERT INTO compare.plain_job SELECT * FROM vq.job_active WHERE handler = 'ext'" >/dev/null
        cmp_q "TRUNCATE vq.job" >/dev/null
        cmp_q "ANALYZE compare.plain_job" >/dev/null
        cmp_q "CHECKPOINT" >/dev/null
        # enough transactions for an uneven share, then a few that find nothing
        per_client=$(((CMP_DRAIN_JOBS + CMP_CEIL2_CLAIM * c - 1) / (CMP_CEIL2_CLAIM * c)))
        per_client=$((per_client * 3 / 2 + 5))
        t0="$(cmp_q "SELECT clock_timestamp()")"
        "$VQ_PG_BIN/pgbench" -n -c "$c" -j "$c" -t "$per_client" -f "$sql" >"$log" 2>&1 ||
            { tail -n 20 "$log" >&2; vq_err "pgbench (two-step ceiling, $c clients) failed"; return 1; }
        stats="$(cmp_q "SELECT count(*) FILTER (WHERE state = 'COMPLETED'),
                               round($CMP_DRAIN_JOBS / extract(epoch FROM max(finished_at) - '$t0'::timestamptz))
                        FROM compare.plain_job")"
        [[ "${stats%%|*}" == "$CMP_DRAIN_JOBS" ]] ||
            { vq_err "two-step ceiling ($c clients): ${stats%%|*} of $CMP_DRAIN_JOBS rows COMPLETED"; return 1; }
        rate="${stats#*|}"
        vq_log "sql: two-step ceiling, drain of $CMP_DRAIN_JOBS, $c pgbench client(s) claiming $CMP_CEIL2_CLAIM: $rate jobs/s"
        cmp_best sql ceil2 "c=$c" "$rate"
    done
    cmp_best_put sql ceil2
}

# --- latency ---------------------------------------------------------------------------------
# cmp_latency SYSTEM TAG [POLL_MS [DRIVER]]: idle workers, CMP_LAT_JOBS jobs CMP_LAT_GAP_MS
# apart. DRIVER: driver.js's system when it is not SYSTEM (vqnode: vq_job's external handler run
# by an idle clients/node Worker, the jobs enqueued with clients/node's enqueue).
cmp_latency() {
    local s="$1" tag="$2" poll="${3:-}" drv="${4:-$1}" out k
    cmp_reset "$s"
    out="$(cmp_node latency "$drv" "$CMP_LAT_JOBS" "$CMP_LAT_GAP_MS" "$poll")"
    echo "$out" >>"$CMP_WORK/raw/$s.latency.log"
    for k in ack_p50 ack_p95 ack_p99 call_p50 call_p95 call_p99; do
        cmp_put "$s" "lat_$tag:$k" "$(cmp_field "$out" "$k")"
    done
    vq_log "$s: latency ($tag${poll:+, poll $poll ms}${4:+, $drv}): commit -> start p50/p95/p99" \
        "$(cmp_field "$out" ack_p50) / $(cmp_field "$out" ack_p95) / $(cmp_field "$out" ack_p99) ms;" \
        "call -> start $(cmp_field "$out" call_p50) / $(cmp_field "$out" call_p95) / $(cmp_field "$out" call_p99) ms"
}

# --- steady load with a held snapshot ----------------------------------------------------------
# Producers: CMP_STEADY_CLIENTS pgbench clients, CMP_STEADY_RATE transactions/s in all, each
# enqueueing CMP_STEADY_PER_TXN no-op jobs in one statement, for CMP_STEADY_SECS; a REPEATABLE READ
# transaction that has taken its snapshot is held open for the whole run. Workers: vq_job's
# executors (PL/pgSQL handler 'noop'), or a clients/node Worker for the external handler 'ext' at
# its best drain setting; the peers at their best drain setting. A sampler records the due
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
# cmp_steady SYSTEM [NAME SETTING [DRIVER]]: NAME (default SYSTEM) names the run's files and
# figures; SETTING describes vq_job's configuration, or with DRIVER (driver.js's system of a
# worker in Node: vqnode) is that worker's setting. The peers' worker runs their best drain setting.
cmp_steady() {
    local s="$1" name="${2:-$1}" setting="${3:-}" drv="${4:-}" dir="$CMP_WORK/raw" jobs backlog snap_pid sampler_pid worker_pid="" t0 tps
    jobs="$dir/$name.steady.jobs"; backlog="$dir/$name.steady.backlog"
    cmp_reset "$s"
    : >"$backlog"
    if [[ "$s" != vq ]]; then
        drv="$s"
        setting="$(cmp_lookup "$s" drain_setting)"
    fi
    if [[ -n "$drv" ]]; then
        # node itself in the background (not a function's subshell), so that its pid is node's.
        node "$CMP_DIR/driver.js" worker "$drv" "$setting" "$jobs" >"$dir/$name.steady.worker.log" 2>&1 &
        worker_pid=$!
        CMP_BG_PIDS+=("$worker_pid")
        local deadline=$((SECONDS + 30))
        until grep -q 'ready=1' "$dir/$name.steady.worker.log"; do
            ((SECONDS < deadline)) || { cat "$dir/$name.steady.worker.log" >&2; vq_err "$name worker did not start"; return 1; }
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
    tps="$(cmp_pgbench "steady${2:+-$2}" "$(cmp_node load-sql "${drv:-$s}" "$CMP_STEADY_PER_TXN")" -c "$CMP_STEADY_CLIENTS" -j 2 \
           -R "$CMP_STEADY_RATE" -T "$CMP_STEADY_SECS")"
    sleep 1   # the last window's jobs start
    kill "$sampler_pid" 2>/dev/null; wait "$sampler_pid" 2>/dev/null || true
    cmp_q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'compare_snapshot'" >/dev/null
    wait "$snap_pid" 2>/dev/null || true
    if [[ -n "$worker_pid" ]]; then
        kill -TERM "$worker_pid"; wait "$worker_pid" || vq_warn "$name worker: exit status $? (see raw/$name.steady.worker.log)"
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
    cmp_put "$name" steady_empty_windows "$(awk '$2 == 0 { n++ } END { print n + 0 }' "$dir/$name.steady.windows")"
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
        cmp_ceiling2
        cmp_drain_node
        cmp_drain_python
        cmp_drain_coproc
        cmp_latency vq default
        cmp_latency vq node "" vqnode
        # The default queue (max_concurrent_jobs 5) caps every claim at 5 jobs, one commit per 5
        # no-op jobs: below 3,000 jobs/s on 2 cores. Measured as shipped, then with room to batch.
        cmp_steady vq vq-defaults "queue 'default' as shipped (max_concurrent_jobs 5)"
        cmp_q "SELECT vq_alter_queue('default', max_concurrent_jobs => 100)" >/dev/null
        cmp_steady vq vq "queue 'default' with max_concurrent_jobs 100"
        cmp_steady vq vq-node "$(cmp_lookup vq node_setting)" vqnode
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

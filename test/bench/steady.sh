#!/usr/bin/env bash
# test/bench/steady.sh — queue health under steady load: does vq_job keep up with a constant
# arrival rate, and do its latency, claim cost and table sizes stay flat, with and without a
# long-held snapshot (which keeps every dead row version and claim-index entry alive)?
#
# Workload. A PL/pgSQL handler bench_insert(payload jsonb) that inserts one row into a table.
# Producers: pgbench, 4 clients (-j 2), -R 300 transactions/s, each transaction
#   SELECT vq_enqueue_many('bench_insert', ARRAY(10 small jsonb payloads))
# = 3,000 jobs/s. Executors, queue and autovacuum at their defaults (vq.executors_per_database
# 2, the 'default' queue; STEADY_MAX_CONCURRENT changes that queue's max_concurrent_jobs for
# context runs). Every run starts on a fresh database (vq_bench_steady) and a CHECKPOINT.
#
# Runs (STEADY_RUNS, default all four, in this order):
#   vq_plain       STEADY_SECS of load (default 300), no held snapshot.
#   vq_snapshot    a session runs BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM
#                  vq.job; (a background psql fed through a fifo) before the load starts and
#                  holds that snapshot for STEADY_SNAPSHOT_SECS (default 600), then COMMITs; the
#                  load goes on for STEADY_RECOVERY_SECS more (default 60) to show the recovery.
#   ceil_plain     the "ceiling": the same arrivals into a minimal table
#                    t (id bigserial PRIMARY KEY, queue text, priority int, run_at timestamptz,
#                       state smallint, payload jsonb), one index (priority DESC, run_at)
#                       WHERE state = 0
#                  (producers: pgbench 4 clients, -R 300, INSERT of 10 rows per transaction),
#                  drained by pgbench (2 clients, no rate limit: as fast as they can, which also
#                  means they spin on empty claims) running
#                    WITH c AS (SELECT id FROM t WHERE state = 0 AND run_at <= now()
#                               ORDER BY priority DESC, run_at LIMIT 100 FOR UPDATE SKIP LOCKED)
#                    UPDATE t SET state = 2 FROM c WHERE t.id = c.id
#                  for STEADY_CEILING_SECS (default 120).
#   ceil_snapshot  the same with the held snapshot (SELECT count(*) FROM t) for
#                  STEADY_CEILING_SECS, then STEADY_RECOVERY_SECS without it.
# STEADY_QUICK=1 (for development) makes every duration default to 60 s.
#
# Measures, per 10-s window (a sampler queries the server every 10 s from the load's start;
# window k ends at sample k):
#   enq / done     jobs enqueued (created_at) / COMPLETED (finished_at) in the window
#   p50 / p99      start latency in ms = started_at - created_at over the jobs that STARTED in the
#                  window. created_at is the enqueuing transaction's start (GetCurrentTransaction-
#                  StartTimestamp in enqueue.c), so the figure includes the enqueue itself and its
#                  commit's WAL flush; started_at is the handler's start, written for inline jobs
#                  as well (outcome.c: started_at = coalesce(j.started_at, <handler start>)).
#                  Computed after the run from vq.job (nothing is deleted: retention is 1 day).
#   backlog        due backlog at the window's end (vq: jobs enqueued so far less jobs started so
#                  far, computed after the run; ceiling: sampled as count(*) of state = 0 AND
#                  run_at <= now(), which includes rows locked by a claim in progress)
#   claims / buf/job  pg_stat_statements deltas of the executors' claim statements (query text
#                  starting with SELECT and containing 'FROM vq.job' and 'FOR UPDATE SKIP LOCKED';
#                  retention, progress and the workers' take statements (vq_take_jobs, vq_pull)
#                  start with WITH/UPDATE and are not counted): calls, and (shared_blks_hit +
#                  shared_blks_read) / rows, i.e. shared buffers touched per claimed job. pg_stat_statements must be preloaded: when it
#                  is not, the bench sets shared_preload_libraries = '<current>,pg_stat_statements'
#                  with ALTER SYSTEM and restarts the server (pg_ctl -m fast, through
#                  scripts/lib.sh's vq_cluster_restart); a probe job, in a database of its own,
#                  first checks that the claim is tracked (with pg_stat_statements.track = 'all'
#                  if 'top' does not see it). Each run also lists its statements by execution
#                  time (pg_stat_statements), which shows where the executors' time goes.
#   job MB / trans MB  pg_total_relation_size of vq.job_active (heap, indexes, TOAST: the
#                  partition of vq.job that holds unfinished jobs, all that claims search) and of
#                  vq.job_transition_data; dead / vac/av: n_dead_tup of vq.job_active, and how
#                  many vacuums of it ran so far by command (executor 0's own) / by
#                  autovacuum. Jobs that ended live in vq.job_finished until retention
#                  deletes them (1 day by default): its size is printed at the end of each run.
#   prod p99 / max the producers' own transactions (vq_enqueue_many and its commit), p99 and max
#                  latency in ms of those that ended in the window (pgbench -l). A slow WAL flush
#                  holds up every commit, the producers' too: their jobs then start late before
#                  any executor can see them, and a start-latency p99 near prod max says so.
# The ceiling's table has: claimed rows (pg_stat_statements rows of its claim-and-update
# statement), due backlog, buffers per claimed row (of the whole claim + UPDATE statement, so not
# directly comparable with vq's claim-only figure), size of t, and the -P 10 progress of both
# pgbench runs (producers: tps, mean latency, mean rate-limit lag; consumers: tps, mean latency).
# The ceiling has no start time per row, hence no start latency.
#
# Output: for every run a table, one row per window, and at the end a summary: per run (and for
# a snapshot run, separately for the held part and the part after the release) the max p50 and
# p99 over the windows, the max due backlog, buffers per claimed job in the first minute vs the
# last minute (ratio), and size after the first minute vs at the end (ratio) — for runs shorter
# than 2 minutes "minute" is half the run. The goals these are compared with (reported as
# PASS/MISS, never asserted): every window p50 <= 5 ms and p99 <= 50 ms; due backlog never above
# 3,000 (one second of arrivals); buffers/job in the last minute within 2x of the first minute;
# sizes at the end <= 2x the size after the first minute.
# Files, in STEADY_RESULTS_DIR (default test/bench/results/, git-ignored), prefixed
# steady-<date>-<time>-: <run>.samples.tsv (the raw samples), <run>.windows.tsv (the table),
# <run>.producers.log / .consumers.log (pgbench output), and steady.png (gnuplot; installed with
# apt-get install -y gnuplot-nox when missing; no PNG, with a warning, if that fails): p50/p99
# start latency (log scale), due backlog (all runs) and buffers per claimed job, runs overlaid.
#
# Run by ./scripts/bench (a fresh cluster: fsync = on, synchronous_commit = on, shared_buffers
# = 1GB, vq_job preloaded; PGHOST PGPORT PGUSER VQ_CLUSTER_DIR VQ_CLUSTER_DATA VQ_PG_BIN
# exported). It drops its database at the end; every setting it changes with ALTER SYSTEM is
# reset at the end (and the server restarted again if it was restarted), even on error.
# Duration with the defaults: about 22 minutes (1,260 s of load plus set-up), within
# VQ_BENCH_TIMEOUT's default 1,800 s; STEADY_QUICK=1: about 7 minutes.
#
# Knobs: STEADY_QUICK=1, STEADY_SECS, STEADY_SNAPSHOT_SECS, STEADY_CEILING_SECS,
#        STEADY_RECOVERY_SECS (seconds, multiples of 10), STEADY_RUNS (subset of
#        "vq_plain vq_snapshot ceil_plain ceil_snapshot"), STEADY_RESULTS_DIR,
#        STEADY_MAX_CONCURRENT (the 'default' queue's max_concurrent_jobs; default: untouched).
#
# Exit status: 0 whenever the measurements completed, goals met or not (a missed goal prints
# MISS); non-zero only if the workload itself failed (an error, a pgbench failure, a snapshot
# session that did not hold, a claim statement pg_stat_statements does not see).
set -euo pipefail

INTERVAL=10                  # seconds per window
CLIENTS=4                    # producer clients
RATE=300                     # producer transactions/s (all clients together)
PER_TX=10                    # jobs per producer transaction
CEIL_CONSUMERS=2
CEIL_LIMIT=100
GOAL_P50=5
GOAL_P99=50
GOAL_BACKLOG=$((RATE * PER_TX))   # one second of arrivals
GOAL_GROWTH=2

if [[ "${STEADY_QUICK:-}" == 1 ]]; then
    d_plain=60; d_snap=60; d_ceil=60
else
    d_plain=300; d_snap=600; d_ceil=120
fi
SECS="${STEADY_SECS:-$d_plain}"
SNAP_SECS="${STEADY_SNAPSHOT_SECS:-$d_snap}"
CEIL_SECS="${STEADY_CEILING_SECS:-$d_ceil}"
RECOVERY_SECS="${STEADY_RECOVERY_SECS:-60}"
RUNS="${STEADY_RUNS:-vq_plain vq_snapshot ceil_plain ceil_snapshot}"
MAX_CONCURRENT="${STEADY_MAX_CONCURRENT:-}"
for v in SECS SNAP_SECS CEIL_SECS RECOVERY_SECS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ && $((${!v} % INTERVAL)) == 0 ]] ||
        { echo "steady bench: $v must be a positive multiple of $INTERVAL (is '${!v}')" >&2; exit 2; }
done
[[ -z "$MAX_CONCURRENT" || "$MAX_CONCURRENT" =~ ^[1-9][0-9]*$ ]] ||
    { echo "steady bench: STEADY_MAX_CONCURRENT must be a positive integer" >&2; exit 2; }
for r in $RUNS; do
    case "$r" in vq_plain | vq_snapshot | ceil_plain | ceil_snapshot) ;;
        *) echo "steady bench: unknown run '$r' in STEADY_RUNS" >&2; exit 2 ;;
    esac
done

PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
PGBENCH="$PG_BIN/pgbench"
REPO_ROOT="${VQ_REPO_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}"
RESULTS_DIR="${STEADY_RESULTS_DIR:-$REPO_ROOT/test/bench/results}"
DB=vq_bench_steady
PARTS="$RUNS"

WORK="$(mktemp -d /tmp/vq_bench_steady.XXXXXX)"
CHANGED_SETTINGS=()
BG_PIDS=()
SNAP_PID=""
RESTARTED=0
ERRORS=0

die() { echo "steady bench: ERROR: $*" >&2; exit 1; }
# shellcheck source=test/bench/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
now_s() { date +%s.%N; }
# sleep_until EPOCH: sleep until that instant (at once if it has passed).
sleep_until() { sleep "$(awk -v t="$1" -v n="$(now_s)" 'BEGIN { w = t - n; printf "%.3f", (w > 0 ? w : 0) }')"; }

cleanup() {
    local rc=$? p
    set +e
    [[ -n "$SNAP_PID" ]] && { exec 7>&- 2>/dev/null; kill "$SNAP_PID" 2>/dev/null; }
    for p in "${BG_PIDS[@]-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    if "$PG_BIN/pg_isready" -q -t 30; then
        for p in "$DB" "${DB}_probe"; do
            PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$p"
        done
        reset_gucs 2>/dev/null
        if ((RESTARTED)); then
            vq_cluster_restart fast >/dev/null ||
                echo "steady bench: the restart that unloads pg_stat_statements failed" >&2
        fi
    else
        echo "steady bench: the server is not accepting connections; settings ${CHANGED_SETTINGS[*]-} not reset" >&2
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# wait_sql SQL SECS WHAT: poll SQL (a boolean) every 50 ms until true, or die after SECS.
wait_sql() {
    local deadline last
    deadline=$(awk -v s="$(now_s)" -v d="$2" 'BEGIN { printf "%.3f", s + d }')
    while :; do
        last="$(q "$1" 2>&1)" || true
        [[ "$last" == t ]] && return 0
        awk -v n="$(now_s)" -v d="$deadline" 'BEGIN { exit !(n > d) }' &&
            die "timed out after $2 s waiting for $3 (last: $last)"
        sleep 0.05
    done
}

# ---------------------------------------------------------------------------
# pg_stat_statements: preloaded (restart if needed); gnuplot
# ---------------------------------------------------------------------------
PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
spl="$(qa "SHOW shared_preload_libraries")"
if [[ ",${spl// /}," != *,pg_stat_statements,* ]]; then
    [[ -n "${VQ_CLUSTER_DATA:-}" && -n "${VQ_CLUSTER_DIR:-}" ]] ||
        die "pg_stat_statements is not preloaded and VQ_CLUSTER_DATA / VQ_CLUSTER_DIR are not set, so the server" \
            "cannot be restarted with it; run the bench through ./scripts/bench, or preload pg_stat_statements"
    # shellcheck source=scripts/lib.sh
    . "$REPO_ROOT/scripts/lib.sh"
    # A list setting: one quoted literal per library ('a,b' would be one library named "a,b").
    new_spl="$(printf '%s\n' "${spl//,/$'\n'}" pg_stat_statements |
               awk '{ gsub(/^[ "]+|[ "]+$/, "") } $0 != "" { printf "%s'\''%s'\''", (n++ ? ", " : ""), $0 }')"
    log "steady bench: shared_preload_libraries = $new_spl (ALTER SYSTEM) and restarting the server (-m fast)"
    qa "ALTER SYSTEM SET shared_preload_libraries = $new_spl" >/dev/null
    CHANGED_SETTINGS+=(shared_preload_libraries)
    RESTARTED=1
    vq_cluster_restart fast || die "the restart with pg_stat_statements preloaded failed"
    [[ ",$(qa "SHOW shared_preload_libraries" | tr -d ' ')," == *,pg_stat_statements,* ]] ||
        die "pg_stat_statements is not preloaded after the restart"
fi

PLOT=1
if ! command -v gnuplot >/dev/null; then
    log "steady bench: installing gnuplot-nox for the plot (apt-get)"
    if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox </dev/null >"$WORK/apt.log" 2>&1 ||
           { apt-get update -q >>"$WORK/apt.log" 2>&1 &&
             DEBIAN_FRONTEND=noninteractive apt-get install -y -q gnuplot-nox </dev/null >>"$WORK/apt.log" 2>&1; }; }; then
        echo "steady bench: WARNING: could not install gnuplot-nox (see below); no PNG" >&2
        tail -n 5 "$WORK/apt.log" >&2
        PLOT=0
    fi
fi
mkdir -p "$RESULTS_DIR"
PREFIX="$RESULTS_DIR/steady-$(date +%Y%m%d-%H%M%S)"

server_version="$(qa "SHOW server_version")"
server_version="${server_version%% *}"
log "steady bench: PostgreSQL $server_version, fsync=$(qa "SHOW fsync"), synchronous_commit=$(qa "SHOW synchronous_commit")," \
    "shared_buffers=$(qa "SHOW shared_buffers"), autovacuum=$(qa "SHOW autovacuum"), $(nproc) CPUs, load average $(loadavg)"
log "  load: $CLIENTS producer clients, $RATE transactions/s x $PER_TX jobs = $((RATE * PER_TX)) jobs/s;" \
    "windows of $INTERVAL s; runs: $RUNS"
log "  durations: plain $SECS s, snapshot held $SNAP_SECS s + $RECOVERY_SECS s after the release," \
    "ceiling $CEIL_SECS s (+ $RECOVERY_SECS s for its snapshot run); files: $PREFIX-*"

# Summary rows: "run|max p50|max p99|max backlog|buf first|buf last|job MB first|job MB end|trans MB first|trans MB end"
: >"$WORK/summary"

# ---------------------------------------------------------------------------
# Databases
# ---------------------------------------------------------------------------
new_db() {  # new_db vq|ceil
    PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
    "$PG_BIN/createdb" "$DB"
    if [[ "$1" == vq ]]; then
        "${PSQL[@]}" -d "$DB" -o /dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION pg_stat_statements;
CREATE EXTENSION vq_job;
CREATE TABLE bench_sink (
    id      bigserial PRIMARY KEY,
    payload jsonb NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE FUNCTION bench_insert(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_sink (payload) VALUES (payload);
END$$;
SELECT vq_register_handler('bench_insert', 'bench_insert(jsonb)');
SQL
        [[ -z "$MAX_CONCURRENT" ]] ||
            q "SELECT vq_alter_queue('default', max_concurrent_jobs => $MAX_CONCURRENT)" >/dev/null
        local n
        n="$(q "SHOW vq.executors_per_database")"
        wait_sql "SELECT count(*) = $n FROM pg_stat_activity
                  WHERE datname = current_database() AND backend_type = 'vq_job executor'" 30 \
            "$n executor(s) serving $DB"
    else
        "${PSQL[@]}" -d "$DB" -o /dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION pg_stat_statements;
CREATE TABLE t (
    id       bigserial PRIMARY KEY,
    queue    text,
    priority int,
    run_at   timestamptz,
    state    smallint,
    payload  jsonb
);
CREATE INDEX t_claim_idx ON t (priority DESC, run_at) WHERE state = 0;
SQL
    fi
}

# The executors' claim statements, as pg_stat_statements records them.
VQ_CLAIM_FILTER="ltrim(query) ILIKE 'SELECT%' AND query LIKE '%FROM vq.job%' AND query LIKE '%FOR UPDATE SKIP LOCKED%'"
CEIL_CLAIM_FILTER="query LIKE '%FROM t %' AND query LIKE '%FOR UPDATE SKIP LOCKED%'"
pgss_sums() {  # pgss_sums FILTER: SQL giving calls, rows, buffers of the matching statements of this database
    echo "SELECT coalesce(sum(calls), 0) AS calls, coalesce(sum(rows), 0) AS rows,
                 coalesce(sum(shared_blks_hit + shared_blks_read), 0) AS blks
          FROM pg_stat_statements
          WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND $1"
}

# probe_claim_tracked: in a database of its own (so that no measured executor has run anything
# before its run: the executors' kept plans are made during the measurement, as on a fresh
# install), run one job; the claim statement must show in pg_stat_statements (turns
# pg_stat_statements.track to 'all' when 'top' does not see it).
probe_claim_tracked() {
    local DB="${DB}_probe"
    new_db vq
    local i
    for i in 1 2; do
        q "SELECT vq_enqueue('bench_insert', '{\"probe\": true}')" >/dev/null
        wait_sql "SELECT count(*) = 0 FROM vq.job WHERE state IN ('ENQUEUED', 'RUNNING')" 30 "the probe job to finish"
        if [[ "$(q "SELECT calls > 0 FROM ($(pgss_sums "$VQ_CLAIM_FILTER")) s")" == t ]]; then
            PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
            return 0
        fi
        if ((i == 1)); then
            [[ "$(qa "SHOW pg_stat_statements.track")" == all ]] && break
            log "  pg_stat_statements.track = '$(qa "SHOW pg_stat_statements.track")' does not see the executors' claim;" \
                "setting it to 'all'"
            set_guc pg_stat_statements.track all
            wait_sql "SELECT current_setting('pg_stat_statements.track') = 'all'" 10 "pg_stat_statements.track = all"
            sleep 1   # the executors take the reload signal between polls
        fi
    done
    q "SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 120) FROM pg_stat_statements WHERE query ILIKE '%vq.job%'" >&2 || true
    die "pg_stat_statements does not record the executors' claim statement (statements on vq.job above)"
}

# ---------------------------------------------------------------------------
# Held snapshot
# ---------------------------------------------------------------------------
hold_snapshot() {  # hold_snapshot TABLE: a REPEATABLE READ transaction that has taken its snapshot, kept open
    rm -f "$WORK/snap.fifo"
    mkfifo "$WORK/snap.fifo"
    PGAPPNAME=steady_snapshot "${PSQL[@]}" -d "$DB" -At -f "$WORK/snap.fifo" >"$WORK/snap.out" 2>&1 &
    SNAP_PID=$!
    exec 7>"$WORK/snap.fifo"
    printf '%s\n' "BEGIN ISOLATION LEVEL REPEATABLE READ;" "SELECT count(*) FROM $1;" >&7
    wait_sql "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'steady_snapshot'
              AND state = 'idle in transaction' AND backend_xmin IS NOT NULL" 30 "the snapshot session to hold its snapshot"
}
snapshot_held() {
    [[ "$(q "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'steady_snapshot'
             AND state = 'idle in transaction' AND backend_xmin IS NOT NULL")" == t ]]
}
release_snapshot() {
    printf '%s\n' "COMMIT;" >&7
    wait_sql "SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'steady_snapshot'
              AND backend_xmin IS NOT NULL" 30 "the snapshot session to release its snapshot"
    exec 7>&-
    wait "$SNAP_PID" || { cat "$WORK/snap.out" >&2; die "the snapshot session failed"; }
    SNAP_PID=""
}

# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------
# One line per sample (psql -At: '|'-separated): epoch | due backlog | claim calls | rows | buffers |
# table bytes | transition bytes | n_dead_tup | vacuum_count/autovacuum_count
sample_sql() {  # sample_sql vq|ceil
    if [[ "$1" == vq ]]; then
        # (the backlog is computed after the run from created_at / started_at: counting due rows
        # here would scan the claim index's dead entries and disturb the very latencies measured)
        echo "SELECT extract(epoch FROM clock_timestamp()), NULL::bigint,
                     s.calls, s.rows, s.blks,
                     pg_total_relation_size('vq.job_active'), pg_total_relation_size('vq.job_transition_data'),
                     coalesce(st.n_dead_tup, 0), coalesce(st.vacuum_count, 0) || '/' || coalesce(st.autovacuum_count, 0)
              FROM ($(pgss_sums "$VQ_CLAIM_FILTER")) s
              LEFT JOIN pg_stat_user_tables st ON st.relid = 'vq.job_active'::regclass"
    else
        echo "SELECT extract(epoch FROM clock_timestamp()),
                     (SELECT count(*) FROM t WHERE state = 0 AND run_at <= now()),
                     s.calls, s.rows, s.blks,
                     pg_total_relation_size('t'), 0,
                     coalesce(st.n_dead_tup, 0), coalesce(st.vacuum_count, 0) || '/' || coalesce(st.autovacuum_count, 0)
              FROM ($(pgss_sums "$CEIL_CLAIM_FILTER")) s
              LEFT JOIN pg_stat_user_tables st ON st.relid = 't'::regclass"
    fi
}
# sampler OUT K T0 SQL: samples 1..K at T0 + INTERVAL x k, appended to OUT as "k|line" (an empty
# line when the query failed).
sampler() {
    local out="$1" k="$2" t0="$3" sql="$4" i line
    for ((i = 1; i <= k; i++)); do
        sleep_until "$(awk -v t="$t0" -v i="$i" -v s="$INTERVAL" 'BEGIN { printf "%.3f", t + i * s }')"
        line="$(q "$sql" 2>>"$WORK/sampler.err")" || line=""
        printf '%d|%s\n' "$i" "$line" >>"$out"
    done
}

# pgbench_progress LOG T0 NAME: "window|tps|lat|lag" from pgbench -P --progress-timestamp lines.
pgbench_progress() {
    awk -v t0="$2" -v s="$INTERVAL" '
        /^progress: / {
            ts = $2; tps = lat = lag = "-"
            for (i = 3; i <= NF; i++) {
                if ($i == "tps," || $i == "tps") tps = $(i - 1)
                if ($i == "lat") lat = $(i + 1)
                if ($i == "lag") lag = $(i + 1)
            }
            printf "%d|%s|%s|%s\n", int((ts - t0) / s + 0.5), tps, lat, lag
        }' "$1"
}

# ---------------------------------------------------------------------------
# One run
# ---------------------------------------------------------------------------
# run_load KIND NAME LOAD_SECS HOLD_SECS: KIND vq|ceil; HOLD_SECS 0 = no held snapshot, else the
# snapshot is held for HOLD_SECS and the load lasts LOAD_SECS (>= HOLD_SECS) in all.
# Leaves $WORK/NAME.samples ("k|epoch|..." lines, k = 0..K) and the pgbench logs.
run_load() {
    local kind="$1" name="$2" secs="$3" hold="$4" k t0 rc=0 rc2=0 prod cons="" samp held_ok=1 bad
    local samples="$WORK/$name.samples"
    k=$((secs / INTERVAL))
    new_db "$kind"
    if [[ "$kind" == vq ]]; then
        cat >"$WORK/producer.sql" <<SQL
\set r random(1, 1000000000)
SELECT vq_enqueue_many('bench_insert', ARRAY(SELECT jsonb_build_object('c', :client_id, 'r', :r, 'i', i) FROM generate_series(1, $PER_TX) i));
SQL
    else
        cat >"$WORK/producer.sql" <<SQL
\set r random(1, 1000000000)
INSERT INTO t (queue, priority, run_at, state, payload) SELECT 'default', 0, now(), 0, jsonb_build_object('c', :client_id, 'r', :r, 'i', i) FROM generate_series(1, $PER_TX) i;
SQL
        cat >"$WORK/consumer.sql" <<SQL
WITH c AS (SELECT id FROM t WHERE state = 0 AND run_at <= now() ORDER BY priority DESC, run_at LIMIT $CEIL_LIMIT FOR UPDATE SKIP LOCKED) UPDATE t SET state = 2 FROM c WHERE t.id = c.id;
SQL
    fi
    q "CHECKPOINT" >/dev/null
    if ((hold > 0)); then
        if [[ "$kind" == vq ]]; then hold_snapshot vq.job; else hold_snapshot t; fi
    fi
    local sql
    sql="$(sample_sql "$kind")"
    q "SELECT pg_stat_statements_reset()" >/dev/null
    printf '0|%s\n' "$(q "$sql")" >"$samples"
    t0="$(sed -n '1s/^0|\([^|]*\)|.*/\1/p' "$samples")"
    # (the background children must not keep the snapshot session's fifo open: 7>&-)
    sampler "$samples" "$k" "$t0" "$sql" 7>&- &
    samp=$!
    BG_PIDS=("$samp")
    # pgbench runs 1 s past the last sample, so that its last -P line (the last window) is printed.
    rm -f "$WORK/$name.txlog".*
    "$PGBENCH" -n -c "$CLIENTS" -j 2 -R "$RATE" -T $((secs + 1)) -P "$INTERVAL" --progress-timestamp \
        -l --log-prefix="$WORK/$name.txlog" \
        -f "$WORK/producer.sql" "$DB" >"$WORK/$name.producers.log" 2>&1 7>&- &
    prod=$!
    BG_PIDS+=("$prod")
    if [[ "$kind" == ceil ]]; then
        "$PGBENCH" -n -c "$CEIL_CONSUMERS" -j "$CEIL_CONSUMERS" -T $((secs + 1)) -P "$INTERVAL" --progress-timestamp \
            -f "$WORK/consumer.sql" "$DB" >"$WORK/$name.consumers.log" 2>&1 7>&- &
        cons=$!
        BG_PIDS+=("$cons")
    fi
    if ((hold > 0)); then
        sleep_until "$(awk -v t="$t0" -v h="$hold" 'BEGIN { printf "%.3f", t + h }')"
        snapshot_held || held_ok=0
        release_snapshot
        log "  snapshot released $(awk -v n="$(now_s)" -v t="$t0" 'BEGIN { printf "%.1f", n - t }') s after the load started"
    fi
    wait "$prod" || rc=$?
    [[ -z "$cons" ]] || wait "$cons" || rc2=$?
    wait "$samp" || true
    BG_PIDS=()
    cp "$WORK/$name.producers.log" "$PREFIX-$name.producers.log"
    [[ -z "$cons" ]] || cp "$WORK/$name.consumers.log" "$PREFIX-$name.consumers.log"
    ((rc == 0)) || { tail -n 20 "$WORK/$name.producers.log" >&2; die "$name: pgbench (producers) exited with status $rc"; }
    ((rc2 == 0)) || { tail -n 20 "$WORK/$name.consumers.log" >&2; die "$name: pgbench (consumers) exited with status $rc2"; }
    ((held_ok)) || die "$name: the snapshot session was no longer holding its snapshot at the release"
    bad="$(awk -F'|' 'NF < 10 { n++ } END { print n + 0 }' "$samples")"
    ((bad == 0)) || { cat "$WORK/sampler.err" >&2 2>/dev/null; die "$name: $bad sample(s) failed"; }
    log "  producers: $(grep -E '^(number of transactions actually processed|latency average|rate limit schedule lag|tps)' \
        "$WORK/$name.producers.log" | sed 's/ (without initial connection time)//' | paste -sd ';' | tr -s ' ')"
    [[ -z "$cons" ]] || log "  consumers: $(grep -E '^(number of transactions actually processed|latency average|tps)' \
        "$WORK/$name.consumers.log" | sed 's/ (without initial connection time)//' | paste -sd ';' | tr -s ' ')"
}

# producer_latency NAME T0: "window|p99|max" of the producers' own transactions (their
# vq_enqueue_many and its commit, from pgbench's per-transaction log), by the window they ended
# in. A window whose producers stalled (a slow WAL flush holds up every commit, theirs too) has
# jobs that waited before any executor could see them: start latency counts from created_at.
producer_latency() {
    cat "$WORK/$1.txlog".* 2>/dev/null |
        awk -v t0="$2" -v s="$INTERVAL" '{ w = int(($5 + $6 / 1e6 - t0) / s) + 1; printf "%d %.3f\n", w, $3 / 1000 }' |
        sort -k1,1n -k2,2n |
        awk 'function flush() { if (n > 0) { i = int(0.99 * n + 0.999); if (i < 1) i = 1; printf "%d|%.1f|%.1f\n", w, v[i], v[n] } }
             $1 != w { flush(); w = $1; n = 0 } { v[++n] = $2 } END { flush() }'
}

# phase_of K HOLD: phase of window K ("-" without a held snapshot)
# windows_vq NAME HOLD: post-run per-window figures -> $WORK/NAME.windows (tab-separated, "#" header)
windows_vq() {
    local name="$1" hold="$2" samples="$WORK/$1.samples" th k
    th="$(awk -F'|' '{ printf "%s%s", (NR > 1 ? "," : ""), $2 }' "$samples")"
    k="$(($(wc -l <"$samples") - 1))"
    # width_bucket(x, thresholds) = i for sample[i-1] <= x < sample[i] (thresholds from sample 0): window i.
    q "WITH th AS (SELECT '{$th}'::float8[] AS a),
            j AS (SELECT extract(epoch FROM created_at) AS c, extract(epoch FROM started_at) AS s,
                         CASE WHEN state = 'COMPLETED' THEN extract(epoch FROM finished_at) END AS f,
                         1000 * extract(epoch FROM started_at - created_at) AS lat
                  FROM vq.job WHERE handler = 'bench_insert'),
            x AS (SELECT width_bucket(c, a) AS w, count(*) AS enq, 0 AS done, NULL::float8 AS p50, NULL::float8 AS p99,
                         0 AS started
                  FROM j, th GROUP BY 1
                  UNION ALL
                  SELECT width_bucket(f, a), 0, count(*), NULL, NULL, 0 FROM j, th WHERE f IS NOT NULL GROUP BY 1
                  UNION ALL
                  SELECT width_bucket(s, a), 0, 0, percentile_cont(0.5) WITHIN GROUP (ORDER BY lat),
                         percentile_cont(0.99) WITHIN GROUP (ORDER BY lat), count(*)
                  FROM j, th WHERE s IS NOT NULL GROUP BY 1)
       SELECT w, sum(enq), sum(done), coalesce(round(max(p50)::numeric, 2)::text, '-'),
              coalesce(round(max(p99)::numeric, 2)::text, '-'), sum(started)
       FROM x WHERE w BETWEEN 1 AND $k GROUP BY w ORDER BY w" >"$WORK/$name.stats"
    join_windows "$name" "$hold" "$WORK/$name.stats" vq
    producer_latency "$name" "$(sed -n '1s/^0|\([^|]*\)|.*/\1/p' "$samples")" >"$WORK/$name.plat"
    awk -F'\t' -v OFS='\t' 'NR == FNR { split($0, a, "|"); pl[a[1]] = a[2] "\t" a[3]; next }
        /^#/ { print $0, "prod_p99_ms", "prod_max_ms"; next }
        { k++; print $0, (k in pl ? pl[k] : "-\t-") }' "$WORK/$name.plat" "$WORK/$name.windows" >"$WORK/$name.windows2"
    mv "$WORK/$name.windows2" "$WORK/$name.windows"
    cp "$WORK/$name.windows" "$PREFIX-$name.windows.tsv"
}
windows_ceil() {
    local name="$1" hold="$2" t0
    t0="$(sed -n '1s/^0|\([^|]*\)|.*/\1/p' "$WORK/$name.samples")"
    pgbench_progress "$WORK/$name.producers.log" "$t0" >"$WORK/$name.prod"
    pgbench_progress "$WORK/$name.consumers.log" "$t0" >"$WORK/$name.cons"
    join_prod_cons "$WORK/$name.prod" "$WORK/$name.cons" >"$WORK/$name.stats"
    join_windows "$name" "$hold" "$WORK/$name.stats" ceil
}
join_prod_cons() {  # "w|prod tps|prod lat|prod lag|cons tps|cons lat" per window
    awk -F'|' 'NR == FNR { p[$1] = $2 "|" $3 "|" $4; next } { c[$1] = $2 "|" $3 }
               END { for (w in p) print w "|" p[w] "|" (w in c ? c[w] : "-|-");
                     for (w in c) if (!(w in p)) print w "|-|-|-|" c[w] }' "$1" "$2"
}
# join_windows NAME HOLD STATS KIND: samples + stats (keyed by window) -> NAME.windows
#   vq:   end_s phase enq done p50 p99 backlog claims claimed blks buf_per_job job_mb trans_mb dead vacuums
#   ceil: end_s phase claimed claims backlog blks buf_per_row t_mb dead vacuums prod_tps prod_lat prod_lag cons_tps cons_lat
join_windows() {
    awk -F'|' -v OFS='\t' -v hold="$2" -v s="$INTERVAL" -v kind="$4" '
        NR == FNR { st[$1] = $0; next }
        { smp[$1] = $0; n = $1 }
        END {
            if (kind == "vq")
                print "# end_s", "phase", "enq", "done", "p50_ms", "p99_ms", "backlog", "claims", "claimed", "blks",
                      "buf_per_job", "job_mb", "trans_mb", "dead_tup", "vacuums"
            else
                print "# end_s", "phase", "claimed", "claims", "backlog", "blks", "buf_per_row", "t_mb", "dead_tup",
                      "vacuums", "prod_tps", "prod_lat_ms", "prod_lag_ms", "cons_tps", "cons_lat_ms"
            split(smp[0], b, "|")
            for (k = 1; k <= n; k++) {
                split(smp[k - 1], p, "|"); split(smp[k], c, "|")
                end_s = sprintf("%.0f", c[2] - b[2])
                phase = hold == 0 ? "-" : (k * s <= hold ? "held" : "released")
                dc = c[4] - p[4]; dr = c[5] - p[5]; db = c[6] - p[6]
                bpj = dr > 0 ? sprintf("%.1f", db / dr) : "-"
                mb1 = sprintf("%.1f", c[7] / 1048576); mb2 = sprintf("%.1f", c[8] / 1048576)
                if (kind == "vq") {
                    if (k in st) split(st[k], x, "|"); else { x[2] = 0; x[3] = 0; x[4] = "-"; x[5] = "-"; x[6] = 0 }
                    # due backlog at the window end: jobs enqueued so far (all due at once) less those started
                    bl += x[2] - x[6]
                    print end_s, phase, x[2], x[3], x[4], x[5], bl, dc, dr, db, bpj, mb1, mb2, c[9], c[10]
                } else {
                    if (k in st) split(st[k], x, "|"); else { x[2] = x[3] = x[4] = x[5] = x[6] = "-" }
                    print end_s, phase, dr, dc, c[3], db, bpj, mb1, c[9], c[10], x[2], x[3], x[4], x[5], x[6]
                }
            }
        }' "$3" "$WORK/$1.samples" >"$WORK/$1.windows"
    cp "$WORK/$1.windows" "$PREFIX-$1.windows.tsv"
    awk -F'|' -v OFS='\t' 'BEGIN { print "# k", "epoch", "due_backlog", "claim_calls", "claim_rows", "claim_blks",
                                   "table_bytes", "transition_bytes", "n_dead_tup", "vacuums_manual/auto" }
                           { $1 = $1; print }' "$WORK/$1.samples" >"$PREFIX-$1.samples.tsv"
}

print_windows() {  # print_windows NAME KIND
    if [[ "$2" == vq ]]; then
        printf '  %6s %-8s %7s %7s %8s %8s %8s %6s %7s %7s %7s %8s %7s | %8s %8s\n' "end s" "phase" "enq" "done" \
            "p50 ms" "p99 ms" "backlog" "claims" "buf/job" "job MB" "tr MB" "dead" "vac/av" "prod p99" "prod max"
        awk -F'\t' '!/^#/ { printf "  %6s %-8s %7s %7s %8s %8s %8s %6s %7s %7s %7s %8s %7s | %8s %8s\n",
                            $1, $2, $3, $4, $5, $6, $7, $8, $11, $12, $13, $14, $15, $16, $17 }' "$WORK/$1.windows"
    else
        printf '  %6s %-8s %8s %6s %8s %7s %6s %8s %7s | %8s %7s %7s | %8s %8s\n' "end s" "phase" "claimed" "claims" \
            "backlog" "buf/row" "t MB" "dead" "vac/av" "prod tps" "lat ms" "lag ms" "cons tps" "lat ms"
        awk -F'\t' '!/^#/ { printf "  %6s %-8s %8s %6s %8s %7s %6s %8s %7s | %8s %7s %7s | %8s %8s\n",
                            $1, $2, $3, $4, $5, $7, $8, $9, $10, $11, $12, $13, $14, $15 }' "$WORK/$1.windows"
    fi
}

# summarize NAME LABEL KIND FROM TO FIRST: summary row over windows FROM..TO; "first" = windows 1..FIRST
# of the run, "last" = the last FIRST windows of FROM..TO (fewer if the range is shorter).
summarize() {
    awk -F'\t' -v label="$2" -v kind="$3" -v from="$4" -v to="$5" -v f="$6" '
        /^#/ { next }
        { k++
          if (kind == "vq") { p50 = $5; p99 = $6; bl = $7; rows = $9; blks = $10; mb = $12; tmb = $13 }
          else { p50 = "-"; p99 = "-"; bl = $5; rows = $3; blks = $6; mb = $8; tmb = "-" }
          if (k <= f) { fr += rows; fb += blks }
          if (k == f) { mb1 = mb; tmb1 = tmb }
          if (k < from || k > to) next
          if (p50 != "-" && (mp50 == "" || p50 + 0 > mp50 + 0)) mp50 = p50
          if (p99 != "-" && (mp99 == "" || p99 + 0 > mp99 + 0)) mp99 = p99
          if (mbl == "" || bl + 0 > mbl + 0) mbl = bl
          if (k > to - f) { lr += rows; lb += blks }
          if (k == to) { mbe = mb; tmbe = tmb } }
        END {
          bf = fr > 0 ? sprintf("%.1f", fb / fr) : "-"; bla = lr > 0 ? sprintf("%.1f", lb / lr) : "-"
          printf "%s|%s|%s|%s|%s|%s|%s|%s|%s|%s\n", label, (mp50 == "" ? "-" : mp50), (mp99 == "" ? "-" : mp99),
                 mbl, bf, bla, mb1, mbe, tmb1, tmbe }' "$WORK/$1.windows" >>"$WORK/summary"
}

# first_windows SECS: windows in the "first minute" (half the run when it is shorter than 2 minutes)
first_windows() { local n=$(($1 / INTERVAL / 2)); ((n > 60 / INTERVAL)) && n=$((60 / INTERVAL)); ((n < 1)) && n=1; echo "$n"; }

do_run() {  # do_run NAME
    local name="$1" kind secs hold f nh nt
    case "$name" in
        vq_plain) kind=vq; secs=$SECS; hold=0 ;;
        vq_snapshot) kind=vq; secs=$((SNAP_SECS + RECOVERY_SECS)); hold=$SNAP_SECS ;;
        ceil_plain) kind=ceil; secs=$CEIL_SECS; hold=0 ;;
        ceil_snapshot) kind=ceil; secs=$((CEIL_SECS + RECOVERY_SECS)); hold=$CEIL_SECS ;;
    esac
    log ""
    if ((hold > 0)); then
        log "== $name: $secs s of load, a REPEATABLE READ snapshot held for the first $hold s (load average $(loadavg))"
    else
        log "== $name: $secs s of load, no held snapshot (load average $(loadavg))"
    fi
    run_load "$kind" "$name" "$secs" "$hold"
    log "  statements by execution time over the run (pg_stat_statements; commits and their WAL flushes not included):"
    q "SELECT format('  %9s calls %9s rows %8s ms/call %7s s %7s buf/call  %s', calls, rows,
                     round(mean_exec_time::numeric, 3), round((total_exec_time / 1000)::numeric, 1),
                     round((shared_blks_hit + shared_blks_read)::numeric / greatest(calls, 1), 1),
                     left(regexp_replace(query, '\s+', ' ', 'g'), 80))
       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
       ORDER BY total_exec_time DESC LIMIT 6"
    if [[ "$kind" == vq ]]; then
        log "  queue 'default': $(q "SELECT format('max_concurrent_jobs %s x instances %s', max_concurrent_jobs, instances)
                                    FROM vq.queue WHERE name = 'default'"), vq.executors_per_database" \
            "$(q "SHOW vq.executors_per_database"), vq.batch_size $(q "SHOW vq.batch_size");" \
            "claim statements tracked: $(q "SELECT count(*) FROM pg_stat_statements
                                           WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                                           AND $VQ_CLAIM_FILTER")"
        log "  left at the end: $(q "SELECT string_agg(state || ' ' || n, ', ' ORDER BY state)
                                      FROM (SELECT state::text, count(*) AS n FROM vq.job GROUP BY 1) s"); visible claims" \
            "(CLAIMED transitions): $(q "SELECT count(*) FROM vq.job_transition WHERE kind = 'CLAIMED'")"
        log "  vq.job_finished at the end (ended jobs, kept for vq.retention_finished = $(q "SHOW vq.retention_finished")):" \
            "$(q "SELECT round(pg_total_relation_size('vq.job_finished') / 1048576.0, 1)") MB"
        windows_vq "$name" "$hold"
        ! awk -F'\t' '!/^#/ { d += $4; c += $8 } END { exit !(d > 0 && c == 0) }' "$WORK/$name.windows" ||
            die "$name: jobs completed but pg_stat_statements recorded no claim statement"
    else
        log "  left at the end: $(q "SELECT count(*) FROM t WHERE state = 0") of $(q "SELECT count(*) FROM t") rows unclaimed"
        windows_ceil "$name" "$hold"
    fi
    print_windows "$name" "$kind"
    nt=$((secs / INTERVAL))
    if ((hold > 0)); then
        nh=$((hold / INTERVAL))
        f="$(first_windows "$hold")"
        summarize "$name" "$name (held, ${hold} s)" "$kind" 1 "$nh" "$f"
        summarize "$name" "$name (after release, ${RECOVERY_SECS} s)" "$kind" $((nh + 1)) "$nt" "$f"
    else
        f="$(first_windows "$secs")"
        summarize "$name" "$name" "$kind" 1 "$nt" "$f"
    fi
    echo "$name $hold" >>"$WORK/done_runs"
    PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
}

: >"$WORK/done_runs"
[[ " $RUNS " != *" vq_"* ]] || probe_claim_tracked
for r in $RUNS; do
    do_run "$r"
done

# ---------------------------------------------------------------------------
# Plot
# ---------------------------------------------------------------------------
plot() {
    local png="$PREFIX.png" gp="$WORK/plot.gp" f lat="" bl="" buf="" rel="" name hold
    while read -r name hold; do
        f="$PREFIX-$name.windows.tsv"
        case "$name" in
            vq_*)
                lat+="${lat:+, }'$f' using 1:5 with linespoints title '$name p50', '$f' using 1:6 with linespoints title '$name p99'"
                bl+="${bl:+, }'$f' using 1:7 with linespoints title '$name'"
                buf+="${buf:+, }'$f' using 1:11 with linespoints title '$name'" ;;
            ceil_*)
                bl+="${bl:+, }'$f' using 1:5 with lines dashtype 2 title '$name'"
                buf+="${buf:+, }'$f' using 1:7 with lines dashtype 2 title '$name (claim+update)'" ;;
        esac
        if ((hold > 0)); then
            rel+="set arrow from $hold, graph 0 to $hold, graph 1 nohead dashtype 2 lw 2 lc rgb 'dark-red';"
        fi
    done <"$WORK/done_runs"
    {
        echo "set terminal pngcairo noenhanced size 1200,1300 font ',10'"
        echo "set output '$png'"
        echo "set datafile separator tab"
        echo "set datafile missing '-'"
        echo "set key outside right top"
        echo "set lmargin at screen 0.08; set rmargin at screen 0.74"
        echo "set grid"
        echo "set xlabel 'seconds since the load started (dashed dark red: snapshot released)'"
        echo "$rel"
        echo "set multiplot layout 3,1 title 'vq_job steady load: $((RATE * PER_TX)) jobs/s, $(date '+%Y-%m-%d %H:%M')'"
        if [[ -n "$lat" ]]; then
            echo "set logscale y; set ylabel 'start latency ms (log)'; set title 'start latency per 10-s window (goals: p50 5 ms, p99 50 ms)'"
            echo "plot $lat, $GOAL_P50 with lines dashtype 4 lc rgb 'black' title 'p50 goal', $GOAL_P99 with lines dashtype 4 lc rgb 'red' title 'p99 goal'"
            echo "unset logscale y"
        fi
        echo "set ylabel 'due jobs'; set title 'due backlog at each window end (goal <= $GOAL_BACKLOG)'"
        echo "plot $bl, $GOAL_BACKLOG with lines dashtype 4 lc rgb 'red' title 'goal'"
        echo "set logscale y; set ylabel 'buffers / claimed job (log)'; set title 'shared buffers per claimed job (claim statement)'"
        echo "plot $buf"
        echo "unset multiplot"
    } >"$gp"
    if gnuplot "$gp" 2>"$WORK/gnuplot.err"; then
        log "plot: $png"
    else
        echo "steady bench: WARNING: gnuplot failed; no PNG:" >&2
        cat "$WORK/gnuplot.err" >&2
    fi
}
((PLOT)) && [[ -s "$WORK/done_runs" ]] && plot

# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------
log ""
log "steady benchmark summary (PostgreSQL $server_version; load average $(loadavg) after the runs)"
log "goals: every window p50 <= $GOAL_P50 ms and p99 <= $GOAL_P99 ms; due backlog <= $GOAL_BACKLOG; buffers per claimed job" \
    "in the last minute <= ${GOAL_GROWTH}x the first minute; sizes at the end <= ${GOAL_GROWTH}x after the first minute"
log "(first / last minute: half the run when it is shorter than 2 minutes; an 'after release' row compares its last" \
    "minute and its end with the run's first minute; ceiling buffers are of its claim + UPDATE statement)"
printf '%-34s %8s %8s %8s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s  %s\n' "run" "max p50" "max p99" "max due" \
    "buf 1st" "buf last" "ratio" "MB 1st" "MB end" "ratio" "trMB 1st" "trMB end" "ratio" "missed goals"
missed=0
while IFS='|' read -r label p50 p99 bl bf blast mb1 mbe tmb1 tmbe; do
    rb="$(ratio "$blast" "$bf")"; rm="$(ratio "$mbe" "$mb1")"; rt="$(ratio "$tmbe" "$tmb1")"
    miss=()
    [[ "$p50" == - ]] || le "$p50" "$GOAL_P50" || miss+=(p50)
    [[ "$p99" == - ]] || le "$p99" "$GOAL_P99" || miss+=(p99)
    le "$bl" "$GOAL_BACKLOG" || miss+=(backlog)
    [[ "$rb" == - ]] || le "$rb" "$GOAL_GROWTH" || miss+=(buffers)
    [[ "$rm" == - ]] || le "$rm" "$GOAL_GROWTH" || miss+=(size)
    [[ "$rt" == - ]] || le "$rt" "$GOAL_GROWTH" || miss+=(transitions)
    verdict="PASS"
    ((${#miss[@]} == 0)) || { verdict="MISS: ${miss[*]}"; missed=$((missed + ${#miss[@]})); }
    printf '%-34s %8s %8s %8s | %8s %8s %6s | %8s %8s %6s | %8s %8s %6s  %s\n' "$label" "$p50" "$p99" "$bl" \
        "$bf" "$blast" "$rb" "$mb1" "$mbe" "$rm" "$tmb1" "$tmbe" "$rt" "$verdict"
done <"$WORK/summary"
log "files: $PREFIX-*"
((missed == 0)) || log "MISS: $missed goal(s) not met (a measurement, not a test: exit status stays 0)"
((ERRORS == 0)) || { echo "steady bench: $ERRORS measurement(s) failed (ERROR above)" >&2; exit 1; }
exit 0

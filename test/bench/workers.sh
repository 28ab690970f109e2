#!/usr/bin/env bash
# test/bench/workers.sh — the background workers of vq_job, measured in one run on one server:
#
#   1. drain     100,000 due no-op PL/pgSQL jobs, for vq.executors_per_database 1/2/3 x
#                vq.batch_size 100/500 (queue max_concurrent_jobs 10,000 so capacity never
#                limits), against the "SQL ceiling": the same rows in a plain table with the
#                same indexes, drained by pgbench (1 and 2 clients) claiming 100 rows per
#                transaction FOR UPDATE SKIP LOCKED and marking them COMPLETED. Goal: best vq
#                rate >= 0.6 x best ceiling rate. WAL bytes per job for both. For context also
#                a ceiling claiming 500 rows per transaction (as many as vq's largest batch).
#   2. latency   idle workers (default settings, sleep_delay_ms 5000), 1,000 jobs enqueued one
#                per transaction 10 ms apart by pgbench; latency = handler start (clock in the
#                handler) - clock_timestamp() taken in the enqueuing transaction just before its
#                COMMIT. Goal p50 <= 0.5 ms, p99 <= 2 ms. For context the same run with the
#                enqueuing session's synchronous_commit = off (the COMMIT does not wait for the
#                WAL flush), which isolates the workers' own wake-up path.
#   3. schedule  200 jobs due at now() + 2 s + i x 17 ms; handler start - scheduled_at.
#                Goal: never negative, p99 <= 5 ms.
#   4. rescue    one long job per executor RUNNING (claimed visibly), then pg_ctl stop -m
#                immediate and start; time from the server accepting connections (the start of
#                the autovacuum launcher, which the postmaster forks as it opens for connections;
#                pg_isready, polled every 10 ms, sees it ~30 ms later) until the first orphaned
#                job runs again (its handler records its start). Skipped with an ERROR when a
#                newer vq_job.so was installed after the server started (the restart would load
#                another build than the database's schema belongs to).
#                Goal <= 2 s.
#
# Run by ./scripts/bench (a fresh cluster: fsync = on, synchronous_commit = on, shared_buffers
# = 1GB, vq_job preloaded; PGHOST PGPORT PGUSER VQ_CLUSTER_DIR VQ_CLUSTER_DATA VQ_PG_BIN
# exported). It creates its own database, vq_bench_workers, and drops it at the end; every
# vq.* (and other) setting it changes with ALTER SYSTEM is reset at the end, even on error.
# Part 4 restarts the server (an immediate stop, i.e. a crash): run it last.
#
# Drain method. Every run starts from empty tables (TRUNCATE) and a CHECKPOINT; the backlog is
# loaded in one transaction and ANALYZEd, so the claim is planned on real statistics on both
# sides. vq: vq_enqueue_many(N payloads, run_at => T) with T = load start + BENCH_DRAIN_DELAY
# seconds, so the idle executors, which sleep until the earliest known due time, start at T:
#   rate = N / (max(finished_at) - T)             (includes the wake-up at T, the executors'
#                                                  search for the next due time, and the first
#                                                  run of the handler in a new executor, which is
#                                                  a visible claim)
# ceiling: rows equal to vq_enqueue_many's (checked column by column once) INSERTed into
# bench.plain_job (LIKE vq.job_active INCLUDING DEFAULTS INCLUDING INDEXES; index sets checked equal),
# then pgbench -n (simple protocol) with the UPDATE ... FROM (SELECT ... LIMIT 100 FOR UPDATE
# SKIP LOCKED) script until empty (a few surplus transactions; finished_at = now() is each
# transaction's start):
#   rate = N / (max(finished_at) - min(finished_at))  (from the first transaction's start: a
#                                                  stricter baseline than vq's T)
# A second, coarser figure for both ("wall"): a session polls every 20 ms from T (vq) / from
# just before pgbench starts (ceiling) until no row is ENQUEUED or RUNNING. It is a procedure
# that commits between polls: a snapshot held through the drain (e.g. by a polling function)
# keeps every dead row version, and the claims of both sides slow down 2-3x.
# The workloads are interleaved over BENCH_ROUNDS rounds (forward order in odd rounds, reverse in
# even ones); the summary shows medians. Autovacuum is off on the tables involved (equally).
#
# Knobs: BENCH_ROUNDS (drain rounds, default 3), BENCH_DRAIN_JOBS (default 100000),
#        BENCH_DRAIN_DELAY (seconds from load start to the backlog's due time, default 5),
#        BENCH_LATENCY_JOBS (default 1000), BENCH_SKIP_RESCUE=1 (no server restart),
#        BENCH_PARTS (subset of "drain latency schedule rescue", default all).
#
# Exit status: 0 whenever the measurements completed, goals met or not (a missed goal prints
# MISS); non-zero only if something failed (an error, a wrong row count, a timeout).
set -euo pipefail

ROUNDS="${BENCH_ROUNDS:-3}"
N="${BENCH_DRAIN_JOBS:-100000}"
DRAIN_DELAY="${BENCH_DRAIN_DELAY:-5}"
NLAT="${BENCH_LATENCY_JOBS:-1000}"
PARTS="${BENCH_PARTS:-drain latency schedule rescue}"
[[ "${BENCH_SKIP_RESCUE:-}" == 1 ]] && PARTS="${PARTS//rescue/}"
DB=vq_bench_workers
CLAIM=100                    # rows per ceiling transaction (the ceiling the goal is set against)
CEILING_CLAIMS=(100 500)     # 500: context, as many rows per transaction as vq's largest batch
EXECUTORS=(1 2 3)
BATCHES=(100 500)
MAX_CONCURRENT=10000         # drain: queue capacity never limits a claim
NSCHED=200
GOAL_RATIO=0.6
GOAL_LAT_P50=0.5
GOAL_LAT_P99=2
GOAL_SCHED_P99=5
GOAL_RESCUE=2

for v in ROUNDS N DRAIN_DELAY NLAT; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "workers bench: $v must be a positive integer" >&2; exit 2; }
done

PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
PGBENCH="$PG_BIN/pgbench"
REPO_ROOT="${VQ_REPO_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)}"

WORK="$(mktemp -d /tmp/vq_bench_workers.XXXXXX)"
CHANGED_SETTINGS=()
BG_PIDS=()
ERRORS=0

die() { echo "workers bench: ERROR: $*" >&2; exit 1; }
# shellcheck source=test/bench/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
now_s() { date +%s.%N; }

cleanup() {
    local rc=$? p
    set +e
    for p in "${BG_PIDS[@]-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null; done
    if "$PG_BIN/pg_isready" -q -t 30; then
        reset_gucs 2>/dev/null
        PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
    else
        echo "workers bench: the server is not accepting connections; settings ${CHANGED_SETTINGS[*]-} not reset" >&2
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# wait_sql SQL SECS WHAT: poll SQL (a boolean) every 20 ms until true, or die after SECS.
wait_sql() {
    local deadline last
    deadline=$(awk -v s="$(now_s)" -v d="$2" 'BEGIN { printf "%.3f", s + d }')
    while :; do
        last="$(q "$1" 2>&1)" || true
        [[ "$last" == t ]] && return 0
        awk -v n="$(now_s)" -v d="$deadline" 'BEGIN { exit !(n > d) }' &&
            die "timed out after $2 s waiting for $3 (last: $last)"
        sleep 0.02
    done
}

wait_executors() {
    wait_sql "SELECT count(*) = $1 FROM pg_stat_activity
              WHERE datname = current_database() AND backend_type = 'vq_job executor'" 30 \
        "$1 executor(s) serving $DB"
}

# ---------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------
PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
"$PG_BIN/createdb" "$DB"
"${PSQL[@]}" -d "$DB" -o /dev/null <<SQL
SET client_min_messages = warning;
CREATE EXTENSION vq_job;
CREATE SCHEMA bench;

-- The drain's handler: does nothing.
CREATE FUNCTION bench.noop(jsonb) RETURNS void LANGUAGE plpgsql AS \$\$BEGIN END\$\$;
SELECT vq_register_handler('noop', 'bench.noop(jsonb)');

-- Latency and schedule handler: records when it started (and in which executor).
CREATE TABLE bench.started (
    execution_id uuid NOT NULL,
    attempt      integer NOT NULL,
    started      timestamptz NOT NULL,
    pid          integer NOT NULL
);
CREATE FUNCTION bench.rec(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO bench.started VALUES (ctx.execution_id, ctx.attempt_number, clock_timestamp(), pg_backend_pid());
END\$\$;
SELECT vq_register_handler('rec', 'bench.rec(jsonb, vq.job_context)');

-- Rescue handler: records its start; the first attempt then sleeps 10 s (it is still
-- RUNNING when the server crashes), a rescued attempt returns at once. The start of the
-- crashed attempt is rolled back with it; bench.started keeps only committed starts.
CREATE FUNCTION bench.slow(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO bench.started VALUES (ctx.execution_id, ctx.attempt_number, clock_timestamp(), pg_backend_pid());
    IF ctx.attempt_number = 0 THEN
        PERFORM pg_sleep(10);
    END IF;
END\$\$;
SELECT vq_register_handler('slow', 'bench.slow(jsonb, vq.job_context)');

-- Latency driver: enqueue, then stamp clock_timestamp() as the last thing before the commit
-- (the function runs in an autocommit statement: the COMMIT follows it in the same round
-- trip). It also stores the previous job's post-commit stamp, taken by the client after its
-- COMMIT returned (carried over in pgbench variables).
CREATE TABLE bench.lat (
    execution_id uuid PRIMARY KEY,
    pre_commit   timestamptz NOT NULL,
    post_commit  timestamptz
);
CREATE FUNCTION bench.enqueue_stamped(prev_eid text, prev_post text) RETURNS uuid LANGUAGE plpgsql AS \$\$
DECLARE e uuid;
BEGIN
    UPDATE bench.lat SET post_commit = prev_post::timestamptz WHERE execution_id = prev_eid::uuid;
    e := vq_enqueue('rec', '{"n": 1}');
    INSERT INTO bench.lat VALUES (e, clock_timestamp());
    RETURN e;
END\$\$;

-- The ceiling's table: the same columns, defaults and indexes as vq.job_active (the partition
-- of vq.job that holds unfinished jobs).
CREATE TABLE bench.plain_job (LIKE vq.job_active INCLUDING DEFAULTS INCLUDING INDEXES);

-- Autovacuum off on both sides, so that a worker waking in one run only adds no noise.
ALTER TABLE vq.job_active SET (autovacuum_enabled = false);
ALTER TABLE vq.job_finished SET (autovacuum_enabled = false);
ALTER TABLE vq.job_transition_data SET (autovacuum_enabled = false);
ALTER TABLE bench.plain_job SET (autovacuum_enabled = false);

-- wait_drained(table, t0, timeout): from t0, poll every 20 ms until no row of the table is
-- ENQUEUED or RUNNING; returns the seconds from t0. A procedure that COMMITs before every poll:
-- it holds no snapshot between polls, so it does not hold back the xmin horizon (a function
-- would keep its calling statement's snapshot for the whole drain, keeping every dead row
-- version unremovable and every claim index entry unkillable: the claims would slow down).
CREATE PROCEDURE bench.wait_drained(tbl regclass, t0 timestamptz, timeout_s float8, INOUT secs float8 DEFAULT NULL)
LANGUAGE plpgsql AS \$\$
DECLARE
    busy boolean;
BEGIN
    COMMIT;
    IF clock_timestamp() < t0 THEN
        PERFORM pg_sleep(extract(epoch FROM t0 - clock_timestamp()));
    END IF;
    LOOP
        COMMIT;
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s WHERE queue = ''default'' AND state = ''ENQUEUED'')'
                       ' OR EXISTS (SELECT 1 FROM %s WHERE state = ''RUNNING'')', tbl, tbl) INTO busy;
        EXIT WHEN NOT busy;
        IF clock_timestamp() > t0 + timeout_s * interval '1 s' THEN
            RAISE EXCEPTION '% not drained % s after %', tbl, timeout_s, t0;
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
    secs := extract(epoch FROM clock_timestamp() - t0);
END\$\$;
SQL

# The ceiling's table must carry the same indexes as vq.job_active (definitions modulo names),
# and those must include the primary key and the claim, active job_id and running indexes.
idx_sig() {
    q "SELECT string_agg(regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', ''), ' | '
                         ORDER BY regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', ''))
       FROM pg_index WHERE indrelid = '$1'::regclass"
}
[[ "$(idx_sig vq.job_active)" == "$(idx_sig bench.plain_job)" ]] ||
    die "index sets differ: vq.job_active [$(idx_sig vq.job_active)] vs bench.plain_job [$(idx_sig bench.plain_job)]"
for i in job_active_pkey job_claim_idx job_active_job_id_key job_running_idx; do
    [[ "$(q "SELECT to_regclass('vq.$i') IS NOT NULL")" == t ]] || die "vq.job_active has no index $i"
done
VQ_INDEXES="$(q "SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_index i
                 JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = 'vq.job_active'::regclass")"

ADDRESS_LIT="$(q "SELECT quote_literal(address) FROM vq.handler WHERE name = 'noop'")"
[[ -n "$ADDRESS_LIT" ]] || die "handler 'noop' is not registered"

# The executors must be up before anything is measured.
wait_executors "$(q "SHOW vq.executors_per_database")"

server_version="$(q "SHOW server_version")"
server_version="${server_version%% *}"
log "workers bench: PostgreSQL $server_version, fsync=$(q "SHOW fsync"), synchronous_commit=$(q "SHOW synchronous_commit")," \
    "shared_buffers=$(q "SHOW shared_buffers"), $(nproc) CPUs, load average $(loadavg) before the runs"
log "vq.job_active indexes: $VQ_INDEXES (bench.plain_job: the same)"

# Summary rows: "label|figure|goal|verdict" lines, printed at the end.
: >"$WORK/summary"
summary() { printf '%s|%s|%s|%s\n' "$1" "$2" "$3" "$4" >>"$WORK/summary"; }

# ---------------------------------------------------------------------------
# Part 1: drain
# ---------------------------------------------------------------------------
# The rows vq_enqueue_many writes, for the ceiling (e = execution_id, p = payload, d = due).
COLUMNS="(execution_id, state, priority, attempt_number, max_attempts, scheduled_at,
 created_at, updated_at, enqueued_by, queue, job_id, handler, handler_address, handler_function, payload, metadata)"
ROW="e, 'ENQUEUED', 0, 0, 3, d, now(), now(), current_user::regrole, 'default',
 'delayed-' || e::text, 'noop', $ADDRESS_LIT, $ADDRESS_LIT::regprocedure, p, '{}'::jsonb"
load_plain() {  # load_plain COUNT: insert COUNT due rows into bench.plain_job
    q "INSERT INTO bench.plain_job $COLUMNS
       SELECT $ROW FROM (SELECT gen_random_uuid(), '{\"n\": 1}'::jsonb, now()
                         FROM generate_series(1, $1)) AS u(e, p, d)" >/dev/null
}
for claim in "${CEILING_CLAIMS[@]}"; do
    cat >"$WORK/ceiling_l$claim.sql" <<SQL
UPDATE bench.plain_job t SET state = 'COMPLETED', finished_at = now(), updated_at = now()
FROM (SELECT execution_id FROM bench.plain_job
      WHERE queue = 'default' AND state = 'ENQUEUED' AND scheduled_at <= now()
      ORDER BY priority DESC, scheduled_at LIMIT $claim FOR UPDATE SKIP LOCKED) c
WHERE t.execution_id = c.execution_id;
SQL
done

truncate_all() { q "TRUNCATE vq.job, vq.job_transition_data, vq.job_log, bench.plain_job" >/dev/null; }

cur_executors=""
cur_batch=""
configure_vq() {  # configure_vq EXECUTORS BATCH
    if [[ "$cur_executors" != "$1" ]]; then
        set_guc vq.executors_per_database "$1"
        cur_executors="$1"
    fi
    if [[ "$cur_batch" != "$2" ]]; then
        set_guc vq.batch_size "$2"
        cur_batch="$2"
    fi
    wait_executors "$1"
}

# record NAME ROUND LABEL SPAN_S WALL_S WAL_BYTES_PER_JOB FIRST_MS VISIBLE
# appends "name round rate wall_rate wal first_ms visible" to the results and prints the run.
record() {
    local rate wall_rate
    rate="$(awk -v n="$N" -v s="$4" 'BEGIN { printf "%.0f", n / s }')"
    wall_rate="$(awk -v n="$N" -v s="$5" 'BEGIN { printf "%.0f", n / s }')"
    echo "$1 $2 $rate $wall_rate $(fmt "$6" 0) $7 $8" >>"$WORK/results"
    printf '  round %d  %-36s %7s jobs/s (wall %7s) %5s WAL B/job' "$2" "$3" "$rate" "$wall_rate" "$(fmt "$6" 0)"
    [[ "$7" == - ]] || printf '  first batch done %s ms after due, %s visible claim(s)' "$7" "$8"
    printf '\n'
}

# run_vq EXECUTORS BATCH ROUND
run_vq() {
    local e="$1" b="$2" round="$3" name="vq_e$1_b$2" t lsn0 lsn1 wall stats ndone span first visible wal
    configure_vq "$e" "$b"
    truncate_all
    q "CHECKPOINT" >/dev/null
    # The backlog, due at T = now() + DRAIN_DELAY s, loaded in one transaction, then ANALYZEd.
    t="$(q "SELECT now() + interval '$DRAIN_DELAY s' AS t,
                   vq_enqueue_many('noop', array_fill('{\"n\": 1}'::jsonb, ARRAY[$N]), now() + interval '$DRAIN_DELAY s')
                   IS NOT NULL" | cut -d'|' -f1)"
    q "ANALYZE vq.job" >/dev/null
    lsn0="$(q "SELECT pg_current_wal_lsn()")"
    [[ "$(q "SELECT clock_timestamp() < '$t'::timestamptz - interval '100 ms'")" == t ]] ||
        die "$name (round $round): loading $N jobs took longer than BENCH_DRAIN_DELAY=$DRAIN_DELAY s; raise it"
    [[ "$(q "SELECT count(*) FROM vq.job WHERE state = 'ENQUEUED'")" == "$N" ]] ||
        die "$name (round $round): $N jobs should be ENQUEUED before the due time"
    wall="$(q "CALL bench.wait_drained('vq.job', '$t', 300)")"
    lsn1="$(q "SELECT pg_current_wal_lsn()")"
    stats="$(q "SELECT count(*) FILTER (WHERE state = 'COMPLETED'),
                       extract(epoch FROM max(finished_at) - '$t'::timestamptz),
                       round(1000 * extract(epoch FROM min(finished_at) - '$t'::timestamptz), 1),
                       (SELECT count(*) FROM vq.job_transition WHERE kind = 'CLAIMED'),
                       pg_wal_lsn_diff('$lsn1', '$lsn0') / $N
                FROM vq.job")"
    IFS='|' read -r ndone span first visible wal <<<"$stats"
    [[ "$ndone" == "$N" ]] || die "$name (round $round): $ndone of $N jobs COMPLETED"
    record "$name" "$round" "vq: $e executor(s), batch $b" "$span" "$wall" "$wal" "$first" "$visible"
}

# run_ceiling CLIENTS CLAIM ROUND
run_ceiling() {
    local c="$1" claim="$2" round="$3" name="ceil_c$1_l$2" t lsn0 lsn1 wall stats rc=0 poller ndone span wal
    local out="$WORK/pgbench.$name.$3.log" per_client=$(((N + $2 * $1 - 1) / ($2 * $1) + 10))
    truncate_all
    q "CHECKPOINT" >/dev/null
    load_plain "$N"
    q "ANALYZE bench.plain_job" >/dev/null
    lsn0="$(q "SELECT pg_current_wal_lsn()")"
    t="$(q "SELECT clock_timestamp()")"
    q "CALL bench.wait_drained('bench.plain_job', '$t', 300)" >"$WORK/wall" &
    poller=$!
    BG_PIDS=("$poller")
    "$PGBENCH" -n -c "$c" -j "$c" -t "$per_client" -f "$WORK/ceiling_l$claim.sql" "$DB" >"$out" 2>&1 || rc=$?
    wait "$poller" || die "$name (round $round): the drain poller failed"
    BG_PIDS=()
    ((rc == 0)) || { cat "$out" >&2; die "pgbench $name (round $round) exited with status $rc"; }
    wall="$(cat "$WORK/wall")"
    lsn1="$(q "SELECT pg_current_wal_lsn()")"
    stats="$(q "SELECT count(*) FILTER (WHERE state = 'COMPLETED'),
                       extract(epoch FROM max(finished_at) - min(finished_at)),
                       pg_wal_lsn_diff('$lsn1', '$lsn0') / $N
                FROM bench.plain_job")"
    IFS='|' read -r ndone span wal <<<"$stats"
    [[ "$ndone" == "$N" ]] || die "$name (round $round): $ndone of $N rows COMPLETED after $per_client transactions per client"
    record "$name" "$round" "ceiling: $c client(s), LIMIT $claim" "$span" "$wall" "$wal" - -
}

# median NAME COLUMN: median over the rounds of a column of the results.
median() {
    awk -v w="$1" -v c="$2" '$1 == w && $c != "-" { print $c }' "$WORK/results" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print ""; exit }
              if (NR % 2) printf "%.0f", v[(NR + 1) / 2]; else printf "%.0f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# best REGEX COLUMN: the workload matching REGEX with the highest median in COLUMN.
best() {
    local w m bw="" bm=""
    for w in "${WORKLOADS[@]}"; do
        [[ "$w" =~ $1 ]] || continue
        m="$(median "$w" "$2")"
        if [[ -z "$bm" ]] || ge "$m" "$bm"; then bw="$w"; bm="$m"; fi
    done
    echo "$bw"
}
label_of() {
    case "$1" in
        ceil_c*) local x="${1#ceil_c}"; echo "ceiling: ${x%%_l*} client(s), LIMIT ${x#*_l}" ;;
        vq_e*) local x="${1#vq_e}"; echo "vq: ${x%%_b*} executor(s), batch ${x#*_b}" ;;
    esac
}

if has_part drain; then
    log ""
    log "== 1. drain: $N due no-op jobs per run, $ROUNDS round(s), workloads interleaved"
    q "SELECT vq_alter_queue('default', max_concurrent_jobs => $MAX_CONCURRENT)" >/dev/null

    # Sanity: the ceiling's rows equal vq_enqueue_many's in every column but the per-row
    # random/time ones (loaded due in an hour, then removed).
    truncate_all
    q "SELECT vq_enqueue_many('noop', array_fill('{\"n\": 1}'::jsonb, ARRAY[3]), now() + interval '1 hour')" >/dev/null
    load_plain 3
    NORM="to_jsonb(t) - 'execution_id' - 'job_id' - 'scheduled_at' - 'created_at' - 'updated_at'
          || jsonb_build_object('job_id_ok', t.job_id = 'delayed-' || t.execution_id::text,
                                'width', pg_column_size(t.*))"
    [[ "$(q "SELECT (SELECT array_agg(DISTINCT $NORM) FROM vq.job t)
                    = (SELECT array_agg(DISTINCT $NORM) FROM bench.plain_job t)")" == t ]] ||
        die "the ceiling's rows differ from vq_enqueue_many's: $(q "SELECT $NORM FROM vq.job t LIMIT 1") vs $(q "SELECT $NORM FROM bench.plain_job t LIMIT 1")"
    truncate_all

    WORKLOADS=()
    for claim in "${CEILING_CLAIMS[@]}"; do WORKLOADS+=("ceil_c1_l$claim"); done
    for e in "${EXECUTORS[@]}"; do for b in "${BATCHES[@]}"; do WORKLOADS+=("vq_e${e}_b${b}"); done; done
    for claim in "${CEILING_CLAIMS[@]}"; do WORKLOADS+=("ceil_c2_l$claim"); done
    : >"$WORK/results"
    for ((round = 1; round <= ROUNDS; round++)); do
        order=("${WORKLOADS[@]}")
        if ((round % 2 == 0)); then
            order=()
            for ((i = ${#WORKLOADS[@]} - 1; i >= 0; i--)); do order+=("${WORKLOADS[i]}"); done
        fi
        for w in "${order[@]}"; do
            case "$w" in
                ceil_c*) x="${w#ceil_c}"; run_ceiling "${x%%_l*}" "${x#*_l}" "$round" ;;
                vq_e*) x="${w#vq_e}"; run_vq "${x%%_b*}" "${x#*_b}" "$round" ;;
            esac
        done
    done

    # For the record: the claim uses the claim index on both sides (vq's is a kept SPI plan).
    log "  ceiling claim plan: $(q "EXPLAIN (COSTS OFF) SELECT execution_id FROM bench.plain_job
        WHERE queue = 'default' AND state = 'ENQUEUED' AND scheduled_at <= now()
        ORDER BY priority DESC, scheduled_at LIMIT 100 FOR UPDATE SKIP LOCKED" | tr -s ' \n' ' ')"

    log ""
    log "drain (medians of $ROUNDS round(s)); jobs/s = $N / (last finished_at - due time (vq) or first transaction start (ceiling));"
    log "wall = $N / (20 ms poll saw nothing left - due time (vq) or pgbench start (ceiling))"
    printf '  %-36s %9s %12s %10s %13s %8s\n' "workload" "jobs/s" "wall jobs/s" "WAL B/job" "1st batch ms" "visible"
    for w in "${WORKLOADS[@]}"; do
        printf '  %-36s %9s %12s %10s %13s %8s\n' "$(label_of "$w")" "$(median "$w" 3)" "$(median "$w" 4)" \
            "$(median "$w" 5)" "$(median "$w" 6)" "$(median "$w" 7)"
    done
    bv="$(best '^vq_' 3)"; bc="$(best "^ceil_c[0-9]+_l$CLAIM\$" 3)"; bca="$(best '^ceil_' 3)"
    r="$(ratio "$(median "$bv" 3)" "$(median "$bc" 3)")"
    rw="$(ratio "$(median "$(best '^vq_' 4)" 4)" "$(median "$(best "^ceil_c[0-9]+_l$CLAIM\$" 4)" 4)")"
    log "  best vq: $(label_of "$bv") $(median "$bv" 3) jobs/s; best ceiling (LIMIT $CLAIM): $(label_of "$bc")" \
        "$(median "$bc" 3) jobs/s; ratio $r (wall figures: $rw)"
    log "  per round, best vq run / best LIMIT $CLAIM ceiling run:" \
        "$(awk -v c="^ceil_c[0-9]+_l$CLAIM\$" '$1 ~ /^vq_/ && $3 > v[$2] { v[$2] = $3 } $1 ~ c && $3 > b[$2] { b[$2] = $3 }
            END { for (i = 1; i in v; i++) printf "%s%.2f", (i > 1 ? "  " : ""), v[i] / b[i] }' "$WORK/results")"
    summary "drain jobs/s: best vq ($(label_of "$bv"))" "$(median "$bv" 3)" "" ""
    summary "drain jobs/s: best ceiling ($(label_of "$bc"))" "$(median "$bc" 3)" "" ""
    if ge "$r" "$GOAL_RATIO"; then v=PASS; else v=MISS; fi
    summary "drain: vq best / ceiling best (LIMIT $CLAIM)" "$r" ">= $GOAL_RATIO" "$v"
    if [[ "$bca" != "$bc" ]]; then
        # Context: a ceiling that claims as many rows per transaction as vq's largest batch.
        ra="$(ratio "$(median "$bv" 3)" "$(median "$bca" 3)")"
        if ge "$ra" "$GOAL_RATIO"; then v=PASS; else v=MISS; fi
        summary "  context: vq best / ceiling best, any LIMIT ($(label_of "$bca"))" "$ra" ">= $GOAL_RATIO" "($v)"
    fi
    summary "drain: WAL bytes per job, vq best / ceiling best" "$(median "$bv" 5) / $(median "$bc" 5)" "" ""

    # Back to the product defaults for the other parts.
    reset_gucs
    cur_executors=""; cur_batch=""
    q "SELECT vq_alter_queue('default', max_concurrent_jobs => 5)" >/dev/null
    truncate_all
    q "CHECKPOINT" >/dev/null
fi

# ---------------------------------------------------------------------------
# Part 2: latency
# ---------------------------------------------------------------------------
# Executor pids that have run 'rec' inline at least 3 times (no CLAIMED transition).
warm_executors() {
    q "SELECT count(*) FROM (SELECT s.pid FROM bench.started s
         WHERE NOT EXISTS (SELECT 1 FROM vq.job_transition t WHERE t.execution_id = s.execution_id AND t.kind = 'CLAIMED')
           AND s.pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'vq_job executor')
         GROUP BY s.pid HAVING count(*) >= 3) x"
}
cat >"$WORK/latency.sql" <<'SQL'
SELECT bench.enqueue_stamped(':prev_eid', ':prev_post') AS eid \gset
SELECT ':eid' AS prev_eid, clock_timestamp() AS prev_post \gset
\sleep 10 ms
SQL
# run_latency JOBS [PGOPTIONS]: enqueue JOBS jobs through pgbench, wait until all started.
run_latency() {
    local out="$WORK/latency.log" rc=0
    q "TRUNCATE bench.lat, bench.started" >/dev/null
    PGOPTIONS="${2:-}" "$PGBENCH" -n -c 1 -t "$1" -f "$WORK/latency.sql" \
        -D prev_eid=00000000-0000-0000-0000-000000000000 -D "prev_post=2000-01-01 00:00:00+00" \
        "$DB" >"$out" 2>&1 || rc=$?
    ((rc == 0)) || { cat "$out" >&2; die "pgbench (latency) exited with status $rc"; }
    [[ "$(q "SELECT count(*) FROM bench.lat")" == "$1" ]] || die "latency: expected $1 enqueued jobs in bench.lat"
    wait_sql "SELECT count(*) = $1 FROM bench.started" 30 "all $1 latency jobs to start"
}
# latency_stats: p50 p90 p99 max (ms) of start - pre_commit | commit p50 | start - post_commit p50 | visible
latency_stats() {
    q "SELECT round(1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY d)::numeric, 3),
              round(1000 * percentile_cont(0.9) WITHIN GROUP (ORDER BY d)::numeric, 3),
              round(1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY d)::numeric, 3),
              round(1000 * max(d)::numeric, 3),
              round(1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY c)::numeric, 3),
              round(1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY a)::numeric, 3),
              count(*) FILTER (WHERE visible)
       FROM (SELECT extract(epoch FROM s.started - l.pre_commit) AS d,
                    extract(epoch FROM l.post_commit - l.pre_commit) AS c,
                    extract(epoch FROM s.started - l.post_commit) AS a,
                    EXISTS (SELECT 1 FROM vq.job_transition t
                            WHERE t.execution_id = l.execution_id AND t.kind = 'CLAIMED') AS visible
             FROM bench.lat l JOIN bench.started s USING (execution_id)) x"
}
wal_sync_stats() {  # wal_sync, wal_sync_time (ms) so far
    q "SELECT wal_sync, wal_sync_time FROM pg_stat_wal"
}

if has_part latency; then
    log ""
    nexec="$(q "SHOW vq.executors_per_database")"
    wait_executors "$nexec"
    log "== 2. latency: $NLAT jobs, one per transaction, 10 ms apart; $nexec idle executors," \
        "batch_size $(q "SHOW vq.batch_size"), sleep_delay_ms $(q "SELECT sleep_delay_ms FROM vq.queue WHERE name = 'default'")"
    # Warm up: every executor runs the handler a few times inline (its first run is a visible claim).
    for ((i = 0; i < 6; i++)); do
        run_latency 40
        [[ "$(warm_executors)" -ge "$nexec" ]] && break
    done
    log "  warm-up: $(warm_executors) of $nexec executors ran the handler inline >= 3 times"
    # Time the WAL flushes during the runs (cluster-wide average, context only).
    set_guc track_wal_io_timing on
    wait_sql "SELECT current_setting('track_wal_io_timing') = 'on'" 10 "track_wal_io_timing = on"
    sleep 0.2   # let the executors take the reload signal too
    declare -A LAT
    for mode in durable async; do
        opts=""
        [[ "$mode" == async ]] && opts="-c synchronous_commit=off"
        w0="$(wal_sync_stats)"
        run_latency "$NLAT" "$opts"
        w1="$(wal_sync_stats)"
        LAT[$mode]="$(latency_stats)"
        sync_ms="$(awk -F'|' -v a="$w0" -v b="$w1" 'BEGIN { split(a, x, "|"); split(b, y, "|");
                    if (y[1] > x[1]) printf "%.3f", (y[2] - x[2]) / (y[1] - x[1]); else print "-" }')"
        IFS='|' read -r p50 p90 p99 pmax commit after visible <<<"${LAT[$mode]}"
        log "  synchronous_commit=$([[ $mode == durable ]] && echo on || echo off) (enqueuing session):" \
            "start - pre-commit stamp p50 $p50 ms, p90 $p90, p99 $p99, max $pmax;" \
            "COMMIT round trip p50 $commit ms; start - post-commit stamp p50 $after ms;" \
            "mean WAL fsync $sync_ms ms; $visible visible claim(s)"
        if [[ "$mode" == durable ]]; then
            if le "$p50" "$GOAL_LAT_P50"; then v=PASS; else v=MISS; fi
            summary "latency p50 ms (stamp just before COMMIT -> handler start)" "$p50" "<= $GOAL_LAT_P50" "$v"
            summary "latency p90 ms" "$p90" "" ""
            if le "$p99" "$GOAL_LAT_P99"; then v=PASS; else v=MISS; fi
            summary "latency p99 ms" "$p99" "<= $GOAL_LAT_P99" "$v"
            summary "latency max ms" "$pmax" "" ""
            summary "  context: WAL fsync per commit, mean ms" "$sync_ms" "" ""
        else
            summary "  context: latency p50 / p99 ms, synchronous_commit=off" "$p50 / $p99" "" ""
        fi
    done
    reset_gucs
fi

# ---------------------------------------------------------------------------
# Part 3: scheduled accuracy
# ---------------------------------------------------------------------------
if has_part schedule; then
    log ""
    log "== 3. schedule: $NSCHED jobs due at now() + 2 s + i x 17 ms"
    q "TRUNCATE bench.started" >/dev/null
    q "SELECT count(vq_enqueue('rec', jsonb_build_object('i', i), now() + interval '2 s' + i * interval '17 ms'))
       FROM generate_series(0, $((NSCHED - 1))) i" >/dev/null
    wait_sql "SELECT count(*) = $NSCHED FROM bench.started" $((2 + NSCHED * 17 / 1000 + 20)) "all $NSCHED scheduled jobs to start"
    IFS='|' read -r smin s50 s99 smax visible <<<"$(q "
        SELECT round(1000 * min(d)::numeric, 3),
               round(1000 * percentile_cont(0.5) WITHIN GROUP (ORDER BY d)::numeric, 3),
               round(1000 * percentile_cont(0.99) WITHIN GROUP (ORDER BY d)::numeric, 3),
               round(1000 * max(d)::numeric, 3),
               count(*) FILTER (WHERE visible)
        FROM (SELECT extract(epoch FROM s.started - j.scheduled_at) AS d,
                     EXISTS (SELECT 1 FROM vq.job_transition t WHERE t.execution_id = j.execution_id AND t.kind = 'CLAIMED') AS visible
              FROM bench.started s JOIN vq.job j USING (execution_id)) x")"
    log "  start - scheduled_at: min $smin ms, p50 $s50, p99 $s99, max $smax; $visible visible claim(s)"
    if ge "$smin" 0; then v=PASS; else v=MISS; fi
    summary "schedule: min ms (start - scheduled_at)" "$smin" ">= 0" "$v"
    summary "schedule: p50 ms" "$s50" "" ""
    if le "$s99" "$GOAL_SCHED_P99"; then v=PASS; else v=MISS; fi
    summary "schedule: p99 ms" "$s99" "<= $GOAL_SCHED_P99" "$v"
    summary "schedule: max ms" "$smax" "" ""
fi

# ---------------------------------------------------------------------------
# Part 4: rescue after a crash
# ---------------------------------------------------------------------------
if has_part rescue; then
    : "${VQ_CLUSTER_DATA:?the rescue part needs VQ_CLUSTER_DATA (run it through ./scripts/bench)}"
    : "${VQ_CLUSTER_DIR:?the rescue part needs VQ_CLUSTER_DIR}"
    # shellcheck source=scripts/lib.sh
    . "$REPO_ROOT/scripts/lib.sh"
    log ""
    nexec="$(q "SHOW vq.executors_per_database")"
    wait_executors "$nexec"
    log "== 4. rescue: $nexec long job(s) RUNNING, then pg_ctl stop -m immediate and start"
    # The restart loads the vq_job.so installed now: if a newer build was installed since the
    # server started, it would run against this database's schema of the older build.
    so="$("$PG_BIN/pg_config" --pkglibdir)/vq_job.so"
    if [[ "$(q "SELECT $(stat -c %Y "$so") > extract(epoch FROM pg_postmaster_start_time())")" == t ]]; then
        echo "workers bench: ERROR: $so was installed after the server started ($(stat -c %y "$so")); a restart" \
             "would load a different build than the one this database was created with; rescue not measured." \
             "Re-run the bench on a stable build." >&2
        summary "rescue: s from accepting connections to an orphan's re-run" "not measured" "<= $GOAL_RESCUE" "ERROR"
        ERRORS=$((ERRORS + 1))
    else
        q "TRUNCATE bench.started" >/dev/null
        q "CHECKPOINT" >/dev/null     # keeps the crash recovery short (it is not measured)
        # One job per executor, each enqueued once the previous one runs, so that every executor
        # claims one (a claim takes the whole due backlog; a second job would wait for a poll).
        for ((i = 1; i <= nexec; i++)); do
            q "SELECT vq_enqueue('slow', '{}')" >/dev/null
            wait_sql "SELECT count(*) = $i FROM vq.job WHERE handler = 'slow' AND state = 'RUNNING'" 10 \
                "$i 'slow' job(s) RUNNING"
        done
        orphans="$(q "SELECT string_agg(quote_literal(execution_id::text), ',') FROM vq.job WHERE state = 'RUNNING'")"
        vq_pg_ctl -m immediate -w -t 60 stop >/dev/null || die "pg_ctl stop -m immediate failed"
        t_down="$(now_s)"
        vq_pg_ctl -l "$VQ_CLUSTER_DIR/server.log" -W start >/dev/null || die "pg_ctl start failed"
        deadline=$((SECONDS + 60))
        until "$PG_BIN/pg_isready" -q -t 1; do
            ((SECONDS < deadline)) || die "the server did not accept connections within 60 s after the crash"
            sleep 0.01
        done
        t_isready="$(now_s)"
        # The moment the server was ready: the postmaster starts the autovacuum launcher (and the
        # background workers) as it enters normal running, when it starts accepting connections;
        # the pg_isready loop sees it a few ms later (process start-up, 10 ms polling).
        t_av="$(q "SELECT extract(epoch FROM min(backend_start)) FROM pg_stat_activity WHERE backend_type = 'autovacuum launcher'")"
        t_up="$(awk -v a="$t_av" -v b="$t_isready" 'BEGIN { print (a != "" && a < b) ? a : b }')"
        if ! (wait_sql "SELECT count(*) > 0 FROM bench.started WHERE execution_id IN ($orphans) AND attempt = 1" 60 \
                  "an orphaned job to run again"); then
            q "SELECT execution_id, state, attempt_number, scheduled_at, worker_pid, last_error FROM vq.job
               WHERE execution_id IN ($orphans)" >&2 || true
            q "SELECT execution_id, kind, from_state, to_state, at, error FROM vq.job_transition
               WHERE execution_id IN ($orphans) ORDER BY id" >&2 || true
            q "SELECT pid, backend_type, application_name, backend_start, state, wait_event FROM pg_stat_activity
               WHERE backend_type LIKE 'vq_job%'" >&2 || true
            tail -n 30 "$VQ_CLUSTER_DIR/server.log" >&2 || true
            die "no orphaned job ran again within 60 s of the restart (above: the orphans, their transitions, the workers, the server log)"
        fi
        IFS='|' read -r rerun abandoned <<<"$(q "
            SELECT extract(epoch FROM (SELECT min(started) FROM bench.started WHERE execution_id IN ($orphans) AND attempt = 1)),
                   extract(epoch FROM (SELECT min(at) FROM vq.job_transition WHERE execution_id IN ($orphans) AND kind = 'ABANDONED'))")"
        rescue="$(awk -v a="$rerun" -v b="$t_up" 'BEGIN { printf "%.3f", a - b }')"
        log "  crash recovery: $(awk -v a="$t_up" -v b="$t_down" 'BEGIN { printf "%.3f", a - b }') s from the stop to" \
            "accepting connections (pg_isready saw it $(awk -v a="$t_isready" -v b="$t_up" 'BEGIN { printf "%.3f", a - b }') s later)"
        log "  from accepting connections: orphans ABANDONED after $(awk -v a="$abandoned" -v b="$t_up" 'BEGIN { printf "%.3f", a - b }') s," \
            "first orphan running again after $rescue s"
        if le "$rescue" "$GOAL_RESCUE"; then v=PASS; else v=MISS; fi
        summary "rescue: s from accepting connections to an orphan's re-run" "$rescue" "<= $GOAL_RESCUE" "$v"
        # Let the rescued jobs finish before the database is dropped.
        wait_sql "SELECT count(*) = 0 FROM vq.job WHERE state IN ('ENQUEUED', 'RUNNING')" 30 "the rescued jobs to finish"
    fi
fi

# ---------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------
log ""
log "workers benchmark (PostgreSQL $server_version; load average $(loadavg) after the runs)"
printf '%-74s %14s %8s %6s\n' "measure" "figure" "goal" ""
missed=0
while IFS='|' read -r label figure goal verdict; do
    printf '%-74s %14s %8s %6s\n' "$label" "$figure" "$goal" "$verdict"
    [[ "$verdict" == MISS ]] && missed=$((missed + 1))
done <"$WORK/summary"
((missed == 0)) || log "MISS: $missed goal(s) not met (a measurement, not a test: exit status stays 0)"
((ERRORS == 0)) || { echo "workers bench: $ERRORS measurement(s) failed (ERROR above)" >&2; exit 1; }
exit 0

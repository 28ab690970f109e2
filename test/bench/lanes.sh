#!/usr/bin/env bash
# test/bench/lanes.sh — do workers' takes and the executors' due-time look cost what the lanes
# holding jobs cost, or what handlers x queues cost? A lane is (queue, external handler).
#
# Workload, per configuration (N external handlers over Q queues), in a fresh database:
#   queues     lq1 .. lqQ (max_concurrent_jobs 100000: capacity never limits)
#   handlers   lh0001 .. lhN, registered with vq_register_notify_handler; only the first
#              LANES_ACTIVE (10) get jobs, handler i always in queue lq(1 + i % Q), priority 0 or
#              1: LANES_ACTIVE lanes hold jobs, N x Q lanes exist
#   producers  pgbench, 2 clients, -R LANES_RATE (50) transactions/s each, each transaction two
#              vq_enqueue_many of 5 jobs (autocommit: two transactions) for a random active
#              handler: 5 due now, 5 due 5 ms to 1 s later            -> 10 x LANES_RATE jobs/s
#   workers    pgbench, 2 clients, as fast as they can: a take of up to 50 jobs of all N handlers
#              (vq_take_jobs, its own transaction), then a reply completing what it got
#              (vq_reply_jobs); a take that got nothing sleeps 5 ms (a real worker would wait for
#              its "due" notification)
# LANES_WARMUP_SECS (5) of load, then LANES_SECS (30) measured.
#
# Per configuration and build:
#   jobs/s        jobs that ended in the window, per second (arrivals: 10 x LANES_RATE / s)
#   late p99      ms between scheduled_at and the take (started_at), p99 of the jobs taken in
#                 the window (the workers poll: a few ms is the polling; more is a take too slow)
#   backlog       due jobs not taken at the end of the window
#   take ms       mean execution time of the vq_take_jobs statement (pg_stat_statements)
#   takes/s       vq_take_jobs calls per second
#   spi/take      statements run inside vq_take_jobs per call: pg_stat_statements (track = all)
#                 counts the statements run inside a client's statement as not top-level;
#                 those of vq_enqueue_many and vq_reply_jobs are left out by their text
#   exec cpu      CPU time (utime + stime, /proc/<pid>/stat) of the database's processes named
#                 'vq_job executor', in ms per second of the window
#   exec stmts/s  statements the executors ran per second (their own are top-level)
#
# Builds compared side by side: LANES_BUILDS='label=/pg/bin label2=/other/pg/bin' (default:
# vq=$VQ_PG_BIN). Each build gets a throwaway cluster of its own (fsync on, pg_stat_statements
# preloaded with track = all), started here and removed at the end; the configurations run one
# after the other, each on every build in turn, so that the machine's load shows on all builds
# alike. Knobs: LANES_N ('10 150 600'), LANES_Q ('1 8'), LANES_SECS, LANES_WARMUP_SECS,
# LANES_RATE, LANES_ACTIVE, LANES_SETTINGS ('name = value; ...' more postgresql.conf lines),
# LANES_VERBOSE=1 (the statements pg_stat_statements counted most, per configuration).
#
# Not run by ./scripts/bench; on its own (each build installed in a PostgreSQL copy of its own):
#   LANES_BUILDS="old=/tmp/pg-old/usr/lib/postgresql/15/bin new=/usr/lib/postgresql/15/bin" \
#       test/bench/lanes.sh
# Exit status 0 when the measurements completed; figures are reported, never asserted.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
# shellcheck source=scripts/lib.sh
. "$REPO_ROOT/scripts/lib.sh"

NS="${LANES_N:-10 150 600}"
QS="${LANES_Q:-1 8}"
SECS="${LANES_SECS:-30}"
WARMUP="${LANES_WARMUP_SECS:-5}"
RATE="${LANES_RATE:-50}"
ACTIVE="${LANES_ACTIVE:-10}"
BUILDS="${LANES_BUILDS:-vq=$VQ_PG_BIN}"
DB=vq_bench_lanes

die() { echo "lanes bench: $*" >&2; exit 1; }
for v in SECS WARMUP RATE ACTIVE; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "LANES_$v must be a positive integer"
done
for n in $NS; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] && ((n >= ACTIVE && n <= 9999)) || die "LANES_N: $n is not between LANES_ACTIVE and 9999"
done
for qn in $QS; do [[ "$qn" =~ ^[1-9][0-9]*$ ]] || die "LANES_Q: $qn is not a positive integer"; done

TMPD="$(mktemp -d /tmp/vq_bench_lanes.XXXXXX)"
chmod 755 "$TMPD"
LABELS=() BINS=() HOSTS=() PORTS=() DIRS=() PIDS=()
cleanup() {
    set +e
    for p in "${PIDS[@]-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    for d in "${DIRS[@]-}"; do [[ -n "$d" ]] && VQ_PG_BIN="${BINS[0]}" vq_cluster_destroy "$d" >/dev/null 2>&1; done
    rm -rf "$TMPD"
}
trap cleanup EXIT

# b_psql I ARGS...: psql on build I's cluster
b_psql() {
    local i="$1"
    shift
    PGHOST="${HOSTS[$i]}" PGPORT="${PORTS[$i]}" PGUSER=postgres "${BINS[$i]}/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}
bq() { b_psql "$1" -d "$DB" -At -c "$2"; }
bqa() { b_psql "$1" -d postgres -At -c "$2"; }
b_pgbench() {
    local i="$1"
    shift
    PGHOST="${HOSTS[$i]}" PGPORT="${PORTS[$i]}" PGUSER=lanes_client "${BINS[$i]}/pgbench" "$@"
}

settings=("fsync = on" "synchronous_commit = on" "shared_buffers = 256MB"
          "shared_preload_libraries = 'vq_job,pg_stat_statements'"
          "pg_stat_statements.track = all" "pg_stat_statements.max = 10000")
if [[ -n "${LANES_SETTINGS:-}" ]]; then
    IFS=';' read -r -a more <<<"$LANES_SETTINGS"
    for line in "${more[@]}"; do [[ -n "${line// /}" ]] && settings+=("$line"); done
fi
k=0
for b in $BUILDS; do
    [[ "$b" == *=* ]] || die "LANES_BUILDS: '$b' is not label=bindir"
    LABELS+=("${b%%=*}")
    BINS+=("${b#*=}")
    [[ -x "${BINS[$k]}/pg_ctl" && -x "${BINS[$k]}/pgbench" ]] || die "no pg_ctl / pgbench in ${BINS[$k]}"
    [[ -f "$("${BINS[$k]}/pg_config" --pkglibdir)/vq_job.so" ]] || die "vq_job is not installed for ${BINS[$k]}"
    dir="$(mktemp -d /tmp/vq_job.lanes.XXXXXX)"
    DIRS+=("$dir")
    VQ_PG_BIN="${BINS[$k]}" vq_cluster_start "$dir" "$(vq_free_port)" "${settings[@]}" >"$TMPD/cluster$k.log" 2>&1 ||
        { cat "$TMPD/cluster$k.log" >&2; die "the cluster of build ${LABELS[$k]} did not start"; }
    HOSTS+=("$PGHOST")
    PORTS+=("$PGPORT")
    k=$((k + 1))
done

echo "lanes bench: $(bqa 0 "SELECT version()" | cut -d' ' -f1-2), $(nproc) CPUs, load average $(cut -d' ' -f1 /proc/loadavg)"
echo "  builds: ${LABELS[*]}; $((10 * RATE)) jobs/s (half due, half 5 ms - 1 s later) into $ACTIVE lanes;" \
     "2 workers taking 50 of all handlers; ${WARMUP} s warm-up, ${SECS} s measured"

# executor_cpu_ms I: CPU time so far (ms) of build I's executors of the bench database
executor_cpu_ms() {
    local pids pid sum=0 ticks t
    ticks="$(getconf CLK_TCK)"
    pids="$(bq "$1" "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
    for pid in $pids; do
        t="$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null)" || continue
        sum=$((sum + ${t:-0}))
    done
    echo $((sum * 1000 / ticks))
}

# setup I N Q: a fresh database on build I with Q queues and N external handlers; the scripts
setup() {
    local i="$1" n="$2" nq="$3"
    bqa "$i" "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
    bqa "$i" "CREATE DATABASE $DB" >/dev/null
    b_psql "$i" -d "$DB" >/dev/null <<SQL
CREATE EXTENSION vq_job;
CREATE EXTENSION pg_stat_statements;
DO \$\$ BEGIN CREATE ROLE lanes_client LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END \$\$;
SELECT vq_create_queue('lq' || q, max_concurrent_jobs => 100000) FROM generate_series(1, $nq) q;
SELECT vq_register_notify_handler('lh' || lpad(h::text, 4, '0'), 'lanes', queue => 'lq' || (1 + h % $nq))
  FROM generate_series(1, $n) h;
SQL
    cat >"$TMPD/produce.sql" <<SQL
\\set a random(0, $((ACTIVE - 1)))
\\set h 1 + :a * $n / $ACTIVE
\\set p random(0, 1)
\\set d random(5, 1000)
SELECT vq_enqueue_many('lh' || lpad(':h', 4, '0'), ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g),
                       queue => 'lq' || (1 + :h % $nq), priority => :p);
SELECT vq_enqueue_many('lh' || lpad(':h', 4, '0'), ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g),
                       run_at => clock_timestamp() + :d * interval '1 ms', queue => 'lq' || (1 + :h % $nq), priority => :p);
SQL
    # a worker: a take of each group of up to 64 handlers (vq_take_jobs' limit) in turn, the
    # replies for what they got; 5 ms of sleep when they got nothing
    local groups=$(((n + 63) / 64)) g
    {
        for ((g = 0; g < groups; g++)); do
            echo "SELECT coalesce(array_agg(execution_id)::text, '{}') AS ids$g, coalesce(array_agg(attempt)::text, '{}') AS attempts$g,"
            echo "       count(*) AS n$g FROM vq_take_jobs('$(bq "$i" "SELECT array_agg(name ORDER BY name) FROM (SELECT name FROM vq.handler
                        ORDER BY name OFFSET $((g * 64)) LIMIT 64) h")'::text[], 50) \\gset"
            echo "\\if :n$g > 0"
            echo "SELECT count(*) AS ignored FROM vq_reply_jobs(':ids$g'::uuid[], ':attempts$g'::integer[]) \\gset"
            echo "\\endif"
        done
        echo "\\set got :n0$(for ((g = 1; g < groups; g++)); do printf ' + :n%s' "$g"; done)"
        echo "\\if :got = 0"
        echo "\\sleep 5 ms"
        echo "\\endif"
    } >"$TMPD/work.sql"
    # both scripts once: a mistake fails now rather than after the run
    b_pgbench "$i" -n -t 1 -f "$TMPD/produce.sql" "$DB" >"$TMPD/produce-once.log" 2>&1 ||
        { cat "$TMPD/produce-once.log" >&2; die "the producers' script failed"; }
    b_pgbench "$i" -n -t 1 -f "$TMPD/work.sql" "$DB" >"$TMPD/work-once.log" 2>&1 ||
        { cat "$TMPD/work-once.log" >&2; die "the workers' script failed"; }
    [[ "$(bq "$i" "SELECT count(*) FROM vq.job WHERE state = 'COMPLETED'")" -ge 5 ]] ||
        die "the workers' script completed none of the 5 due jobs"
}

# The statements vq_enqueue_many and vq_reply_jobs run inside (not a take's).
NOT_TAKE="query NOT LIKE 'INSERT INTO vq.job_active%' AND query NOT LIKE '%DELETE FROM vq.job_active%'
          AND query NOT LIKE 'INSERT INTO vq.job_finished%' AND query NOT LIKE '%vq_enqueue_many%'
          AND query NOT LIKE '%vq_reply_jobs%' AND query NOT LIKE '%vq_take_jobs%'"

# measure I N Q: one configuration on build I; appends a row to results.tsv
measure() {
    local i="$1" n="$2" nq="$3" c0 c1 t0 t1 row
    setup "$i" "$n" "$nq"
    b_pgbench "$i" -n -c 2 -j 2 -R "$RATE" -T $((WARMUP + SECS + 1)) -f "$TMPD/produce.sql" "$DB" >"$TMPD/producers.log" 2>&1 &
    PIDS=($!)
    b_pgbench "$i" -n -c 2 -j 2 -T $((WARMUP + SECS + 1)) -f "$TMPD/work.sql" "$DB" >"$TMPD/workers.log" 2>&1 &
    PIDS+=($!)
    sleep "$WARMUP"
    bq "$i" "SELECT pg_stat_statements_reset()" >/dev/null
    c0="$(executor_cpu_ms "$i")"
    t0="$(date +%s.%N)"
    sleep "$SECS"
    c1="$(executor_cpu_ms "$i")"
    t1="$(date +%s.%N)"
    row="$(b_psql "$i" -d "$DB" -At -F $'\t' <<SQL
WITH w AS (SELECT to_timestamp($t0) AS t0, to_timestamp($t1) AS t1, $t1 - $t0 AS secs),
     s AS (SELECT * FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())),
     take AS (SELECT sum(calls) AS calls, sum(total_exec_time) / nullif(sum(calls), 0) AS ms
                FROM s WHERE toplevel AND query LIKE '%vq_take_jobs%')
SELECT round((SELECT count(*) FROM vq.job, w WHERE finished_at > w.t0 AND finished_at <= w.t1) / w.secs),
       (SELECT round((percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - scheduled_at)) * 1000)::numeric, 1)
          FROM vq.job WHERE started_at > w.t0 AND started_at <= w.t1),
       (SELECT count(*) FROM vq.job_active WHERE state = 'ENQUEUED' AND scheduled_at <= w.t1),
       round(take.ms::numeric, 2), round(take.calls / w.secs),
       round((SELECT sum(calls) FROM s WHERE NOT toplevel AND $NOT_TAKE) / nullif(take.calls, 0), 1),
       round(($c1 - $c0) / w.secs),
       round((SELECT sum(calls) FROM s WHERE toplevel AND userid = (SELECT oid FROM pg_roles WHERE rolname = 'postgres')
                AND query NOT LIKE '%pg_stat%') / w.secs)
  FROM w, take
SQL
)"
    if [[ "${LANES_VERBOSE:-}" == 1 ]]; then
        bq "$i" "SELECT calls, toplevel, left(regexp_replace(query, '\s+', ' ', 'g'), 150) FROM pg_stat_statements
                 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY calls DESC LIMIT 25"
    fi
    wait "${PIDS[@]}" || { cat "$TMPD/producers.log" "$TMPD/workers.log" >&2; die "a pgbench failed"; }
    PIDS=()
    printf '%s\t%s\t%s\t%s\n' "$n" "$nq" "${LABELS[$i]}" "$row" >>"$TMPD/results.tsv"
    printf '  N=%-4s Q=%-2s %-6s %s\n' "$n" "$nq" "${LABELS[$i]}" "$(tr '\t' ' ' <<<"$row")"
}

: >"$TMPD/results.tsv"
for nq in $QS; do
    for n in $NS; do
        for ((i = 0; i < ${#LABELS[@]}; i++)); do
            measure "$i" "$n" "$nq"
        done
    done
done

echo
printf '%-5s %-3s %-8s %7s %9s %8s %8s %8s %9s %9s %11s\n' N Q build jobs/s late_p99 backlog take_ms takes/s spi/take \
    exec_cpu exec_stmt/s
awk -F'\t' '{ printf "%-5s %-3s %-8s %7s %9s %8s %8s %8s %9s %9s %11s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 }' \
    "$TMPD/results.tsv"
echo "  (arrivals $((10 * RATE)) jobs/s; late_p99 in ms; exec_cpu in ms per s; load average now $(cut -d' ' -f1 /proc/loadavg))"

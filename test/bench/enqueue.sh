#!/usr/bin/env bash
# test/bench/enqueue.sh — enqueue throughput of vq_job against plain INSERTs of
# an equal row into an equal table, in the same run on the same server.
#
# Run by ./scripts/bench (a fresh cluster with fsync = on, synchronous_commit =
# on, shared_buffers = 1GB and vq_job preloaded; PGHOST/PGPORT/PGUSER exported).
# It creates its own database, vq_bench_enqueue, and drops it at the end.
#
# Workloads (pgbench -n, default simple query protocol for all of them):
#   single   8 clients (-j 2), one row per transaction:
#              plain      INSERT into bench.plain_job of the row vq_enqueue writes
#              notify     the same INSERT + SELECT pg_notify('bench', 'x') (context)
#              vq         SELECT vq_enqueue('noop', '{"n": 1}')
#   batch    1 client, 1,000 rows per transaction:
#              plain_many INSERT ... SELECT of 1,000 such rows
#              vq_many    SELECT vq_enqueue_many('noop', array_fill('{"n": 1}'::jsonb, ARRAY[1000]))
#
# bench.plain_job is LIKE vq.job_active INCLUDING ALL (the partition of vq.job that enqueues
# write): the same columns, defaults,
# primary key and partial indexes (checked), and the INSERTs compute what the C enqueue
# computes (a random uuid as execution_id, 'delayed-' || it as job_id, now()
# for the three timestamps, current_user as enqueued_by, the default queue,
# priority 0, max_attempts 3, handler name and address, payload, '{}'). A
# sanity check before the runs proves the rows are equal column by column.
#
# Knobs: BENCH_ROUNDS (default 3), BENCH_SECONDS (default 10), BENCH_PREPARED=1
# (adds a context pair of single-row runs with -M prepared on both sides).
#
# Method: BENCH_ROUNDS rounds (default 3); each round runs every workload once
# for BENCH_SECONDS (default 10), in forward order in odd rounds and reverse
# order in even rounds (so slow drift does not favour one side). Before every
# run both tables are truncated and a CHECKPOINT is taken, so every run starts
# from empty tables and a fresh checkpoint. After every run the table's row
# count must equal transactions x rows per transaction as pgbench reports them.
# Autovacuum is disabled on both tables (equally) so that an autovacuum worker
# waking in one run but not the other does not add noise on a small machine.
# The default queue is paused so that background workers, if any, do not run
# the enqueued jobs during the runs (enqueue alone is measured; the commit-time
# wake-up of the workers is still paid, as it is part of vq_enqueue).
# The summary reports the median over rounds of each workload's rate. Each run
# also reports the CPU time vq_job's own background processes used during it.
#
# Exit status: 0 whenever the measurement completed, goals met or not (a missed
# goal prints MISS); non-zero only if something failed (pgbench error, failed
# transactions, a row-count or sanity check mismatch).
set -euo pipefail

ROUNDS="${BENCH_ROUNDS:-3}"
SECONDS_PER_RUN="${BENCH_SECONDS:-10}"
DB=vq_bench_enqueue
CLIENTS=8
THREADS=2
BATCH=1000
GOAL_SINGLE=0.80   # vq_enqueue rate / plain INSERT rate
GOAL_BATCH=0.70    # vq_enqueue_many rate / plain INSERT ... SELECT rate

[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_ROUNDS must be a positive integer" >&2; exit 2; }
[[ "$SECONDS_PER_RUN" =~ ^[1-9][0-9]*$ ]] || { echo "BENCH_SECONDS must be a positive integer" >&2; exit 2; }

PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
PGBENCH="$PG_BIN/pgbench"

WORK="$(mktemp -d /tmp/vq_bench_enqueue.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

die() { echo "enqueue bench: ERROR: $*" >&2; exit 1; }
# q SQL: run SQL in the bench database, print the bare result.
q() { "${PSQL[@]}" -d "$DB" -At -c "$1"; }

# ---------------------------------------------------------------------------
# Setup: database, extension, no-op handler, the baseline table.
# ---------------------------------------------------------------------------
PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
"$PG_BIN/createdb" "$DB"
"${PSQL[@]}" -d "$DB" -o /dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION vq_job;
CREATE SCHEMA bench;

-- Enqueue only needs the handler registered; it never runs here (see below).
CREATE FUNCTION bench.noop(payload jsonb) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
SELECT vq_register_handler('noop', 'bench.noop(jsonb)');

-- Only the enqueue is measured: the background workers must not claim and run
-- the jobs while a run is going on, so the queue the jobs go to is paused.
SELECT vq_pause_queue('default');

-- The baseline: the same columns, defaults, NOT NULL and CHECK constraints,
-- primary key and indexes as vq.job_active, the partition enqueues write (INCLUDING ALL
-- copies every index of vq.job_active, including the partial claim index (queue, priority
-- DESC, scheduled_at) WHERE state = 'ENQUEUED' and the unique index (job_id) of unfinished
-- jobs, so the baseline follows the schema as it evolves).
CREATE TABLE bench.plain_job (LIKE vq.job_active INCLUDING ALL);

-- Same storage behaviour for both tables (see the header).
ALTER TABLE vq.job_active SET (autovacuum_enabled = false);
ALTER TABLE bench.plain_job SET (autovacuum_enabled = false);
SQL

# Both tables must carry the same indexes (definitions modulo names).
idx_sig() {
    q "SELECT string_agg(regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', ''), ' | '
                         ORDER BY regexp_replace(pg_get_indexdef(indexrelid), '^.* USING ', ''))
       FROM pg_index WHERE indrelid = '$1'::regclass"
}
[[ "$(idx_sig vq.job_active)" == "$(idx_sig bench.plain_job)" ]] ||
    die "index sets differ: vq.job_active [$(idx_sig vq.job_active)] vs bench.plain_job [$(idx_sig bench.plain_job)]"
[[ "$(q "SELECT count(*) FROM pg_index WHERE indrelid = 'vq.job_active'::regclass")" -ge 3 ]] ||
    die "vq.job_active has fewer indexes than the primary key and the two partial indexes"
# LIKE copies no triggers or foreign keys: if vq.job has any, vq_enqueue pays for
# them and the plain INSERT does not. That is a real cost of the product; say so.
extras="$(q "SELECT string_agg(what, ', ') FROM (
               SELECT 'trigger ' || tgname AS what FROM pg_trigger
                WHERE tgrelid = 'vq.job_active'::regclass AND NOT tgisinternal
               UNION ALL
               SELECT 'foreign key ' || conname FROM pg_constraint
                WHERE conrelid = 'vq.job_active'::regclass AND contype = 'f') x")"
[[ -z "$extras" ]] || echo "note: vq.job has $extras, which the baseline table does not (counted as vq_enqueue's cost)"

# The handler address vq_enqueue persists, so the plain INSERT writes the same string.
ADDRESS_LIT="$(q "SELECT quote_literal(address) FROM vq.handler WHERE name = 'noop'")"
[[ -n "$ADDRESS_LIT" ]] || die "handler 'noop' is not registered"

# ---------------------------------------------------------------------------
# pgbench scripts, one per workload.
# ---------------------------------------------------------------------------
COLUMNS="(execution_id, state, priority, attempt_number, max_attempts, scheduled_at,
 created_at, updated_at, enqueued_by, queue, job_id, handler, handler_address, handler_function, payload, metadata)"
# The row vq_enqueue writes, with e = the execution_id and p = the payload.
ROW="e, 'ENQUEUED', 0, 0, 3, now(), now(), now(), current_user::regrole, 'default',
 'delayed-' || e::text, 'noop', $ADDRESS_LIT, $ADDRESS_LIT::regprocedure, p, '{}'::jsonb"

cat >"$WORK/plain.sql" <<SQL
INSERT INTO bench.plain_job $COLUMNS
SELECT $ROW
FROM (SELECT gen_random_uuid(), '{"n": 1}'::jsonb) AS u(e, p);
SQL
cat >"$WORK/notify.sql" <<SQL
BEGIN;
INSERT INTO bench.plain_job $COLUMNS
SELECT $ROW
FROM (SELECT gen_random_uuid(), '{"n": 1}'::jsonb) AS u(e, p);
SELECT pg_notify('bench', 'x');
COMMIT;
SQL
cat >"$WORK/vq.sql" <<'SQL'
SELECT vq_enqueue('noop', '{"n": 1}');
SQL
# The subquery's volatile gen_random_uuid() keeps it from being flattened: one uuid per row.
cat >"$WORK/plain_many.sql" <<SQL
INSERT INTO bench.plain_job $COLUMNS
SELECT $ROW
FROM (SELECT gen_random_uuid(), a.p FROM unnest(array_fill('{"n": 1}'::jsonb, ARRAY[$BATCH])) AS a(p)) AS u(e, p);
SQL
cat >"$WORK/vq_many.sql" <<SQL
SELECT vq_enqueue_many('noop', array_fill('{"n": 1}'::jsonb, ARRAY[$BATCH]));
SQL

# Workload table: name -> label, pgbench script, table written, clients,
# threads, rows per transaction, query protocol.
WORKLOADS=(plain notify vq plain_many vq_many)
declare -A LABEL=(
    [plain]="plain INSERT, $CLIENTS clients"
    [notify]="INSERT + pg_notify, $CLIENTS clients"
    [vq]="vq_enqueue, $CLIENTS clients"
    [plain_many]="plain INSERT ... SELECT $BATCH, 1 client"
    [vq_many]="vq_enqueue_many $BATCH, 1 client"
)
declare -A SCRIPT=([plain]=plain [notify]=notify [vq]=vq [plain_many]=plain_many [vq_many]=vq_many)
declare -A TABLE=([plain]=bench.plain_job [notify]=bench.plain_job [vq]=vq.job
                  [plain_many]=bench.plain_job [vq_many]=vq.job)
declare -A NCLIENTS=([plain]=$CLIENTS [notify]=$CLIENTS [vq]=$CLIENTS [plain_many]=1 [vq_many]=1)
declare -A NTHREADS=([plain]=$THREADS [notify]=$THREADS [vq]=$THREADS [plain_many]=1 [vq_many]=1)
declare -A ROWS_PER_TX=([plain]=1 [notify]=1 [vq]=1 [plain_many]=$BATCH [vq_many]=$BATCH)
declare -A PROTOCOL=([plain]=simple [notify]=simple [vq]=simple [plain_many]=simple [vq_many]=simple)
# Baseline of each workload (for the "vs baseline" column) and its goal, if any.
declare -A BASELINE=([plain]=plain [notify]=plain [vq]=plain [plain_many]=plain_many [vq_many]=plain_many)
declare -A GOAL=([vq]=$GOAL_SINGLE [vq_many]=$GOAL_BATCH)

# BENCH_PREPARED=1 adds, for context, the single-row pair with -M prepared on
# BOTH sides: it takes the parse/plan cost of the plain INSERT (which the
# simple protocol pays on every transaction, while vq_enqueue runs a kept SPI
# plan) out of the comparison. No goal applies to these rows.
if [[ "${BENCH_PREPARED:-}" == 1 ]]; then
    WORKLOADS=(plain notify vq plain_prep vq_prep plain_many vq_many)
    LABEL[plain_prep]="plain INSERT, $CLIENTS clients, -M prepared"
    LABEL[vq_prep]="vq_enqueue, $CLIENTS clients, -M prepared"
    SCRIPT[plain_prep]=plain; SCRIPT[vq_prep]=vq
    TABLE[plain_prep]=bench.plain_job; TABLE[vq_prep]=vq.job
    NCLIENTS[plain_prep]=$CLIENTS; NCLIENTS[vq_prep]=$CLIENTS
    NTHREADS[plain_prep]=$THREADS; NTHREADS[vq_prep]=$THREADS
    ROWS_PER_TX[plain_prep]=1; ROWS_PER_TX[vq_prep]=1
    PROTOCOL[plain_prep]=prepared; PROTOCOL[vq_prep]=prepared
    BASELINE[plain_prep]=plain_prep; BASELINE[vq_prep]=plain_prep
fi

truncate_all() { q "TRUNCATE vq.job, bench.plain_job" >/dev/null; }

# ---------------------------------------------------------------------------
# Sanity check: one transaction of each workload through psql, then the rows of
# both tables must be equal in every column but the per-row random/time ones.
# ---------------------------------------------------------------------------
truncate_all
for w in plain vq plain_many vq_many; do    # notify runs the same INSERT as plain
    "${PSQL[@]}" -d "$DB" -o /dev/null -f "$WORK/$w.sql" || die "sanity run of $w failed"
done
# Normalised row: the fixed columns, plus checks of the computed ones.
NORM="to_jsonb(t) - 'execution_id' - 'job_id' - 'scheduled_at' - 'created_at' - 'updated_at'
      || jsonb_build_object('job_id_ok', t.job_id = 'delayed-' || t.execution_id::text,
                            'times_ok', t.scheduled_at >= t.created_at AND t.created_at = t.updated_at,
                            'width', pg_column_size(t.*))"
sanity="$(q "SELECT (SELECT count(*) FROM vq.job) = $((BATCH + 1))
             AND (SELECT count(*) FROM bench.plain_job) = $((BATCH + 1))
             AND (SELECT count(DISTINCT execution_id) FROM vq.job) = $((BATCH + 1))
             AND (SELECT count(DISTINCT execution_id) FROM bench.plain_job) = $((BATCH + 1))
             AND (SELECT array_agg(DISTINCT $NORM) FROM vq.job t)
                 = (SELECT array_agg(DISTINCT $NORM) FROM bench.plain_job t)
             AND (SELECT count(DISTINCT $NORM) FROM vq.job t) = 1")"
if [[ "$sanity" != t ]]; then
    q "SELECT 'vq.job', $NORM, count(*) FROM vq.job t GROUP BY 2
       UNION ALL SELECT 'plain_job', $NORM, count(*) FROM bench.plain_job t GROUP BY 2" >&2
    die "sanity check failed: vq_enqueue rows and plain INSERT rows differ (above)"
fi

# ---------------------------------------------------------------------------
# Diagnostic: CPU time used by vq_job's background processes (launcher,
# executors) during a run. With the queue paused they should be idle; if they
# are not, they compete with the clients for the CPUs and the run says so.
# The server runs on this machine (unix socket), so /proc has their counters.
# ---------------------------------------------------------------------------
CLK_TCK="$(getconf CLK_TCK 2>/dev/null || echo 100)"
vq_bg_pids() { q "SELECT pid FROM pg_stat_activity WHERE backend_type LIKE 'vq\_job%'"; }
# vq_bg_ticks PID...: the summed user + system clock ticks of those processes still alive.
vq_bg_ticks() {
    local pid total=0 t
    for pid in "$@"; do
        t="$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null)" || continue
        [[ -n "$t" ]] && total=$((total + t))
    done
    echo "$total"
}

# ---------------------------------------------------------------------------
# One measured run: run_one WORKLOAD ROUND -> appends to $WORK/results
#   workload round rows_per_s tps transactions wal_bytes_per_row bg_cpu_seconds
# ---------------------------------------------------------------------------
run_one() {
    local w="$1" round="$2" out="$WORK/pgbench.$1.$2.log" rc=0
    local lsn0 tps ntx nfailed count expected wal rate ran bg_pids bg0 bg
    truncate_all
    q "CHECKPOINT" >/dev/null
    mapfile -t bg_pids < <(vq_bg_pids)
    bg0="$(vq_bg_ticks "${bg_pids[@]}")"
    lsn0="$(q "SELECT pg_current_wal_lsn()")"
    "$PGBENCH" -n -M "${PROTOCOL[$w]}" -c "${NCLIENTS[$w]}" -j "${NTHREADS[$w]}" \
        -T "$SECONDS_PER_RUN" -f "$WORK/${SCRIPT[$w]}.sql" "$DB" >"$out" 2>&1 || rc=$?
    wal="$(q "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')")"
    bg="$(awk -v a="$bg0" -v b="$(vq_bg_ticks "${bg_pids[@]}")" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", (b - a) / hz }')"
    if ((rc != 0)); then
        cat "$out" >&2
        die "pgbench $w (round $round) exited with status $rc"
    fi
    tps="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$out")"
    ntx="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*$/\1/p' "$out")"
    nfailed="$(sed -n 's/^number of failed transactions: \([0-9]*\).*$/\1/p' "$out")"
    if [[ -z "$tps" || -z "$ntx" ]]; then
        cat "$out" >&2
        die "could not parse pgbench output for $w (round $round)"
    fi
    if [[ -n "$nfailed" && "$nfailed" != 0 ]]; then
        cat "$out" >&2
        die "pgbench $w (round $round): $nfailed failed transactions"
    fi
    ((ntx > 0)) || die "pgbench $w (round $round) processed no transaction"
    # Prove the work was done: every reported transaction left its rows.
    count="$(q "SELECT count(*) FROM ${TABLE[$w]}")"
    expected=$((ntx * ${ROWS_PER_TX[$w]}))
    [[ "$count" == "$expected" ]] ||
        die "$w (round $round): ${TABLE[$w]} has $count rows, pgbench reported $ntx transactions x ${ROWS_PER_TX[$w]} = $expected"
    # The queue is paused: a job that left ENQUEUED means workers ran during the run.
    ran="$(q "SELECT count(*) FROM ${TABLE[$w]} WHERE state <> 'ENQUEUED'")"
    [[ "$ran" == 0 ]] ||
        echo "  WARNING: $ran of $count rows of $w (round $round) left ENQUEUED: workers ran jobs during the run, which skews it" >&2
    rate="$(awk -v t="$tps" -v r="${ROWS_PER_TX[$w]}" 'BEGIN { printf "%.0f", t * r }')"
    wal="$(awk -v b="$wal" -v n="$count" 'BEGIN { printf "%.0f", b / n }')"
    echo "$w $round $rate $tps $ntx $wal $bg" >>"$WORK/results"
    printf '  round %d  %-40s %9s rows/s  %9.1f tps  %8s tx  %4s WAL bytes/row  %5s s vq_job bg CPU\n' \
        "$round" "${LABEL[$w]}" "$rate" "$tps" "$ntx" "$wal" "$bg"
}

# median WORKLOAD COLUMN: median over rounds of a column of $WORK/results.
median() {
    awk -v w="$1" -v c="$2" '$1 == w { print $c }' "$WORK/results" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) exit 1;
              if (NR % 2) printf "%.0f", v[(NR + 1) / 2]; else printf "%.0f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# ---------------------------------------------------------------------------
# The rounds.
# ---------------------------------------------------------------------------
server_version="$(q "SHOW server_version")"
server_version="${server_version%% *}"     # "15.20 (Debian ...)" -> "15.20"
fsync="$(q "SHOW fsync")"
sync_commit="$(q "SHOW synchronous_commit")"
shared_buffers="$(q "SHOW shared_buffers")"
# The 1-minute load average, to tell a busy machine (other work sharing the CPUs) from a slow product.
loadavg() { cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?"; }
echo "enqueue bench: $ROUNDS rounds x $SECONDS_PER_RUN s per workload; PostgreSQL $server_version," \
     "fsync=$fsync, synchronous_commit=$sync_commit, shared_buffers=$shared_buffers, $(nproc) CPUs," \
     "load average $(loadavg) before the runs"
echo "raw figures (each run starts from empty tables after a CHECKPOINT):"
: >"$WORK/results"
for ((round = 1; round <= ROUNDS; round++)); do
    order=("${WORKLOADS[@]}")
    if ((round % 2 == 0)); then
        order=()
        for ((i = ${#WORKLOADS[@]} - 1; i >= 0; i--)); do order+=("${WORKLOADS[i]}"); done
    fi
    for w in "${order[@]}"; do
        run_one "$w" "$round"
    done
done

# ---------------------------------------------------------------------------
# Summary: medians, ratios to the baseline, goals.
# ---------------------------------------------------------------------------
declare -A MED
for w in "${WORKLOADS[@]}"; do MED[$w]="$(median "$w" 3)"; done

echo
echo "enqueue benchmark (PostgreSQL $server_version, fsync=$fsync, synchronous_commit=$sync_commit," \
     "$ROUNDS rounds x $SECONDS_PER_RUN s, medians)"
printf '%-40s %14s  %11s  %s\n' "workload" "rate (rows/s)" "vs baseline" "goal"
missed=0
for w in "${WORKLOADS[@]}"; do
    ratio="$(awk -v a="${MED[$w]}" -v b="${MED[${BASELINE[$w]}]}" 'BEGIN { printf "%.2f", a / b }')"
    goal=""
    if [[ -n "${GOAL[$w]:-}" ]]; then
        if awk -v r="$ratio" -v g="${GOAL[$w]}" 'BEGIN { exit !(r >= g) }'; then
            goal=">= ${GOAL[$w]}  PASS"
        else
            goal=">= ${GOAL[$w]}  MISS"
            missed=$((missed + 1))
        fi
    fi
    printf '%-40s %14s  %11s  %s\n' "${LABEL[$w]}" "${MED[$w]}" "$ratio" "$goal"
done
echo
# Paired ratios: each round's run against the same round's baseline run (they
# ran minutes apart at most), to show how much of the spread is the machine's.
echo "per-round ratios to the baseline (round 1..$ROUNDS):"
for w in "${WORKLOADS[@]}"; do
    [[ "${BASELINE[$w]}" == "$w" ]] && continue
    printf '  %-40s %s\n' "${LABEL[$w]}" "$(awk -v w="$w" -v b="${BASELINE[$w]}" '
        $1 == w { r[$2] = $3 } $1 == b { base[$2] = $3 }
        END { for (i = 1; i in r; i++) printf "%s%.2f", (i > 1 ? "  " : ""), r[i] / base[i] }' "$WORK/results")"
done
echo "WAL bytes per row (median): vq_enqueue $(median vq 6) vs plain INSERT $(median plain 6);" \
     "vq_enqueue_many $(median vq_many 6) vs plain INSERT ... SELECT $(median plain_many 6)"
# More than 10% of one CPU used by vq_job's own background processes during a
# run (the queue is paused) is not enqueue cost; it skews every run alike.
busy="$(awk -v lim="$(awk -v s="$SECONDS_PER_RUN" 'BEGIN { print s * 0.1 }')" \
        '$7 > lim { n++; if ($7 > m) m = $7 } END { if (n) printf "%d run(s), up to %.1f s", n, m }' "$WORK/results")"
if [[ -n "$busy" ]]; then
    echo "WARNING: vq_job's background processes used CPU during $busy of $SECONDS_PER_RUN s" \
         "although the queue is paused; they competed with the clients, so the rates are lower than the machine allows"
fi
echo "load average $(loadavg) after the runs (the runs themselves load the machine; a much higher figure means other work competed)"
if ((missed > 0)); then
    echo "MISS: $missed goal(s) not met (a measurement, not a test: exit status stays 0)"
fi

PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
exit 0

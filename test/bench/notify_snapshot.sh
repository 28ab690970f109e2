#!/usr/bin/env bash
# test/bench/notify_snapshot.sh — the other searches for work under a held snapshot: NOTIFY jobs
# (the workers' takes from their claim positions, the in-flight count of every claim and take,
# the executors' look for expired leases) and the outbox relay, with steady arrivals before,
# during and after a long-held snapshot.
#
# Workload. A queue bn_q (max_concurrent_jobs 500) with a NOTIFY handler bn_notify, and a
# PL/pgSQL no-op handler bn_noop on the 'default' queue.
#   producers  pgbench, 2 clients, -R 50 transactions/s, each:
#                SELECT vq_enqueue_many('bn_notify', <10 payloads>);   -> 500 NOTIFY jobs/s
#                SELECT vq_outbox_publish('bn_noop', <payload>) x 5;   -> 250 outbox rows/s
#   consumers  pgbench, 2 clients, no rate limit (they poll as fast as they can), each a worker:
#                a take of up to 50 (vq_take_jobs, its own transaction), then one reply for the
#                jobs it got (vq_reply_jobs, complete; another transaction)
# Phases (NOTIFY_BEFORE_SECS / NOTIFY_HELD_SECS / NOTIFY_AFTER_SECS, default 60 / 300 / 60;
# NOTIFY_QUICK=1: 30 / 60 / 30): load only; load with a REPEATABLE READ snapshot held by a
# session idle in transaction (vacuum can remove nothing); load after its COMMIT.
#
# Per 10-s window (computed after the run from vq.job and vq.outbox; nothing is deleted):
#   ended / p50 / p99   NOTIFY jobs that ended, and their latency created_at -> finished_at
#                       (enqueue -> taken -> replied) in ms
#   waiting             NOTIFY jobs enqueued so far and not ended at the window's end
#   relayed / p50 / p99 outbox rows relayed, and their latency created_at -> published_at (ms)
#   exec cpu            CPU time of the database's executor processes (utime + stime from
#                       /proc), in ms per second of the window: what their searches cost
#   take/s / take ms    the consumers' take-and-reply rounds per second and their mean latency
#                       (pgbench -P 10)
#   job MB              pg_total_relation_size of vq.job_active
# Summary: per phase the worst window p99 and the executor CPU median, and the ratio of the
# held phase's last minute to the phase before (a search that walks the dead entries of the
# snapshot's jobs grows with the time held; one that does not stays flat).
#
# Run by ./scripts/bench (fresh cluster, fsync on). Exit status 0 when the measurements
# completed; figures are reported, never asserted.
set -euo pipefail

INTERVAL=10
if [[ "${NOTIFY_QUICK:-}" == 1 ]]; then
    d_before=30 d_held=60 d_after=30
else
    d_before=60 d_held=300 d_after=60
fi
BEFORE="${NOTIFY_BEFORE_SECS:-$d_before}"
HELD="${NOTIFY_HELD_SECS:-$d_held}"
AFTER="${NOTIFY_AFTER_SECS:-$d_after}"
for v in BEFORE HELD AFTER; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ && $((${!v} % INTERVAL)) == 0 ]] ||
        { echo "notify bench: NOTIFY_${v}_SECS must be a positive multiple of $INTERVAL" >&2; exit 2; }
done
TOTAL=$((BEFORE + HELD + AFTER))

PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
PGBENCH="$PG_BIN/pgbench"
DB=vq_bench_notify
PARTS=""
CHANGED_SETTINGS=()
# shellcheck source=test/bench/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

TMPD="$(mktemp -d /tmp/vq_bench_notify.XXXXXX)"
chmod 755 "$TMPD"
PIDS=()
cleanup() {
    set +e
    [[ -n "${HOLDER_FD:-}" ]] && exec {HOLDER_FD}>&-
    for p in "${PIDS[@]-}"; do [[ -n "$p" ]] && kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    qa "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null 2>&1
    rm -rf "$TMPD"
}
trap cleanup EXIT

log "notify bench: $(qa "SELECT version()" | cut -d' ' -f1-2), fsync=$(qa "SHOW fsync"), $(nproc) CPUs, load average $(loadavg)"
log "  500 NOTIFY jobs/s (vq_take_jobs + vq_reply_jobs by 2 polling workers) and 250 outbox rows/s;" \
    "phases: $BEFORE s before, $HELD s with a held snapshot, $AFTER s after"
qa "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
qa "CREATE DATABASE $DB" >/dev/null
q "CREATE EXTENSION vq_job" >/dev/null
"${PSQL[@]}" -d "$DB" >/dev/null <<'SQL'
SELECT vq_create_queue('bn_q', max_concurrent_jobs => 500);
SELECT vq_register_notify_handler('bn_notify', 'bn_channel', queue => 'bn_q');
CREATE FUNCTION bn_noop(p jsonb) RETURNS void LANGUAGE plpgsql AS $$ BEGIN END $$;
SELECT vq_register_handler('bn_noop', 'bn_noop(jsonb)');
SQL
cat >"$TMPD/produce.sql" <<'SQL'
SELECT vq_enqueue_many('bn_notify', ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 10) g));
SELECT count(vq_outbox_publish('bn_noop', jsonb_build_object('n', g))) FROM generate_series(1, 5) g;
SQL
# (pgbench puts the arrays' text into the reply's literals)
cat >"$TMPD/consume.sql" <<'SQL'
SELECT coalesce(array_agg(execution_id)::text, '{}') AS ids, coalesce(array_agg(attempt)::text, '{}') AS attempts
  FROM vq_take_jobs('{bn_notify}', 50) \gset
SELECT count(*) AS ignored FROM vq_reply_jobs(':ids'::uuid[], ':attempts'::integer[]) \gset
SQL
# both scripts once, so that a mistake fails now rather than after the run (a pgbench transaction
# of the consumer's, which takes what the producer's just enqueued, and must have all its replies
# applied)
"${PSQL[@]}" -d "$DB" -f "$TMPD/produce.sql" >/dev/null
"$PGBENCH" -n -t 1 -f "$TMPD/consume.sql" "$DB" >"$TMPD/consume-once.log" 2>&1 ||
    { echo "notify bench: the consumers' script failed" >&2; cat "$TMPD/consume-once.log" >&2; exit 1; }
[[ "$(q "SELECT count(*) FROM vq.job WHERE handler = 'bn_notify' AND state = 'COMPLETED'")" == 10 ]] ||
    { echo "notify bench: the consumers' script did not complete the 10 jobs it took" >&2; exit 1; }

# executor_cpu_ms: CPU time so far (ms) of this database's executors
executor_cpu_ms() {
    local pids pid sum=0 ticks t
    ticks="$(getconf CLK_TCK)"
    pids="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
    for pid in $pids; do
        # (an executor may exit meanwhile: one started on demand stops after idling 10 s)
        t="$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null)" || continue
        sum=$((sum + ${t:-0}))
    done
    echo $((sum * 1000 / ticks))
}

start="$(date +%s.%N)"
"$PGBENCH" -n -c 2 -j 2 -R 50 -T "$TOTAL" -f "$TMPD/produce.sql" "$DB" >"$TMPD/producers.log" 2>&1 &
PIDS+=($!)
"$PGBENCH" -n -c 2 -j 2 -T "$TOTAL" -P "$INTERVAL" -f "$TMPD/consume.sql" "$DB" >"$TMPD/consumers.log" 2>&1 &
PIDS+=($!)
: >"$TMPD/samples.tsv"
for ((k = 1; k * INTERVAL <= TOTAL; k++)); do
    if (((k - 1) * INTERVAL == BEFORE)); then
        mkfifo "$TMPD/holder.in"
        "${PSQL[@]}" -d "$DB" -At <"$TMPD/holder.in" >"$TMPD/holder.out" 2>&1 &
        PIDS+=($!)
        exec {HOLDER_FD}>"$TMPD/holder.in"
        printf "BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT count(*) FROM vq.job;\n" >&"$HOLDER_FD"
    fi
    if (((k - 1) * INTERVAL == BEFORE + HELD)); then
        printf "COMMIT;\n" >&"$HOLDER_FD"
        exec {HOLDER_FD}>&-
        HOLDER_FD=""
    fi
    kill -0 "${PIDS[0]}" 2>/dev/null && kill -0 "${PIDS[1]}" 2>/dev/null ||
        { echo "notify bench: a pgbench ended early" >&2; cat "$TMPD"/*.log >&2; exit 1; }
    target="$(awk -v s="$start" -v t=$((k * INTERVAL)) 'BEGIN { printf "%.3f", s + t }')"
    sleep "$(awk -v t="$target" -v n="$(date +%s.%N)" 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }')"
    printf '%s\t%s\t%s\t%s\n' "$k" "$(date +%s.%N)" "$(executor_cpu_ms)" \
        "$(q "SELECT round(pg_total_relation_size('vq.job_active') / 1048576.0, 1)")" >>"$TMPD/samples.tsv"
done
wait "${PIDS[0]}" "${PIDS[1]}" || { echo "notify bench: pgbench failed" >&2; cat "$TMPD"/*.log >&2; exit 1; }
PIDS=()

# the windows, from the rows
awk '/^progress: / { print $2 + 0, $4, $7 }' "$TMPD/consumers.log" >"$TMPD/takes.tsv"
"${PSQL[@]}" -d "$DB" -At -F $'\t' >"$TMPD/windows.tsv" <<SQL
CREATE TEMP TABLE s (k int, at float8, cpu bigint, mb numeric);
\\copy s FROM '$TMPD/samples.tsv'
CREATE TEMP TABLE p (t int, tps numeric, ms numeric);
\\copy p FROM '$TMPD/takes.tsv' WITH (DELIMITER ' ')
WITH w AS (SELECT k, to_timestamp(at) AS t1, to_timestamp(lag(at) OVER (ORDER BY k)) AS t0, at - lag(at) OVER (ORDER BY k) AS secs,
                  cpu - lag(cpu) OVER (ORDER BY k) AS dcpu, mb FROM s)
SELECT w.k * $INTERVAL,
       CASE WHEN w.k * $INTERVAL <= $BEFORE THEN 'before' WHEN w.k * $INTERVAL <= $BEFORE + $HELD THEN 'held' ELSE 'after' END,
       n.ended, n.p50, n.p99, wt.waiting, o.relayed, o.p50, o.p99,
       round(w.dcpu / w.secs), p.tps, p.ms, w.mb
  FROM w
  CROSS JOIN LATERAL (SELECT count(*) AS ended,
                             round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)) * 1000)::numeric, 1) AS p50,
                             round((percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM finished_at - created_at)) * 1000)::numeric, 1) AS p99
                        FROM vq.job WHERE handler = 'bn_notify' AND finished_at > w.t0 AND finished_at <= w.t1) n
  CROSS JOIN LATERAL (SELECT count(*) AS waiting FROM vq.job WHERE handler = 'bn_notify' AND created_at <= w.t1
                         AND (finished_at IS NULL OR finished_at > w.t1)) wt
  CROSS JOIN LATERAL (SELECT count(*) AS relayed,
                             round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)) * 1000)::numeric, 1) AS p50,
                             round((percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM published_at - created_at)) * 1000)::numeric, 1) AS p99
                        FROM vq.outbox WHERE published_at > w.t0 AND published_at <= w.t1) o
  LEFT JOIN p ON p.t = w.k * $INTERVAL
 WHERE w.t0 IS NOT NULL OR w.k = 1
 ORDER BY w.k;
SQL

log
printf '%-6s %-7s %7s %8s %9s %8s %8s %8s %9s %9s %7s %8s %7s\n' end_s phase ended p50_ms p99_ms waiting relayed rel_p50 rel_p99 \
    exec_cpu take/s take_ms job_MB
awk -F'\t' '{ printf "%-6s %-7s %7s %8s %9s %8s %8s %8s %9s %9s %7s %8s %7s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13 }' \
    "$TMPD/windows.tsv"

summary() { # PHASE
    local worst med
    worst="$(awk -F'\t' -v ph="$1" '$2 == ph { if ($5 + 0 > p99) p99 = $5 + 0; if ($9 + 0 > r99) r99 = $9 + 0 }
                END { printf "worst NOTIFY p99 %s ms, worst relay p99 %s ms", p99, r99 }' "$TMPD/windows.tsv")"
    med="$(awk -F'\t' -v ph="$1" '$2 == ph && $10 != "" { print $10 + 0 }' "$TMPD/windows.tsv" | sort -n |
           awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')"
    printf '  %-7s %s, executor CPU median %s ms/s\n' "$1" "$worst" "${med:--}"
}
log
log "summary"
summary before
summary held
summary after
last_held="$(awk -F'\t' -v a=$((BEFORE + HELD - 60)) -v b=$((BEFORE + HELD)) '$1 > a && $1 <= b { s += $10; n++ } END { if (n) printf "%.0f", s / n }' "$TMPD/windows.tsv")"
before_cpu="$(awk -F'\t' '$2 == "before" { s += $10; n++ } END { if (n) printf "%.0f", s / n }' "$TMPD/windows.tsv")"
log "  executor CPU, last minute held / before: $last_held / $before_cpu ms/s = $(ratio "$last_held" "$before_cpu")"
log "  vq.job_active: $(awk -F'\t' -v b="$BEFORE" '$1 == b { print $13 }' "$TMPD/windows.tsv") MB before the snapshot," \
    "$(awk -F'\t' -v b=$((BEFORE + HELD)) '$1 == b { print $13 }' "$TMPD/windows.tsv") MB at its end," \
    "$(tail -n 1 "$TMPD/windows.tsv" | cut -f13) MB at the end"

#!/usr/bin/env bash
# test/bench/scale.sh — does vq_job's cost grow only with the work, and how close is its drain
# to what plain SQL can do on the same machine, in the same run?
#
#   1. ceiling   drain of SCALE_DRAIN_JOBS (default 200,000) due no-op PL/pgSQL jobs against the
#                SQL ceiling: a minimal table
#                  t (id bigserial PRIMARY KEY, queue text, priority int, run_at timestamptz,
#                     state smallint, payload jsonb), one index (priority DESC, run_at) WHERE state = 0
#                holding the same number of rows, drained by pgbench (1 and 2 clients) with
#                  WITH c AS (SELECT id FROM t WHERE state = 0 ORDER BY priority DESC, run_at
#                             LIMIT 100 FOR UPDATE SKIP LOCKED)
#                  UPDATE t SET state = 2 FROM c WHERE t.id = c.id
#                vq_job: vq.executors_per_database 2 and 3, vq.batch_size 500, queue capacity
#                10,000. Goal: best vq rate >= 0.9 x best ceiling rate. WAL bytes per job/row.
#   2. backlog   drain rate with 10,000 due jobs waiting vs with 1,000,000 (2 executors, batch
#                500). Goal: >= 0.8.
#   3. enqueue   vq_enqueue rate (pgbench, 8 clients, one job per transaction, SCALE_ENQ_SECS
#                seconds, into a paused queue) on an empty vq.job vs with 1,000,000 future-dated
#                jobs waiting, and WAL bytes per enqueue. SCALE_ENQ_ROUNDS (default 4) interleaved
#                pairs; the figure is the median of the pairs' ratios (two runs of the same side
#                differ by up to 30% on a shared machine: a best-of per side is a coin toss).
#                Goal: >= 0.9.
#   4. cold      the first statement of a new connection (psql \timing, so round trip included;
#                median of 30 connections): SELECT vq_enqueue(...) vs an INSERT of an equal row
#                into a plain table LIKE vq.job_active INCLUDING ALL. Goal: <= 1.5x.
#
# Method. Every drain starts from a vacuumed, analyzed database and a CHECKPOINT. vq: the jobs
# are enqueued into the paused queue 'drain' (vq_enqueue_many, 100,000 per call), then
# vq_resume_queue() commits at R: rate = N / (max(finished_at) - R). Ceiling: pgbench runs
# enough transactions to claim every row (a few empty ones at the end):
# rate = N / (transactions / tps), pgbench's tps excluding connection time. Autovacuum is on
# (as shipped) on both sides. Rounds interleave vq and ceiling runs (SCALE_ROUNDS, default 2);
# the summary takes the best of each configuration.
#
# Run by ./scripts/bench (a fresh durable cluster). Creates vq_bench_scale and drops it at the
# end; settings it changes with ALTER SYSTEM are reset at the end, even on error.
# Knobs: SCALE_ROUNDS, SCALE_DRAIN_JOBS, SCALE_BIG (default 1000000), SCALE_SMALL (10000),
#        SCALE_ENQ_SECS (default 15), SCALE_ENQ_ROUNDS (default 4), SCALE_PARTS (subset of "ceiling backlog enqueue cold").
# Exit status: 0 when the measurements completed, goals met or not (a miss prints MISS).
set -euo pipefail

ROUNDS="${SCALE_ROUNDS:-2}"
N="${SCALE_DRAIN_JOBS:-200000}"
BIG="${SCALE_BIG:-1000000}"
SMALL="${SCALE_SMALL:-10000}"
ENQ_SECS="${SCALE_ENQ_SECS:-15}"
ENQ_ROUNDS="${SCALE_ENQ_ROUNDS:-4}"
PARTS="${SCALE_PARTS:-ceiling backlog enqueue cold}"
DB=vq_bench_scale
CHUNK=100000
for v in ROUNDS N BIG SMALL ENQ_SECS ENQ_ROUNDS; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "scale bench: $v must be a positive integer" >&2; exit 2; }
done

PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
PSQL=("$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1)
PGBENCH="$PG_BIN/pgbench"
WORK="$(mktemp -d /tmp/vq_bench_scale.XXXXXX)"
CHANGED_SETTINGS=()

die() { echo "scale bench: ERROR: $*" >&2; exit 1; }
# shellcheck source=test/bench/lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

cleanup() {
    local rc=$?
    set +e
    if "$PG_BIN/pg_isready" -q -t 30; then
        reset_gucs 2>/dev/null
        PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT

# wait_sql SQL SECS WHAT: poll SQL (a boolean) every 20 ms until true, or die after SECS.
wait_sql() {
    local end=$((SECONDS + $2)) last
    while :; do
        last="$(q "$1" 2>&1)" || true
        [[ "$last" == t ]] && return 0
        ((SECONDS > end)) && die "timed out after $2 s waiting for $3 (last: $last)"
        sleep 0.02
    done
}

PGOPTIONS='-c client_min_messages=warning' "$PG_BIN/dropdb" --if-exists --force "$DB"
"$PG_BIN/createdb" "$DB"
"${PSQL[@]}" -d "$DB" -o /dev/null <<'SQL'
SET client_min_messages = warning;
CREATE EXTENSION vq_job;
CREATE FUNCTION public.noop(jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN END$$;
SELECT vq_create_queue('drain', max_concurrent_jobs => 10000);
SELECT vq_create_queue('enq');
SELECT vq_pause_queue('enq');
SELECT vq_register_handler('noop', 'public.noop(jsonb)', queue => 'drain');
SELECT vq_register_handler('noop_enq', 'public.noop(jsonb)', queue => 'enq');
CREATE TABLE t (id bigserial PRIMARY KEY, queue text, priority int, run_at timestamptz,
                state smallint, payload jsonb);
CREATE INDEX t_claim ON t (priority DESC, run_at) WHERE state = 0;
CREATE TABLE plain_job (LIKE vq.job_active INCLUDING ALL);
SQL
set_guc vq.batch_size 500

executors() {
    set_guc vq.executors_per_database "$1"
    wait_sql "SELECT count(*) = $1 FROM pg_stat_activity
              WHERE datname = current_database() AND backend_type = 'vq_job executor'" 30 "$1 executors"
}

# settle: empty what a run left, vacuum and analyze, checkpoint.
settle() {
    q "TRUNCATE vq.job, vq.job_transition_data, vq.job_log, t" >/dev/null
    q "VACUUM ANALYZE vq.job_active, vq.job_finished, vq.job_transition_data, t" >/dev/null
    q "CHECKPOINT" >/dev/null
}

# load_vq JOBS QUEUE RUN_AT: enqueue JOBS no-op jobs (queue 'drain' is paused while they load).
load_vq() {
    local left="$1" n
    while ((left > 0)); do
        n=$((left < CHUNK ? left : CHUNK))
        q "SELECT count(*) FROM (SELECT vq_enqueue_many('$2', array_fill('{\"n\": 1}'::jsonb, ARRAY[$n]), $3)) x" >/dev/null
        left=$((left - n))
    done
}

# wait_drained SECS: wait until vq.job_active is empty. Polls the newest finished_at (one index
# probe) every 50 ms and checks for an empty vq.job_active only once that stopped moving: a
# frequent "is it empty" scan would walk the dead rows of the jobs already drained (up to a
# million) and take CPU from the executors it measures.
wait_drained() {
    local end=$((SECONDS + $1)) last="" cur still=0
    while ((SECONDS <= end)); do
        cur="$(q "SELECT max(finished_at) FROM vq.job_finished")"
        if [[ "$cur" == "$last" ]]; then still=$((still + 1)); else still=0; last="$cur"; fi
        if ((still >= 10)) && [[ "$(q "SELECT NOT EXISTS (SELECT 1 FROM vq.job_active)")" == t ]]; then
            return 0
        fi
        sleep 0.05
    done
    die "timed out after $1 s waiting for the drain"
}

# drain_vq JOBS -> "rate wal_per_job"
drain_vq() {
    local n="$1" r lsn0 stats
    settle
    q "SELECT vq_pause_queue('drain')" >/dev/null
    load_vq "$n" noop "now()"
    q "ANALYZE vq.job_active" >/dev/null
    lsn0="$(q "SELECT pg_current_wal_lsn()")"
    r="$(q "SELECT clock_timestamp() FROM (SELECT vq_resume_queue('drain')) x")"
    wait_drained 600
    stats="$(q "SELECT count(*), $n / extract(epoch FROM max(finished_at) - '$r'::timestamptz),
                       pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0') / $n
                FROM vq.job_finished WHERE state = 'COMPLETED'")"
    IFS='|' read -r ndone rate wal <<<"$stats"
    [[ "$ndone" == "$n" ]] || die "$ndone of $n jobs COMPLETED"
    echo "$(fmt "$rate" 0) $(fmt "$wal" 0)"
}

# drain_ceiling CLIENTS -> "rate wal_per_row"
drain_ceiling() {
    local c="$1" per lsn0 out tps txns
    settle
    q "INSERT INTO t (queue, priority, run_at, state, payload)
       SELECT 'drain', 0, now(), 0, '{\"n\": 1}' FROM generate_series(1, $N)" >/dev/null
    q "ANALYZE t" >/dev/null
    q "CHECKPOINT" >/dev/null
    per=$(((N / 100 + c - 1) / c + 5))
    cat >"$WORK/ceiling.sql" <<'SQL'
WITH c AS (SELECT id FROM t WHERE state = 0 ORDER BY priority DESC, run_at
           LIMIT 100 FOR UPDATE SKIP LOCKED)
UPDATE t SET state = 2 FROM c WHERE t.id = c.id;
SQL
    lsn0="$(q "SELECT pg_current_wal_lsn()")"
    out="$("$PGBENCH" -n -c "$c" -j "$c" -t "$per" -f "$WORK/ceiling.sql" "$DB" 2>&1)" || die "pgbench: $out"
    [[ "$(q "SELECT count(*) FROM t WHERE state = 0")" == 0 ]] || die "ceiling: rows left unclaimed"
    tps="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")"
    txns="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
    echo "$(awk -v n="$N" -v t="$txns" -v tps="$tps" 'BEGIN { printf "%.0f", n / (t / tps) }') $(fmt "$(q "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0') / $N")" 0)"
}

# enqueue_rate -> "jobs/s WAL-bytes-per-job" of vq_enqueue into the paused queue 'enq', 8 clients
enqueue_rate() {
    local lsn out tps n wal
    echo "SELECT vq_enqueue('noop_enq', '{\"n\": 1}');" >"$WORK/enq.sql"
    lsn="$(q "SELECT pg_current_wal_insert_lsn()")"
    out="$("$PGBENCH" -n -c 8 -j 2 -T "$ENQ_SECS" -f "$WORK/enq.sql" "$DB" 2>&1)"
    wal="$(q "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '$lsn')")"
    tps="$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")"
    n="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
    awk -v t="$tps" -v n="$n" -v w="$wal" 'BEGIN { printf "%.0f %.0f", t, (n > 0 ? w / n : 0) }'
}

log "scale bench: $("$PG_BIN/postgres" --version), $(nproc) CPUs, load average $(loadavg); rounds $ROUNDS"
declare -A BEST=()
keep_best() { if [[ -z "${BEST[$1]:-}" ]] || ge "$2" "${BEST[$1]%% *}"; then BEST[$1]="$2 $3"; fi; }

if has_part ceiling; then
    log ""
    log "== 1. drain of $N due no-op jobs: vq_job vs the minimal SQL ceiling"
    for ((round = 1; round <= ROUNDS; round++)); do
        for e in 2 3; do
            executors "$e"
            res="$(drain_vq "$N")"; read -r rate wal <<<"$res"
            log "  round $round  vq_job, $e executors, batch 500   $rate jobs/s  $wal WAL B/job"
            keep_best "vq_e$e" "$rate" "$wal"
        done
        for c in 1 2; do
            res="$(drain_ceiling "$c")"; read -r rate wal <<<"$res"
            log "  round $round  ceiling, $c pgbench client(s), LIMIT 100   $rate rows/s  $wal WAL B/row"
            keep_best "ceil_c$c" "$rate" "$wal"
        done
    done
fi

if has_part backlog; then
    log ""
    log "== 2. drain rate with $SMALL vs $BIG due jobs waiting (2 executors, batch 500)"
    executors 2
    for ((round = 1; round <= ROUNDS; round++)); do
        res="$(drain_vq "$SMALL")"; read -r rate wal <<<"$res"
        log "  round $round  $SMALL due    $rate jobs/s  $wal WAL B/job"
        keep_best small "$rate" "$wal"
        res="$(drain_vq "$BIG")"; read -r rate wal <<<"$res"
        log "  round $round  $BIG due  $rate jobs/s  $wal WAL B/job"
        keep_best big "$rate" "$wal"
    done
fi

if has_part enqueue; then
    log ""
    log "== 3. vq_enqueue rate (8 clients, ${ENQ_SECS} s) on an empty vq.job vs with $BIG future jobs"
    ENQ_RATIOS=() ENQ_WAL_EMPTY=() ENQ_WAL_BIG=()
    for ((round = 1; round <= ENQ_ROUNDS; round++)); do
        settle
        read -r empty wal <<<"$(enqueue_rate)"
        log "  round $round  empty           $empty jobs/s  $wal WAL B/job"
        keep_best enq_empty "$empty" -
        ENQ_WAL_EMPTY+=("$wal")
        settle
        load_vq "$BIG" noop "now() + interval '1 day'"
        q "VACUUM ANALYZE vq.job_active" >/dev/null
        q "CHECKPOINT" >/dev/null
        read -r big wal <<<"$(enqueue_rate)"
        log "  round $round  $BIG waiting  $big jobs/s  $wal WAL B/job  (ratio $(ratio "$big" "$empty"))"
        keep_best enq_big "$big" -
        ENQ_WAL_BIG+=("$wal")
        ENQ_RATIOS+=("$(ratio "$big" "$empty")")
    done
fi

if has_part cold; then
    log ""
    log "== 4. the first statement of a new connection (median of 30 connections, ms)"
    settle
    cold_ms() {
        local i
        for ((i = 0; i < 30; i++)); do
            "${PSQL[@]}" -d "$DB" -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
        done | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
    }
    cold_vq="$(cold_ms "SELECT vq_enqueue('noop_enq', '{\"n\": 1}')")"
    cold_ins="$(cold_ms "INSERT INTO plain_job (execution_id, state, priority, attempt_number, max_attempts,
        scheduled_at, created_at, updated_at, enqueued_by, queue, job_id, handler, handler_address, handler_function,
        payload, metadata)
        SELECT u, 'ENQUEUED', 0, 0, 3, now(), now(), now(), current_user::regrole, 'enq', 'delayed-' || u,
               'noop_enq', 'public.noop(jsonb)', 'public.noop(jsonb)'::regprocedure, '{\"n\": 1}', '{}' FROM gen_random_uuid() u")"
    log "  vq_enqueue $cold_vq ms, INSERT $cold_ins ms"
fi

log ""
log "summary (best of $ROUNDS rounds, enqueue: median of $ENQ_ROUNDS pairs; $(date -u +%Y-%m-%d), load average $(loadavg))"
printf '  %-58s %10s %8s  %s\n' "figure" "value" "goal" ""
verdict() { if ge "$1" "$2"; then echo PASS; else echo MISS; fi; }
if has_part ceiling; then
    vq="$(printf '%s\n' "${BEST[vq_e2]%% *}" "${BEST[vq_e3]%% *}" | sort -n | tail -1)"
    ceil="$(printf '%s\n' "${BEST[ceil_c1]%% *}" "${BEST[ceil_c2]%% *}" | sort -n | tail -1)"
    r="$(ratio "$vq" "$ceil")"
    printf '  %-58s %10s %8s  %s\n' "drain $N: vq_job best $vq / ceiling best $ceil jobs/s" "$r" ">= 0.9" "$(verdict "$r" 0.9)"
    printf '  %-58s %10s\n' "  WAL bytes per job (vq, 2 executors) / per row (ceiling, 1 client)" \
        "${BEST[vq_e2]#* } / ${BEST[ceil_c1]#* }"
fi
if has_part backlog; then
    r="$(ratio "${BEST[big]%% *}" "${BEST[small]%% *}")"
    printf '  %-58s %10s %8s  %s\n' "drain: $BIG due ${BEST[big]%% *} / $SMALL due ${BEST[small]%% *} jobs/s" "$r" ">= 0.8" "$(verdict "$r" 0.8)"
fi
if has_part enqueue; then
    r="$(median "${ENQ_RATIOS[@]}")"
    printf '  %-58s %10s %8s  %s\n' "enqueue: $BIG waiting / empty, median of $ENQ_ROUNDS pairs (${ENQ_RATIOS[*]})" "$r" ">= 0.9" "$(verdict "$r" 0.9)"
    printf '  %-58s %10s\n' "  best of each side: $BIG waiting ${BEST[enq_big]%% *} / empty ${BEST[enq_empty]%% *} jobs/s" \
        "$(ratio "${BEST[enq_big]%% *}" "${BEST[enq_empty]%% *}")"
    printf '  %-58s %10s\n' "  WAL bytes per enqueue, median: $BIG waiting / empty" \
        "$(fmt "$(median "${ENQ_WAL_BIG[@]}")" 0) / $(fmt "$(median "${ENQ_WAL_EMPTY[@]}")" 0)"
fi
if has_part cold; then
    r="$(ratio "$cold_vq" "$cold_ins")"
    printf '  %-58s %10s %8s  %s\n' "cold: first vq_enqueue $cold_vq / first INSERT $cold_ins ms" "$r" "<= 1.5" \
        "$(if le "$r" 1.5; then echo PASS; else echo MISS; fi)"
fi

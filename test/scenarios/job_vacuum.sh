#!/usr/bin/env bash
# job_vacuum.sh: executor 0 vacuums vq.job_active itself, and only when that removes something.
#   Autovacuum is off, so every vacuum of the table is executor 0's. pgbench enqueues 1,000
#   jobs/s. Within 25 s executor 0 has vacuumed the table at least twice, and 35 s in the table
#   is no bigger than twice its largest size in the first 15 s (without those vacuums it grows
#   by every job that ends). Then a REPEATABLE READ transaction holds its snapshot for 25 s:
#   nothing is removable, and executor 0 vacuums at most once in that time (the first vacuum
#   after the snapshot began can still remove what ended before it); within 15 s of the
#   snapshot's end it vacuums again and the dead versions are gone. Every job runs exactly once.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

TMPD="$(mktemp -d /tmp/vq_sc_job_vacuum.XXXXXX)"
BENCH_PID=""
cleanup() {
    set +e
    stop_snapshot_holder
    [[ -n "$BENCH_PID" ]] && kill "$BENCH_PID" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$TMPD"
    cleanup_configs
}
trap cleanup EXIT

size_kb() { q "SELECT pg_total_relation_size('vq.job_active') / 1024"; }
vacuums() { q "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass"; }

set_config autovacuum off
qs >/dev/null <<'SQL'
SELECT vq_create_queue('jv_q', max_concurrent_jobs => 100, sleep_delay_ms => 200);
CREATE TABLE jv_runs (k uuid);
CREATE FUNCTION public.jv_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.jv_runs VALUES ((p ->> 'k')::uuid) $$;
SELECT vq_register_handler('jv_record', 'public.jv_record(jsonb)', queue => 'jv_q');
SQL
v0="$(vacuums)"

log "pgbench: 1,000 jobs/s for 75 s, autovacuum off"
echo "SELECT vq_enqueue_many('jv_record', array_agg(jsonb_build_object('k', gen_random_uuid()))) FROM generate_series(1, 10) g;" \
    >"$TMPD/enqueue.sql"
pgbench -n -c 2 -j 2 -R 100 -T 75 -f "$TMPD/enqueue.sql" >"$TMPD/pgbench.out" 2>&1 &
BENCH_PID=$!
t0="$(now_ms)"

early=0
for _ in $(seq 1 15); do
    s="$(size_kb)"; ((s > early)) && early=$s
    sleep 1
done
log "largest size of vq.job_active in the first 15 s: $early kB"
wait_for "SELECT vacuum_count >= $v0 + 2 FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass" \
    $((25 - ($(now_ms) - t0) / 1000)) "two vacuums of vq.job_active by executor 0 within 25 s"
assert_eq 0 "$(q "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass")" \
    "autovacuum runs (it is off)"
while (($(now_ms) - t0 < 35000)); do sleep 0.5; done
s="$(size_kb)"
log "size 35 s in: $s kB, $(($(vacuums) - v0)) vacuums"
((s <= 2 * early)) || fail "vq.job_active grew to $s kB under steady load (largest in the first 15 s: $early kB)"

log "a REPEATABLE READ transaction holds its snapshot for 25 s"
hold_snapshot "$TMPD" jv_runs
held_from="$(vacuums)"
sleep 25
held_vacuums=$(($(vacuums) - held_from))
log "vacuums while the snapshot was held 25 s: $held_vacuums"
((held_vacuums <= 1)) || fail "executor 0 vacuumed vq.job_active $held_vacuums times while nothing was removable"
dead_held="$(q "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass")"
release_snapshot
released="$(vacuums)"
wait_for "SELECT vacuum_count > $released FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass" 15 \
    "a vacuum within 15 s of the snapshot's end"
dead_after="$(q "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass")"
log "dead versions: $dead_held with the snapshot held, $dead_after after that vacuum"
((dead_after * 2 < dead_held)) || fail "the vacuum after the snapshot's end left $dead_after of $dead_held dead versions"

wait "$BENCH_PID" || fail "pgbench failed: $(cat "$TMPD/pgbench.out")"
BENCH_PID=""
wait_for "SELECT count(*) = 0 FROM vq.job_active WHERE queue = 'jv_q'" 30 "every job finished"
assert_eq "$(q "SELECT count(*) FROM vq.job WHERE queue = 'jv_q'")" "$(q "SELECT count(DISTINCT k) FROM jv_runs")" \
    "jobs vs distinct handler runs"
assert_eq "$(q "SELECT count(*) FROM jv_runs")" "$(q "SELECT count(*) FROM vq.job WHERE queue = 'jv_q'")" "handler runs vs jobs"
log "PASS ($(q "SELECT count(*) FROM jv_runs") jobs)"

#!/usr/bin/env bash
# compact.sh: once a held snapshot ends, vq.job_active gives back the space it took.
#   With autovacuum looking every second, pgbench enqueues 1,000 jobs/s for 42 s. After 10 s
#   of steady load a REPEATABLE READ transaction holds its snapshot for 25 s: vacuum can
#   remove no version of the jobs that end meanwhile, and vq.job_active (heap and indexes)
#   grows to several times its steady size. Within 20 s of the snapshot's end, and without
#   any manual action, it is back under twice its steady size, executor 0 has logged the
#   rewrite, and every job has run exactly once.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

TMPD="$(mktemp -d /tmp/vq_sc_compact.XXXXXX)"
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

set_config autovacuum_naptime 1
log_offset="$(stat -c %s "$VQ_CLUSTER_DIR/server.log")"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('cp_q', max_concurrent_jobs => 100, sleep_delay_ms => 200);
CREATE TABLE cp_runs (k uuid);
CREATE FUNCTION public.cp_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.cp_runs VALUES ((p ->> 'k')::uuid) $$;
SELECT vq_register_handler('cp_record', 'public.cp_record(jsonb)', queue => 'cp_q');
SQL

log "pgbench: 1,000 jobs/s for 42 s"
echo "SELECT vq_enqueue_many('cp_record', array_agg(jsonb_build_object('k', gen_random_uuid()))) FROM generate_series(1, 10) g;" \
    >"$TMPD/enqueue.sql"
pgbench -n -c 2 -j 2 -R 100 -T 42 -f "$TMPD/enqueue.sql" >"$TMPD/pgbench.out" 2>&1 &
BENCH_PID=$!

steady=0
for _ in $(seq 1 10); do
    s="$(size_kb)"; ((s > steady)) && steady=$s
    sleep 1
done
log "steady size of vq.job_active (largest of 10 samples): $steady kB"

log "a REPEATABLE READ transaction holds its snapshot for 25 s"
hold_snapshot "$TMPD" cp_runs
sleep 25
held="$(size_kb)"
log "size after 25 s with the snapshot held: $held kB"
((held > 3 * steady)) || fail "vq.job_active grew only to $held kB with a snapshot held (steady $steady kB): nothing to give back"
release_snapshot
t0="$(now_ms)"

wait_for "SELECT pg_total_relation_size('vq.job_active') / 1024 <= 2 * $steady" 20 \
    "vq.job_active back under twice its steady size ($((2 * steady)) kB)"
log "back to $(size_kb) kB $(($(now_ms) - t0)) ms after the snapshot ended"
tail -c +"$((log_offset + 1))" "$VQ_CLUSTER_DIR/server.log" | grep -q 'rewrote vq.job_active (.*) to give back the space vacuum had freed' ||
    fail "no LOG line of the rewrite in the server log"

wait "$BENCH_PID" || fail "pgbench failed: $(cat "$TMPD/pgbench.out")"
BENCH_PID=""
wait_for "SELECT count(*) = 0 FROM vq.job_active WHERE queue = 'cp_q'" 30 "every job finished"
assert_eq "$(q "SELECT count(*) FROM vq.job WHERE queue = 'cp_q'")" "$(q "SELECT count(DISTINCT k) FROM cp_runs")" \
    "jobs vs distinct handler runs"
assert_eq "$(q "SELECT count(*) FROM cp_runs")" "$(q "SELECT count(*) FROM vq.job WHERE queue = 'cp_q'")" "handler runs vs jobs"
log "PASS ($(q "SELECT count(*) FROM cp_runs") jobs)"

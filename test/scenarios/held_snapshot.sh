#!/usr/bin/env bash
# held_snapshot.sh: a snapshot held open does not slow the claims or the outbox relay down.
#   A REPEATABLE READ transaction holds its snapshot for the whole run (vacuum can then
#   remove none of the finished jobs or relayed outbox rows) while pgbench enqueues 1,000
#   jobs/s (100 transactions/s of vq_enqueue_many of 10) and publishes 500 outbox rows/s
#   (100 transactions/s of 5 vq_outbox_publish to the same handler) for 60 s. Sampled every
#   second, the due job backlog never exceeds 2 s of arrivals and the PENDING outbox rows never
#   exceed 2 s of publications; after the load every job and every outbox row has run exactly
#   once. (test/bench/steady.sh measures the jobs at 3,000 jobs/s for minutes.)
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

SECS="${VQ_HELD_SNAPSHOT_SECS:-60}"
MAX_BACKLOG=2000
MAX_PENDING=1000
TMPD="$(mktemp -d /tmp/vq_sc_hs.XXXXXX)"
cleanup() {
    set +e
    stop_snapshot_holder
    wait 2>/dev/null
    rm -rf "$TMPD"
}
trap cleanup EXIT

log "setup: queue hs_q (default capacity: 5 jobs at once, so claims are frequent), handler hs_record"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('hs_q', sleep_delay_ms => 200);
CREATE TABLE hs_runs (n int);
CREATE FUNCTION public.hs_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.hs_runs VALUES ((p ->> 'n')::int) $$;
SELECT vq_register_handler('hs_record', 'public.hs_record(jsonb)', queue => 'hs_q');
SQL

log "a REPEATABLE READ transaction takes its snapshot and stays open"
hold_snapshot "$TMPD" hs_runs

log "pgbench: 1,000 jobs/s and 500 outbox rows/s for $SECS s; the backlogs sampled every second"
cat >"$TMPD/enqueue.sql" <<'SQL'
SELECT vq_enqueue_many('hs_record', array_agg(jsonb_build_object('n', g))) FROM generate_series(1, 10) g;
SQL
cat >"$TMPD/publish.sql" <<'SQL'
SELECT count(vq_outbox_publish('hs_record', jsonb_build_object('n', -g))) FROM generate_series(1, 5) g;
SQL
pgbench -n -c 2 -j 2 -R 200 -T "$SECS" -f "$TMPD/enqueue.sql@1" -f "$TMPD/publish.sql@1" >"$TMPD/pgbench.out" 2>&1 &
bench_pid=$!
max_backlog=0 max_pending=0 samples=0
while kill -0 "$bench_pid" 2>/dev/null; do
    IFS='|' read -r backlog pending <<<"$(q "SELECT (SELECT count(*) FROM vq.job WHERE queue = 'hs_q' AND state = 'ENQUEUED'
                                                    AND scheduled_at <= now()),
                                                   (SELECT count(*) FROM vq.outbox WHERE status = 'PENDING')")"
    ((backlog > max_backlog)) && max_backlog=$backlog
    ((pending > max_pending)) && max_pending=$pending
    samples=$((samples + 1))
    sleep 1
done
wait "$bench_pid" || fail "pgbench failed: $(cat "$TMPD/pgbench.out")"
log "due backlog: at most $max_backlog jobs, PENDING outbox rows: at most $max_pending over $samples samples" \
    "(goals: under $MAX_BACKLOG, under $MAX_PENDING)"
((max_backlog < MAX_BACKLOG)) || fail "the due backlog reached $max_backlog jobs with a snapshot held (at most $MAX_BACKLOG allowed)"
((max_pending < MAX_PENDING)) || fail "$max_pending outbox rows were PENDING with a snapshot held (at most $MAX_PENDING allowed)"

log "the snapshot is released; every job has run exactly once"
release_snapshot
wait_for "SELECT count(*) = 0 FROM vq.outbox WHERE status = 'PENDING'" 30 "every outbox row relayed"
wait_for "SELECT count(*) = 0 FROM vq.job WHERE queue = 'hs_q' AND state IN ('ENQUEUED', 'RUNNING')" 30 \
    "every hs_q job finished"
assert_eq "$(q "SELECT count(*) FROM vq.job WHERE queue = 'hs_q'")" "$(q "SELECT count(*) FROM hs_runs")" \
    "jobs enqueued vs handler runs"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE queue = 'hs_q' AND state <> 'COMPLETED'")" "hs_q jobs not COMPLETED"
assert_eq "$(q "SELECT count(*) FROM vq.outbox")" "$(q "SELECT count(*) FROM hs_runs WHERE n < 0")" \
    "outbox rows published vs their jobs' runs"
assert_eq 0 "$(q "SELECT count(*) FROM vq.outbox WHERE status <> 'PUBLISHED'")" "outbox rows not PUBLISHED"
log "PASS ($(q "SELECT count(*) FROM hs_runs") jobs)"

#!/usr/bin/env bash
# relay_positions.sh: the outbox relay resumes where the previous relays ended, and never
# leaves a row behind for long. Rows due at publication are taken in id order from a shared
# position; these rows land before it: a publish whose transaction commits after rows with
# higher ids were relayed (it takes its id first, then waits), and rows of one relay batch
# beyond those it handles (NOTIFY rows are delivered at most 60 per transaction). Each is
# relayed within 3 s (the relay's full sweep, which would also find them, comes only once a
# minute); every row is relayed exactly once.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

trap 'cleanup_configs' EXIT
PROMPT_SECS=3

log "setup: one executor (its first relay is a full sweep: later ones must use the position); queue rp_q, handler rp_record"
set_config vq.executors_per_database 1
wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
           AND datname = current_database()" 10 "one executor"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('rp_q', sleep_delay_ms => 200, max_concurrent_jobs => 50);
CREATE TABLE rp_runs (tag text);
CREATE FUNCTION public.rp_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.rp_runs VALUES (p ->> 'tag') $$;
SELECT vq_register_handler('rp_record', 'public.rp_record(jsonb)', queue => 'rp_q');
SQL

log "warm-up: the position moves past a first batch of rows"
q "SELECT count(vq_outbox_publish('rp_record', jsonb_build_object('tag', 'warm-' || g))) FROM generate_series(1, 20) g" >/dev/null
wait_for "SELECT count(*) = 20 FROM rp_runs WHERE tag LIKE 'warm-%'" 10 "the warm-up rows to run"

log "a publish that commits after higher ids were relayed"
q "BEGIN; SELECT vq_outbox_publish('rp_record', '{\"tag\": \"late\"}'); SELECT pg_sleep(1.5); COMMIT" >/dev/null &
late_pid=$!
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%\"late\"%pg_sleep%' AND state = 'active'
           AND backend_xid IS NOT NULL)" 10 "the late publisher to hold its row"
q "SELECT count(vq_outbox_publish('rp_record', jsonb_build_object('tag', 'after-' || g))) FROM generate_series(1, 20) g" >/dev/null
wait_for "SELECT count(*) = 20 FROM rp_runs WHERE tag LIKE 'after-%'" 10 "the rows published after it to run"
wait "$late_pid"
committed_ms="$(now_ms)"
wait_for "SELECT EXISTS (SELECT 1 FROM rp_runs WHERE tag = 'late')" "$PROMPT_SECS" \
    "the late row to be relayed and run (within $PROMPT_SECS s of its commit, not at the next sweep)"
log "  ran $(($(now_ms) - committed_ms)) ms after its commit"

log "200 NOTIFY rows in one transaction: one relay delivers 60, the position lets the others follow"
q "SELECT count(vq_outbox_publish_to('NOTIFY', 'rp_channel', jsonb_build_object('n', g))) FROM generate_series(1, 200) g" >/dev/null
committed_ms="$(now_ms)"
wait_for "SELECT count(*) = 0 FROM vq.outbox WHERE destination_type = 'NOTIFY' AND status = 'PENDING'" \
    "$PROMPT_SECS" "every NOTIFY row published (within $PROMPT_SECS s)"
log "  all published $(($(now_ms) - committed_ms)) ms after the commit"

assert_eq 41 "$(q "SELECT count(*) FROM rp_runs")" "handler runs (20 + 20 + 1)"
assert_eq 41 "$(q "SELECT count(DISTINCT tag) FROM rp_runs")" "distinct tags run"
assert_eq 0 "$(q "SELECT count(*) FROM vq.outbox WHERE status <> 'PUBLISHED'")" "outbox rows not PUBLISHED"
log "PASS"

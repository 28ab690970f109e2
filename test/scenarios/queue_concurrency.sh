#!/usr/bin/env bash
# queue_concurrency.sh: a queue runs instances x max_concurrent_jobs jobs at once, in processes
# started on demand; slow jobs never hold up fast ones.
# vq.executors_per_database = 2 (the default), vq.max_executors = 16 (the default).
#   1. queue qc_slow (capacity 10) gets ten jobs of a handler sleeping 2 s, queue qc_fast
#      (capacity 100) 1,000 no-op jobs, in one transaction: the ten slow jobs all start within
#      2 s of the commit, before any of them ended (so they run at once, each in its own
#      process), and the 1,000 fast jobs
#      all finish within 2 s of it; a queue's claim order is kept (qc_fast's jobs, enqueued with
#      priorities, start in priority order within each executor's batches: checked as "no job
#      of priority 0 finished before the first of priority 5 started").
#   2. the executors started on demand exit after idling (10 s): two executors remain.
#   3. vq.max_executors = 4: ten slow jobs again; never more than 4 executors for the database,
#      every job still completes, and the server log says the cap kept executors from starting.
#   4. a handler limited to 2 running jobs (max_running, shown in vq.handler_settings; 0 and a
#      NOTIFY handler's limit are refused) shares queue qc_shared (capacity 10) with a fast
#      handler: six 1 s jobs of it enqueued first, then 200 fast ones: never more than 2 of the
#      limited jobs run at once, all six complete, and the fast jobs finish within 2 s.
#   5. a queue of capacity 5 gets 300 no-op jobs in one transaction: an executor whose claimed
#      jobs all ran inline claims again in the same transaction, so the 300 jobs commit in far
#      fewer than the 60 transactions that claims of 5 would each need (<= 30 transactions),
#      each job exactly once.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

cleanup() {
    set +e
    cleanup_configs
}
trap cleanup EXIT

# commit_at: run the statements on stdin in one transaction; print the commit's time (epoch s).
commit_at() {
    { echo "BEGIN;"; cat; echo "COMMIT;"; echo "SELECT extract(epoch FROM clock_timestamp());"; } | qs | tail -n 1
}

executors_here() {
    q "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()"
}

log "setup: queues qc_slow (capacity 10) and qc_fast (capacity 100), handlers"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('qc_slow', sleep_delay_ms => 100, instances => 1, max_concurrent_jobs => 10);
SELECT vq_create_queue('qc_fast', sleep_delay_ms => 100, instances => 1, max_concurrent_jobs => 100);
CREATE TABLE qc_ran (tag text, pid int, priority int, started timestamptz, ended timestamptz);
CREATE FUNCTION qc_slow(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_sleep(2);
    INSERT INTO public.qc_ran VALUES (p ->> 'tag', pg_backend_pid(), 0, t0, clock_timestamp());
END $$;
CREATE FUNCTION qc_fast(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.qc_ran VALUES (p ->> 'tag', pg_backend_pid(), ctx.priority, clock_timestamp(), clock_timestamp());
END $$;
SELECT vq_register_handler('qc_slow', 'qc_slow(jsonb)', queue => 'qc_slow');
SELECT vq_register_handler('qc_fast', 'qc_fast(jsonb, vq.job_context)', queue => 'qc_fast');
SQL
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 \
    "the two executors"

# ---------------------------------------------------------------------------
log "1. ten slow jobs and 1,000 fast ones, committed together"
t_commit="$(commit_at <<'SQL'
SELECT count(vq_enqueue('qc_slow', jsonb_build_object('tag', 'slow'))) FROM generate_series(1, 10);
SELECT count(vq_enqueue('qc_fast', jsonb_build_object('tag', 'fast'), priority => CASE WHEN i <= 500 THEN 5 ELSE 0 END))
  FROM generate_series(1, 1000) i;
SQL
)"
wait_for "SELECT count(*) = 1000 FROM qc_ran WHERE tag = 'fast'" 10 "the 1,000 fast jobs"
wait_for "SELECT count(*) = 10 FROM qc_ran WHERE tag = 'slow'" 15 "the 10 slow jobs"
got="$(q "SELECT round((max(extract(epoch FROM ended)) FILTER (WHERE tag = 'fast') - $t_commit)::numeric, 2) || '|' ||
                 round((max(extract(epoch FROM started)) FILTER (WHERE tag = 'slow') - $t_commit)::numeric, 2) || '|' ||
                 count(DISTINCT pid) FILTER (WHERE tag = 'slow')
            FROM qc_ran")"
IFS='|' read -r fast_done slow_started slow_pids <<<"$got"
log "fast jobs all done ${fast_done} s after the commit; last slow job started after ${slow_started} s; slow jobs ran in $slow_pids processes"
# (a slow job lasts 2 s: started within it, none waited for another to end, on a machine however busy)
awk -v s="$slow_started" 'BEGIN { exit !(s < 2.0) }' || fail "the last of the ten slow jobs started ${slow_started} s after the commit, expected < 2 s, before any slow job ended (capacity 10)"
assert_eq 10 "$slow_pids" "processes the ten slow jobs ran in"
awk -v s="$fast_done" 'BEGIN { exit !(s <= 2.0) }' || fail "the 1,000 fast jobs took ${fast_done} s, expected <= 2 s (not behind the slow ones)"
inverted="$(q "SELECT count(*) FROM qc_ran WHERE tag = 'fast' AND priority = 0
                AND ended < (SELECT min(started) FROM qc_ran WHERE tag = 'fast' AND priority = 5)")"
assert_eq 0 "$inverted" "fast jobs of priority 0 that finished before the first of priority 5 started"
log "ok"

# ---------------------------------------------------------------------------
log "2. the executors started on demand exit after idling"
n="$(executors_here)"
((n > 2)) || fail "expected executors started on demand, found $n"
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 20 \
    "the executors started on demand to exit (10 s idle)"
log "ok: $n executors, back to 2"

# ---------------------------------------------------------------------------
log "3. vq.max_executors = 4"
set_config vq.max_executors 4
log_start="$(wc -c <"${VQ_CLUSTER_DIR:?}/server.log")"
q "SELECT count(vq_enqueue('qc_slow', jsonb_build_object('tag', 'capped'))) FROM generate_series(1, 10)" >/dev/null
most=0
deadline=$((SECONDS + 30))
while [[ "$(q "SELECT count(*) FROM qc_ran WHERE tag = 'capped'")" != 10 ]]; do
    ((SECONDS < deadline)) || fail "the capped slow jobs did not all complete in 30 s"
    n="$(executors_here)"
    ((n > most)) && most=$n
    sleep 0.1
done
((most <= 4)) || fail "$most executors ran for this database with vq.max_executors = 4"
tail -c +"$((log_start + 1))" "$VQ_CLUSTER_DIR/server.log" | grep "vq.max_executors = 4" >/dev/null ||
    fail "no LOG line about vq.max_executors in the server log"
log "ok: at most $most executors; the cap was logged"
reset_config vq.max_executors

# ---------------------------------------------------------------------------
log "4. a handler limited to 2 running jobs in a shared queue"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('qc_shared', sleep_delay_ms => 100, instances => 1, max_concurrent_jobs => 10);
CREATE FUNCTION qc_limited(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
    PERFORM pg_sleep(1);
    INSERT INTO public.qc_ran VALUES (p ->> 'tag', pg_backend_pid(), 0, t0, clock_timestamp());
END $$;
SELECT vq_register_handler('qc_limited', 'qc_limited(jsonb)', queue => 'qc_shared', max_running => 2);
SELECT vq_register_handler('qc_shared_fast', 'qc_fast(jsonb, vq.job_context)', queue => 'qc_shared');
SQL
assert_eq "2|" "$(q "SELECT string_agg(coalesce(max_running::text, ''), '|' ORDER BY name) FROM vq.handler_settings
                      WHERE name IN ('qc_limited', 'qc_shared_fast')")" "max_running in vq.handler_settings"
err="$(q "SELECT vq_register_handler('qc_bad', 'qc_limited(jsonb)', max_running => 0)" 2>&1 || true)"
[[ "$err" == *"max_running must be between 1 and 10000"* ]] || fail "max_running 0: expected an error, got: $err"
err="$(q "SELECT vq_register_handlers('[{\"name\": \"qc_bad2\", \"channel\": \"c\", \"maxRunning\": 3}]')" 2>&1 || true)"
[[ "$err" == *"max_running applies to function handlers only"* ]] || fail "a NOTIFY handler's maxRunning: expected an error, got: $err"
t_commit="$(commit_at <<'SQL'
SELECT count(vq_enqueue('qc_limited', jsonb_build_object('tag', 'limited'))) FROM generate_series(1, 6);
SELECT count(vq_enqueue('qc_shared_fast', jsonb_build_object('tag', 'shared_fast'))) FROM generate_series(1, 200);
SQL
)"
wait_for "SELECT count(*) = 200 FROM qc_ran WHERE tag = 'shared_fast'" 10 "the 200 fast jobs of the shared queue"
wait_for "SELECT count(*) = 6 FROM qc_ran WHERE tag = 'limited'" 15 "the six limited jobs"
got="$(q "SELECT (SELECT max(n) FROM (SELECT count(*) n FROM qc_ran a JOIN qc_ran b
                    ON b.tag = 'limited' AND b.started <= a.started AND b.ended > a.started
                    WHERE a.tag = 'limited' GROUP BY a.started) c) || '|' ||
                 round((SELECT max(extract(epoch FROM ended)) FROM qc_ran WHERE tag = 'shared_fast') - $t_commit, 2)")"
IFS='|' read -r most fast_done <<<"$got"
assert_eq 2 "$most" "limited jobs running at once (max_running 2)"
awk -v s="$fast_done" 'BEGIN { exit !(s <= 2.0) }' || fail "the fast jobs of the shared queue took ${fast_done} s, expected <= 2 s"
log "ok: at most $most limited jobs at once; the fast jobs done after ${fast_done} s"

# ---------------------------------------------------------------------------
log "5. capacity 5, 300 no-op jobs: claims again in the same transaction"
qs >/dev/null <<'SQL'
SELECT vq_pause_queue('default');
CREATE TABLE qc_txn (n int, xid bigint);
CREATE FUNCTION qc_txn(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.qc_txn VALUES ((p ->> 'n')::int, txid_current()) $$;
SELECT vq_register_handler('qc_txn', 'qc_txn(jsonb)');
SELECT count(vq_enqueue('qc_txn', jsonb_build_object('n', g))) FROM generate_series(1, 300) g;
SQL
assert_eq 5 "$(q "SELECT instances * max_concurrent_jobs FROM vq.queue WHERE name = 'default'")" "capacity of the default queue"
q "SELECT vq_resume_queue('default')" >/dev/null
wait_for "SELECT count(*) = 300 FROM qc_txn" 20 "the 300 jobs of capacity 5"
got="$(q "SELECT count(DISTINCT n) || '|' || count(DISTINCT xid) FROM qc_txn")"
IFS='|' read -r distinct_jobs txns <<<"$got"
assert_eq 300 "$distinct_jobs" "distinct jobs run (each once)"
((txns <= 30)) || fail "the 300 jobs committed in $txns transactions, expected <= 30 (claims of 5 would need 60)"
log "ok: 300 jobs in $txns transactions"
log "PASS"

#!/usr/bin/env bash
# outbox_relay_crash.sh: the outbox relay's throughput and its exactly-once accounting across
# a crash.
#   A. throughput: 2,000 DELAYED_JOB rows published in one transaction; the time from just
#      before COMMIT to the last published_at gives rows/s (default vq.batch_size); every row
#      yields exactly one job.
#   B. crash: N = 3,000 rows published in 6 transactions of 500, each payload carrying its row
#      number n (1..N); the handler inserts a row keyed on the job's execution_id (a second
#      effect of one job would fail). vq.batch_size is lowered to 10 so that the relay takes
#      long enough to be caught mid-way; once some rows of the first 3 transactions are
#      PUBLISHED, a session holds a SHARE lock on vq.job_active and the other 3 are published,
#      so that a relay transaction waits with jobs enqueued but not committed,
#      and that executor is killed with SIGKILL (the postmaster restarts every backend; the relay
#      transaction in flight is lost). After the server accepts connections again, once no row
#      is PENDING:
#        - exactly N rows PUBLISHED (none FAILED), exactly N jobs for the handler;
#        - each outbox row has exactly one job with its payload (n = 1..N, no duplicate, none
#          missing), enqueued_by = published_by, job metadata = metadata.context;
#        - all N jobs COMPLETED, with exactly one effect each.
#   C. pg_ctl stop -m fast while the relay runs a custom destination function that sleeps 20 s,
#      with vq.shutdown_grace_ms = 1000: the server stops within 5 s (as with a handler), and
#      the row is delivered once after the restart.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
: "${VQ_REPO_ROOT:?}" "${VQ_CLUSTER_DIR:?}" "${VQ_CLUSTER_DATA:?}"
# shellcheck source=scripts/lib.sh
. "$VQ_REPO_ROOT/scripts/lib.sh"

N=3000
NTX=6
TP_ROWS=2000

cleanup() {
    local rc=$?
    set +e
    # the server must be up for the next scenario (phase C stops and starts it)
    local deadline=$((SECONDS + 60))
    until pg_isready -q || ((SECONDS > deadline)); do
        if ! vq_pg_ctl status >/dev/null 2>&1; then
            vq_pg_ctl -l "$VQ_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null 2>&1
        fi
        sleep 0.1
    done
    cleanup_configs
    exit "$rc"
}
trap cleanup EXIT

log "setup: queue, effect table, handler rc_h"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('rc_q', sleep_delay_ms => 100, max_concurrent_jobs => 200);
CREATE TABLE rc_effect (execution_id uuid PRIMARY KEY, phase text NOT NULL, n integer,
                        at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION rc_fn(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.rc_effect (execution_id, phase, n) VALUES (ctx.execution_id, p ->> 'phase', (p ->> 'n')::int);
END $$;
SELECT vq_register_handler('rc_h', 'rc_fn(jsonb, vq.job_context)', queue => 'rc_q', max_attempts => 10);
SQL

# ---- A. throughput -------------------------------------------------------------------------
log "A. throughput: $TP_ROWS rows in one transaction"
t_commit="$(qs <<SQL
BEGIN;
SELECT count(vq_outbox_publish('rc_h', jsonb_build_object('phase', 'tp', 'n', i))) FROM generate_series(1, $TP_ROWS) i \gset
SELECT clock_timestamp();
COMMIT;
SQL
)"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.outbox WHERE status = 'PENDING')" 60 "the $TP_ROWS rows to be relayed"
tp="$(q "SELECT round(extract(epoch FROM max(published_at) - '$t_commit'::timestamptz) * 1000) FROM vq.outbox")"
log "RELAY THROUGHPUT: $TP_ROWS rows in ${tp} ms (commit -> last published_at) = $(awk -v n="$TP_ROWS" -v ms="$tp" 'BEGIN { printf "%.0f", n / (ms / 1000) }') rows/s (vq.batch_size default)"
assert_eq "PUBLISHED=$TP_ROWS" "$(q "SELECT string_agg(status || '=' || n, ',') FROM (SELECT status, count(*) n FROM vq.outbox GROUP BY 1) s")" \
    "outbox rows after the throughput phase"
assert_eq "$TP_ROWS|$TP_ROWS" "$(q "SELECT count(*) || '|' || count(DISTINCT payload ->> 'n') FROM vq.job WHERE handler = 'rc_h'")" \
    "jobs (count|distinct n) after the throughput phase"
wait_for "SELECT count(*) = $TP_ROWS FROM rc_effect WHERE phase = 'tp'" 60 "the throughput phase's jobs to run"

# ---- B. crash mid-relay ----------------------------------------------------------------------
log "B. crash: $N rows in $NTX transactions, SIGKILL of an executor mid-relay"
set_config vq.batch_size 10
per=$((N / NTX))
publish_tx() {  # publish_tx FIRST LAST: transactions FIRST..LAST (zero-based) of NTX
    for ((t = $1; t <= $2; t++)); do
        printf 'BEGIN;\n'
        printf "SELECT vq_context_set('crash', jsonb_build_object('tx', %d));\n" "$((t + 1))"
        printf "SELECT count(vq_outbox_publish('rc_h', jsonb_build_object('phase', 'crash', 'n', i))) FROM generate_series(%d, %d) i;\n" \
            "$((t * per + 1))" "$(((t + 1) * per))"
        printf 'COMMIT;\n'
    done | qs >/dev/null
}
published() { q "SELECT count(*) FROM vq.outbox WHERE payload ->> 'phase' = 'crash' AND status = 'PUBLISHED'"; }
# The first half is relayed freely; then a SHARE lock on vq.job_active blocks the relay's next
# job insert, and the second half is published: a relay transaction with jobs enqueued but not
# committed is in flight when the executor dies.
publish_tx 0 $((NTX / 2 - 1))
wait_for "SELECT count(*) >= $((N / 10)) FROM vq.outbox WHERE payload ->> 'phase' = 'crash' AND status = 'PUBLISHED'" 30 \
    "some crash rows to be PUBLISHED"
psql -XAtq -c "BEGIN; LOCK TABLE vq.job_active IN SHARE MODE; SELECT pg_sleep(60); COMMIT;" >/dev/null 2>&1 &
locker=$!
wait_for "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.relation = 'vq.job_active'::regclass
                          AND l.mode = 'ShareLock' AND l.granted AND a.query LIKE 'BEGIN; LOCK TABLE%')" 10 "the SHARE lock"
publish_tx $((NTX / 2)) $((NTX - 1))
assert_eq "$N|$N|1|$N" "$(q "SELECT count(*) || '|' || count(DISTINCT payload ->> 'n') || '|' || min((payload ->> 'n')::int) || '|' || max((payload ->> 'n')::int)
                               FROM vq.outbox WHERE payload ->> 'phase' = 'crash'")" "published rows (count|distinct n|min|max)"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                          AND datname = current_database() AND wait_event_type = 'Lock')" 20 \
    "an executor's relay to wait on the held lock" || true
pid="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()
           ORDER BY wait_event_type = 'Lock' DESC, state = 'active' DESC, pid LIMIT 1")"
[[ -n "$pid" ]] || fail "no vq_job executor for this database"
n_before="$(published)"
t_kill="$(date +%s.%N)"
kill -9 "$pid" || fail "could not kill executor $pid"
((n_before < N)) || fail "all $N rows were already PUBLISHED before the kill ($n_before): the kill did not hit the relay mid-way"
log "killed executor $pid with $n_before of $N rows PUBLISHED"
wait "$locker" 2>/dev/null || true   # its session ends with the crash restart
# the postmaster restarts every backend; wait until it accepts connections again
wait_for "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
             AND datname = current_database() AND backend_start > to_timestamp($t_kill)" 60 \
    "executors started after the kill"
wait_ready 60
n_after="$(published)"
log "server back after $(awk -v a="$t_kill" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s; $n_after rows PUBLISHED then"
((n_after >= n_before)) || fail "PUBLISHED rows went from $n_before to $n_after across the crash (committed rows lost)"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.outbox WHERE status = 'PENDING')" 60 "no PENDING outbox row after the crash"

# ---- accounting -------------------------------------------------------------------------------
assert_eq "PUBLISHED=$N" "$(q "SELECT string_agg(status || '=' || n, ',' ORDER BY status)
                                 FROM (SELECT status, count(*) n FROM vq.outbox WHERE payload ->> 'phase' = 'crash' GROUP BY 1) s")" \
    "crash rows by status"
assert_eq "$N|$N" "$(q "SELECT count(*) || '|' || count(DISTINCT payload ->> 'n') FROM vq.job
                         WHERE handler = 'rc_h' AND payload ->> 'phase' = 'crash'")" "crash jobs (count|distinct n)"
assert_eq 0 "$(q "SELECT count(*) FROM vq.outbox o
                   WHERE o.payload ->> 'phase' = 'crash'
                     AND (SELECT count(*) FROM vq.job j
                           WHERE j.handler = 'rc_h' AND j.payload = o.payload AND j.enqueued_by = o.published_by
                             AND j.metadata = o.metadata -> 'context' AND j.queue = 'rc_q' AND j.max_attempts = 10) <> 1")" \
    "outbox rows without exactly one matching job (payload, enqueued_by, metadata, queue, max_attempts)"
assert_eq "$NTX" "$(q "SELECT count(DISTINCT metadata) FROM vq.job WHERE handler = 'rc_h' AND payload ->> 'phase' = 'crash'")" \
    "distinct job contexts (one per publishing transaction)"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE handler = 'rc_h' AND state IN ('ENQUEUED', 'RUNNING'))" 60 \
    "every crash job to finish"
assert_eq "COMPLETED=$N" "$(q "SELECT string_agg(state || '=' || n, ',' ORDER BY state)
                                 FROM (SELECT state::text, count(*) n FROM vq.job
                                        WHERE handler = 'rc_h' AND payload ->> 'phase' = 'crash' GROUP BY 1) s")" \
    "crash jobs by state"
assert_eq "$N|$N|0" "$(q "SELECT count(*) || '|' || count(DISTINCT e.n) || '|' || count(*) FILTER (WHERE j.execution_id IS NULL)
                           FROM rc_effect e LEFT JOIN vq.job j USING (execution_id) WHERE e.phase = 'crash'")" \
    "effects of the crash jobs (count|distinct n|without a job)"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_transition t JOIN vq.job j USING (execution_id)
                   WHERE j.handler = 'rc_h' AND t.kind = 'FAILED'")" "FAILED transitions (a job run twice would fail on the effect key)"
reset_config vq.batch_size
log "crash accounting OK: $N rows -> $N jobs, killed at $n_before PUBLISHED"

# ---- C. a slow destination function and a fast shutdown ---------------------------------------
log "C. pg_ctl stop -m fast while a destination function sleeps 20 s (vq.shutdown_grace_ms = 1000)"
qs >/dev/null <<'SQL'
CREATE TABLE rc_flag (slow boolean NOT NULL);
INSERT INTO rc_flag VALUES (true);
CREATE TABLE rc_call (payload jsonb, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION rc_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT slow FROM public.rc_flag) THEN
        PERFORM pg_sleep(20);
    END IF;
    INSERT INTO public.rc_call (payload) VALUES (payload);
    RETURN ROW('SUCCESS', NULL)::vq.publish_result;
END $$;
SELECT vq_register_destination('rc.slow', 'rc_dest(text, jsonb, jsonb, jsonb)');
SQL
set_config vq.shutdown_grace_ms 1000
slow_id="$(q "SELECT vq_outbox_publish_to('rc.slow', 'x', '{\"case\": \"slow\"}')")"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                            AND datname = current_database() AND wait_event = 'PgSleep')" 10 \
    "an executor to be in the destination function's pg_sleep"
q "UPDATE rc_flag SET slow = false" >/dev/null   # (its next call, after the restart, is fast)
t0="$(now_ms)"
vq_pg_ctl -m fast -w -t 60 stop >/dev/null || fail "pg_ctl stop -m fast failed"
stop_ms=$(($(now_ms) - t0))
vq_pg_ctl -l "$VQ_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null || fail "pg_ctl start failed"
wait_ready 60
log "server stopped in ${stop_ms} ms with a destination function sleeping"
wait_for "SELECT status = 'PUBLISHED' FROM vq.outbox WHERE id = $slow_id" 10 "the slow row to be relayed after the restart"
assert_eq 1 "$(q "SELECT count(*) FROM rc_call")" "committed calls of the slow destination"
((stop_ms <= 5000)) ||
    fail "pg_ctl stop -m fast took ${stop_ms} ms while the relay ran a destination function, expected <= 5000 ms (vq.shutdown_grace_ms = 1000, as for a handler)"
reset_config vq.shutdown_grace_ms
log "PASS: outbox relay crash accounting ($N rows -> $N jobs, killed at $n_before PUBLISHED); fast shutdown"

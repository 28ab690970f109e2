#!/usr/bin/env bash
# callback_cancel.sh: cancels and terminations are never swallowed by a callback's
# subtransaction, and never cut what an executor must finish.
#   1. a worker's vq_complete (of a job it took with vq_take_jobs) under statement_timeout,
#      with an on_complete interceptor that takes longer than the timeout: the reply never
#      carries on past a swallowed cancel (no "interceptor ... failed: canceling statement"
#      WARNING); the on_complete runs to its end once, in an executor.
#   2. the same with pg_cancel_backend of the worker's session while its vq_fail runs: if the
#      cancel reaches the reply it ends it (57014, the job still RUNNING), never as a WARNING
#      after which the reply commits; the on_complete runs to its end once, in an executor.
#   3. pg_cancel_backend of an executor while it runs a (queued) listener: a cancel outside
#      user code is ignored, the listener ends normally, the executor goes on.
#   4. pg_terminate_backend of an executor while an on_complete runs for a job it claimed
#      visibly: the executor stops as an orderly stop does: the callback ends, the job is
#      recorded COMPLETED (one CLAIMED and one COMPLETED transition), the executor exits and
#      another replaces it.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

TMPD="$(mktemp -d)"
BG_PID=""
cleanup() {
    set +e
    [[ -n "$BG_PID" ]] && kill "$BG_PID" 2>/dev/null
    q "SELECT vq_unregister_interceptor(name) FROM vq.interceptor;
       SELECT vq_unregister_transition_listener(name) FROM vq.transition_listener" >/dev/null 2>&1
    rm -rf "$TMPD"
}
trap cleanup EXIT

log "setup: queue cc, a NOTIFY handler, a slow on_complete and a slow listener"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('cc', sleep_delay_ms => 100, max_concurrent_jobs => 10);
SELECT vq_register_notify_handler('cc_notify', 'cc_channel', queue => 'cc', max_attempts => 1);
CREATE FUNCTION public.cc_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('cc_fn', 'public.cc_noop(jsonb)', queue => 'cc');
-- what the callbacks saw; a row exists only if the callback ran to its end (it sleeps after
-- the insert, so a cut call rolls its row back)
CREATE TABLE public.cc_seen (cb text, execution_id uuid, kind text, backend text, pid int);
CREATE FUNCTION public.cc_slow_complete(c vq.job_context, outcome text, error text) RETURNS void
LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    INSERT INTO cc_seen VALUES ('on_complete', c.execution_id, outcome,
        (SELECT backend_type FROM pg_catalog.pg_stat_activity WHERE pid = pg_catalog.pg_backend_pid()),
        pg_catalog.pg_backend_pid());
    PERFORM pg_catalog.pg_sleep((c.metadata ->> 'sleep')::float8);
END $$;
CREATE FUNCTION public.cc_slow_listen(t vq.job_transition, j vq.job) RETURNS void
LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
    INSERT INTO cc_seen VALUES ('listener', t.execution_id, t.kind,
        (SELECT backend_type FROM pg_catalog.pg_stat_activity WHERE pid = pg_catalog.pg_backend_pid()),
        pg_catalog.pg_backend_pid());
    PERFORM pg_catalog.pg_sleep((j.metadata ->> 'sleep')::float8);
END $$;
SELECT vq_register_interceptor('cc-slow', on_complete => 'public.cc_slow_complete(vq.job_context, text, text)');
SELECT vq_register_transition_listener('cc-slow', 'public.cc_slow_listen(vq.job_transition, vq.job)',
                                       kinds => '{CANCELLED}', queues => '{cc}');
SQL

# ran_once_in_executor WHAT ID KIND: the callback WHAT ran to its end exactly once for job ID,
# in an executor, and nothing is left queued for the job.
ran_once_in_executor() {
    (wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event WHERE execution_id = '$2')
                  AND (SELECT count(*) = 1 AND bool_and(backend = 'vq_job executor' AND kind = '$3')
                         FROM public.cc_seen WHERE cb = '$1' AND execution_id = '$2')" 15 \
        "$1 ($3) of $2 to run once, to its end, in an executor") ||
        fail_later "$1 ($3) of $2 did not run once to its end in an executor: [$(q "SELECT
              coalesce(string_agg(kind || '/' || backend, ', '), 'nothing') FROM public.cc_seen
              WHERE cb = '$1' AND execution_id = '$2'")]"
}
# no_swallowed_cancel STEP OUTPUT: the client's output shows no cancel turned into a WARNING.
no_swallowed_cancel() {
    if grep -q 'WARNING:.*failed: canceling statement' <<<"$2"; then
        fail_later "$1: a cancel was swallowed by a callback and the statement went on: $(tr '\n' ' ' <<<"$2")"
    fi
}

# ---------------------------------------------------------------------------
log "1. vq_complete under statement_timeout = 1s, with an on_complete sleeping 3 s"
J1="$(q "SELECT vq_enqueue('cc_notify', '{}', metadata => '{\"sleep\": 3}')")"
assert_eq "$J1|0" "$(q "SELECT string_agg(execution_id || '|' || attempt, ',') FROM vq_take_jobs('{cc_notify}', 10)")" \
    "1: vq_take_jobs"
out="$(psql -XAtq -v ON_ERROR_STOP=1 -c "SET statement_timeout = '1s'" -c "SELECT vq_complete('$J1', 0)" 2>&1)" ||
    true
no_swallowed_cancel 1 "$out"
[[ "$out" == t ]] || fail_later "1: vq_complete said [$(tr '\n' ' ' <<<"$out")], expected [t] alone"
assert_eq COMPLETED "$(q "SELECT state FROM vq.job WHERE execution_id = '$J1'")" "1: the job"
ran_once_in_executor on_complete "$J1" COMPLETED

# ---------------------------------------------------------------------------
log "2. pg_cancel_backend of the consumer's session while its vq_fail runs"
J2="$(q "SELECT vq_enqueue('cc_notify', '{}', metadata => '{\"sleep\": 2}')")"
assert_eq "$J2|0" "$(q "SELECT string_agg(execution_id || '|' || attempt, ',') FROM vq_take_jobs('{cc_notify}', 10)")" \
    "2: vq_take_jobs"
psql -XAtq -v ON_ERROR_STOP=1 -c "SET application_name = 'cc_consumer'" -c "SELECT vq_fail('$J2', 'no', 0)" \
    >"$TMPD/reply.out" 2>&1 &
BG_PID=$!
# cancel the reply if it is still in the callback's sleep; it may well have ended already
deadline=$(($(now_ms) + 5000))
cancelled=f
while kill -0 "$BG_PID" 2>/dev/null && (($(now_ms) < deadline)); do
    if [[ "$(q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity
                 WHERE application_name = 'cc_consumer' AND wait_event = 'PgSleep'")" == t ]]; then
        cancelled=t
        break
    fi
    sleep 0.02
done
wait "$BG_PID" || true
BG_PID=""
out="$(cat "$TMPD/reply.out")"
no_swallowed_cancel 2 "$out"
if [[ "$cancelled" == t ]]; then
    grep -q 'ERROR:  canceling statement due to user request' <<<"$out" ||
        fail_later "2: the cancelled reply did not end with the cancel: $(tr '\n' ' ' <<<"$out")"
    assert_eq RUNNING "$(q "SELECT state FROM vq.job WHERE execution_id = '$J2'")" "2: the job after a cancelled reply"
else
    [[ "$out" == t ]] || fail_later "2: vq_fail said [$(tr '\n' ' ' <<<"$out")], expected [t] alone"
    assert_eq DEAD_LETTER "$(q "SELECT state FROM vq.job WHERE execution_id = '$J2'")" "2: the job"
    ran_once_in_executor on_complete "$J2" FAILED
fi
fail_summary

# ---------------------------------------------------------------------------
log "3. pg_cancel_backend of an executor while it runs a queued listener"
J3="$(q "SELECT vq_enqueue('cc_fn', '{}', run_at => now() + interval '1 hour', metadata => '{\"sleep\": 5}')")"
q "SELECT vq_cancel('$J3')" >/dev/null
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
              AND wait_event = 'PgSleep' AND datname = current_database())" 10 "3: an executor in the listener"
EPID="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
            AND wait_event = 'PgSleep' AND datname = current_database() LIMIT 1")"
assert_eq t "$(q "SELECT pg_cancel_backend($EPID)")" "3: pg_cancel_backend of executor $EPID"
ran_once_in_executor listener "$J3" CANCELLED
fail_summary
assert_eq "$EPID" "$(q "SELECT string_agg(pid::text, ',') FROM public.cc_seen WHERE execution_id = '$J3'")" \
    "3: the executor that ran the listener"
assert_eq t "$(q "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $EPID)")" "3: executor $EPID still runs"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_log WHERE execution_id = '$J3' AND level = 'ERROR'")" \
    "3: failure lines in the job's log"

# ---------------------------------------------------------------------------
log "4. pg_terminate_backend of an executor while an on_complete runs for a job claimed visibly"
# a handler seen for the first time is claimed visibly (RUNNING committed, then run)
q "CREATE FUNCTION public.cc_first(p jsonb) RETURNS void LANGUAGE sql AS ''" >/dev/null
q "SELECT vq_register_handler('cc_first', 'public.cc_first(jsonb)', queue => 'cc')" >/dev/null
J4="$(q "SELECT vq_enqueue('cc_first', '{}', metadata => '{\"sleep\": 3}')")"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity a JOIN vq.job j ON j.worker_pid = a.pid
              WHERE j.execution_id = '$J4' AND a.wait_event = 'PgSleep')" 10 "4: the executor of $J4 in the on_complete"
EPID="$(q "SELECT worker_pid FROM vq.job WHERE execution_id = '$J4'")"
assert_eq t "$(q "SELECT pg_terminate_backend($EPID)")" "4: pg_terminate_backend of executor $EPID"
wait_state "$J4" COMPLETED 15
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED" "$(transitions "$J4")" "4: transitions of $J4"
assert_eq "1|$EPID" "$(q "SELECT count(*) || '|' || string_agg(pid::text, ',') FROM public.cc_seen
                          WHERE cb = 'on_complete' AND execution_id = '$J4'")" "4: the on_complete ran to its end once"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $EPID)" 10 "4: executor $EPID to exit"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
              AND datname = current_database() AND pid <> $EPID)" 15 "4: an executor to serve the database again"
J5="$(q "SELECT vq_enqueue('cc_fn', '{}', metadata => '{\"sleep\": 0}')")"
wait_state "$J5" COMPLETED 15
log "PASS"

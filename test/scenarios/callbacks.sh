#!/usr/bin/env bash
# callbacks.sh: interceptors and transition listeners (administrators' callbacks).
#   1. registration is for administrators only (42501 for a plain role), checks signatures,
#      names, kinds and "function or channel" (VQ106).
#   2. interceptors around a function handler, in (position, name) order, as the owner of
#      their function (not the enqueuer): on_dispatch before the handler, on_complete with the
#      outcome (COMPLETED, or FAILED and the error) before it is written.
#   3. an on_dispatch or on_complete that raises: its own writes roll back, the job runs and
#      ends as without it, an ERROR line names it in the job's log.
#   4. interceptors around a NOTIFY handler: none while the job waits (the executors never
#      dispatch it); on_dispatch at a worker's take (vq_take_jobs: queued in the take's
#      transaction, called by an executor after it committed), on_complete for the worker's
#      reply (vq_complete: queued in the worker's session, called by an executor after the
#      reply committed).
#   5. transition listeners: every transition of every job here (inline and visible
#      completion, failure, dead letter, cancel, redrive, timeout, rescue after kill -9)
#      reaches the catch-all listener exactly once, as the owner of its function; a
#      DEAD_LETTER-only listener for one handler sees exactly that; a channel listener sends
#      {"execution_id", "attempt", "kind"}.
#   6. a listener that raises: the transition stands, the job's log names the listener.
#   7. a transition rolled back (a handler cancels another job, then raises) calls nothing.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=test/scenarios/lib/listener.sh
. "$(dirname "$0")/lib/listener.sh"

OWNER="vq_cb_owner_$$" PLAIN="vq_cb_plain_$$"
TMPD="$(mktemp -d)"
declare -A LISTENER_FD=() LISTENER_PID=()
cleanup() {
    set +e
    for n in "${!LISTENER_PID[@]}"; do listener_stop "$n"; done
    q "SELECT vq_unregister_interceptor(name) FROM vq.interceptor;
       SELECT vq_unregister_transition_listener(name) FROM vq.transition_listener" >/dev/null 2>&1
    cleanup_configs
    drop_roles "$OWNER" "$PLAIN"
    rm -rf "$TMPD"
}
trap cleanup EXIT

log "setup: roles, queue cb, handlers, callback functions owned by $OWNER"
qs >/dev/null <<SQL
CREATE ROLE "$OWNER" NOLOGIN;
CREATE ROLE "$PLAIN" LOGIN;
SELECT vq_create_queue('cb', sleep_delay_ms => 100, max_concurrent_jobs => 10,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 100);
CREATE TABLE cb_seen (id bigserial PRIMARY KEY, who text, name text, execution_id uuid, kind text,
                      from_state text, to_state text, error text, handler text, cur text);
GRANT INSERT ON cb_seen TO "$OWNER";
GRANT USAGE ON SEQUENCE cb_seen_id_seq TO "$OWNER";
CREATE TABLE cb_secret (x int);           -- the enqueuer (a superuser) may read it; the owner may not
CREATE TABLE cb_effect (execution_id uuid, tag text);

-- the handlers (enqueued by the superuser running this script)
CREATE FUNCTION cb_ok(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_effect VALUES (c.execution_id, p ->> 'tag');
    IF (p ->> 'sleep') IS NOT NULL THEN PERFORM pg_sleep((p ->> 'sleep')::float8); END IF;
END \$\$;
CREATE FUNCTION cb_fail(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$ BEGIN RAISE 'nope'; END \$\$;
CREATE FUNCTION cb_cancel_then_fail(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN PERFORM vq_cancel((p ->> 'victim')::uuid); RAISE 'after the cancel'; END \$\$;
SELECT vq_register_handler('cb_ok', 'cb_ok(jsonb, vq.job_context)', queue => 'cb');
SELECT vq_register_handler('cb_fail', 'cb_fail(jsonb)', queue => 'cb', max_attempts => 2);
SELECT vq_register_handler('cb_cancel_then_fail', 'cb_cancel_then_fail(jsonb)', queue => 'cb', max_attempts => 1);
SELECT vq_register_notify_handler('cb_notify', 'cb_channel', queue => 'cb');

-- the callbacks, owned by $OWNER
CREATE FUNCTION cb_dispatch(c vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_seen (who, name, execution_id, handler, cur)
    VALUES ('dispatch', 'first', c.execution_id, c.handler, current_user);
END \$\$;
CREATE FUNCTION cb_dispatch2(c vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_seen (who, name, execution_id, handler, cur)
    VALUES ('dispatch', 'second', c.execution_id, c.handler, current_user);
    IF c.job_id LIKE 'break-dispatch%' THEN PERFORM count(*) FROM public.cb_secret; END IF;
END \$\$;
CREATE FUNCTION cb_complete(c vq.job_context, outcome text, error text) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_seen (who, name, execution_id, kind, error, handler, cur)
    VALUES ('complete', 'first', c.execution_id, outcome, error, c.handler, current_user);
    IF c.job_id LIKE 'break-complete%' THEN RAISE 'on_complete breaks'; END IF;
END \$\$;
CREATE FUNCTION cb_listen(t vq.job_transition, j vq.job) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_seen (who, name, execution_id, kind, from_state, to_state, handler, cur)
    VALUES ('listener', 'all', t.execution_id, t.kind, t.from_state, t.to_state, j.handler, current_user);
END \$\$;
CREATE FUNCTION cb_listen_dl(t vq.job_transition, j vq.job) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_seen (who, name, execution_id, kind, from_state, to_state, handler, cur)
    VALUES ('listener', 'dead', t.execution_id, t.kind, t.from_state, t.to_state, j.handler, current_user);
END \$\$;
CREATE FUNCTION cb_listen_bad(t vq.job_transition, j vq.job) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.cb_seen (who, name, execution_id, kind) VALUES ('listener', 'bad', t.execution_id, t.kind);
    IF j.job_id LIKE 'break-listener%' THEN RAISE 'listener breaks'; END IF;
END \$\$;
CREATE FUNCTION cb_wrong(c vq.job_context, x int) RETURNS void LANGUAGE sql AS 'SELECT';
ALTER FUNCTION cb_dispatch(vq.job_context) OWNER TO "$OWNER";
ALTER FUNCTION cb_dispatch2(vq.job_context) OWNER TO "$OWNER";
ALTER FUNCTION cb_complete(vq.job_context, text, text) OWNER TO "$OWNER";
ALTER FUNCTION cb_listen(vq.job_transition, vq.job) OWNER TO "$OWNER";
ALTER FUNCTION cb_listen_dl(vq.job_transition, vq.job) OWNER TO "$OWNER";
ALTER FUNCTION cb_listen_bad(vq.job_transition, vq.job) OWNER TO "$OWNER";
SQL

# expect_error SQLSTATE SQL WHAT [ROLE]
expect_error() {
    local state="$1" sql="$2" what="$3" role="${4:-}" out
    if [[ -n "$role" ]]; then
        out="$(psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SET ROLE \"$role\"" -c "$sql" 2>&1)" &&
            fail "$what: succeeded, expected $state"
    else
        out="$(psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$sql" 2>&1)" &&
            fail "$what: succeeded, expected $state"
    fi
    grep -q "ERROR:  $state:" <<<"$out" || fail "$what: expected SQLSTATE $state, got: $out"
}

# ---------------------------------------------------------------------------
log "1. registration: administrators only, checked"
expect_error 42501 "SELECT vq_register_interceptor('x', 'cb_dispatch(vq.job_context)')" \
    "a plain role registering an interceptor" "$PLAIN"
expect_error 42501 "SELECT vq_register_transition_listener('x', 'cb_listen(vq.job_transition, vq.job)')" \
    "a plain role registering a listener" "$PLAIN"
expect_error 42501 "SELECT vq_unregister_interceptor('x')" "a plain role unregistering an interceptor" "$PLAIN"
expect_error VQ106 "SELECT vq_register_interceptor('x', 'cb_wrong(vq.job_context, int)')" "a wrong on_dispatch signature"
expect_error VQ106 "SELECT vq_register_interceptor('x', NULL, 'cb_dispatch(vq.job_context)')" "a wrong on_complete signature"
expect_error VQ106 "SELECT vq_register_interceptor('x')" "an interceptor without functions"
expect_error VQ106 "SELECT vq_register_interceptor('bad name', 'cb_dispatch(vq.job_context)')" "a bad interceptor name"
expect_error VQ106 "SELECT vq_register_transition_listener('x')" "a listener with neither function nor channel"
expect_error VQ106 "SELECT vq_register_transition_listener('x', 'cb_listen(vq.job_transition, vq.job)', channel => 'c')" \
    "a listener with both function and channel"
expect_error VQ106 "SELECT vq_register_transition_listener('x', 'cb_listen(vq.job_transition, vq.job)', kinds => '{DONE}')" \
    "a listener with an unknown kind"
expect_error VQ106 "SELECT vq_register_transition_listener('x', 'cb_dispatch(vq.job_context)')" "a wrong listener signature"

# ---------------------------------------------------------------------------
log "2. interceptors around a function handler: order, role, outcome"
# positions: 'zeta' (1) runs before 'alpha' (2) although its name sorts later
qs >/dev/null <<'SQL'
SELECT vq_register_interceptor('zeta', 'cb_dispatch(vq.job_context)', 'cb_complete(vq.job_context, text, text)', 1);
SELECT vq_register_interceptor('alpha', 'cb_dispatch2(vq.job_context)', NULL, 2);
SQL
# (row security: a role sees the callbacks that run functions it owns, as pg_dump run by it does)
assert_eq "0 2" "$(q_as "$PLAIN" "SELECT count(*) FROM vq.interceptor") $(q_as "$OWNER" "SELECT count(*) FROM vq.interceptor")" \
    "interceptors a plain role and their functions' owner see"
OK1="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"ok1\"}')")"
FAIL1="$(q "SELECT vq_enqueue('cb_fail', '{}')")"
wait_state "$OK1" COMPLETED 10
wait_state "$FAIL1" DEAD_LETTER 10
assert_eq "dispatch:first,dispatch:second,complete:first" \
    "$(q "SELECT string_agg(who || ':' || name, ',' ORDER BY id) FROM cb_seen WHERE execution_id = '$OK1' AND who <> 'listener'")" \
    "interceptor calls around $OK1, in order"
assert_eq "$OWNER" "$(q "SELECT string_agg(DISTINCT cur, ',') FROM cb_seen WHERE who <> 'listener'")" \
    "the role interceptors run as"
assert_eq "COMPLETED|" "$(q "SELECT kind || '|' || coalesce(error, '') FROM cb_seen WHERE execution_id = '$OK1' AND who = 'complete'")" \
    "on_complete of a completed job"
assert_eq "FAILED|nope,FAILED|nope" \
    "$(q "SELECT string_agg(kind || '|' || error, ',' ORDER BY id) FROM cb_seen WHERE execution_id = '$FAIL1' AND who = 'complete'")" \
    "on_complete of a failing job's two attempts"
# interceptors also see jobs run inline (the handler is fast now)
for i in 1 2 3 4 5; do q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"inline\"}')" >/dev/null; done
wait_for "SELECT count(*) = 5 FROM vq.job WHERE handler = 'cb_ok' AND payload ->> 'tag' = 'inline' AND state = 'COMPLETED'" 10 \
    "5 more cb_ok jobs COMPLETED"
assert_eq 15 "$(q "SELECT count(*) FROM cb_seen s JOIN vq.job j USING (execution_id)
                    WHERE j.payload ->> 'tag' = 'inline' AND s.who <> 'listener'")" \
    "three interceptor calls for each of 5 more jobs"

# ---------------------------------------------------------------------------
log "3. an interceptor that raises changes nothing but its own writes"
BD="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"bd\"}', job_id => 'break-dispatch-1')")"
BC="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"bc\"}', job_id => 'break-complete-1')")"
wait_state "$BD" COMPLETED 10
wait_state "$BC" COMPLETED 10
assert_eq "1|1" "$(q "SELECT (SELECT count(*) FROM cb_effect WHERE tag = 'bd') || '|' || (SELECT count(*) FROM cb_effect WHERE tag = 'bc')")" \
    "the handlers' writes of the two jobs"
assert_eq "dispatch:first,complete:first" \
    "$(q "SELECT string_agg(who || ':' || name, ',' ORDER BY id) FROM cb_seen WHERE execution_id = '$BD' AND who <> 'listener'")" \
    "calls kept around $BD (alpha's on_dispatch failed: its write rolled back)"
assert_eq "dispatch:first,dispatch:second" \
    "$(q "SELECT string_agg(who || ':' || name, ',' ORDER BY id) FROM cb_seen WHERE execution_id = '$BC' AND who <> 'listener'")" \
    "calls kept around $BC (zeta's on_complete failed: its write rolled back)"
assert_sql "SELECT EXISTS (SELECT 1 FROM vq.job_log WHERE execution_id = '$BD' AND level = 'ERROR'
                             AND message ~ '^interceptor \"alpha\" \\(on_dispatch\\) failed: permission denied for table cb_secret')" \
    "the job log of $BD names the failed on_dispatch (run as $OWNER, who may not read cb_secret)"
assert_sql "SELECT EXISTS (SELECT 1 FROM vq.job_log WHERE execution_id = '$BC' AND level = 'ERROR'
                             AND message = 'interceptor \"zeta\" (on_complete) failed: on_complete breaks')" \
    "the job log of $BC names the failed on_complete"
assert_eq "0|0" "$(q "SELECT attempt_number || '|' || (SELECT count(*) FROM vq.job_transition t WHERE t.execution_id = j.execution_id AND kind = 'FAILED')
                       FROM vq.job j WHERE execution_id = '$BC'")" "$BC: one attempt, no failure"

# ---------------------------------------------------------------------------
log "4. interceptors around a NOTIFY handler"
NT="$(q "SELECT vq_enqueue('cb_notify', '{\"n\": 1}')")"
# the executors never dispatch an external handler's job: it waits for a worker, no interceptor called
assert_stays "SELECT state || '|' || (SELECT count(*) FROM cb_seen WHERE execution_id = '$NT')
                FROM vq.job WHERE execution_id = '$NT'" 1 "$NT until a worker takes it"
assert_eq "ENQUEUED|0" "$(q "SELECT state || '|' || (SELECT count(*) FROM cb_seen WHERE execution_id = '$NT')
                               FROM vq.job WHERE execution_id = '$NT'")" "$NT before the take"
# the take dispatches it: the on_dispatch calls are queued (in the take's transaction) for an
# executor, never run in the worker's session
assert_eq "$NT|0 0 on_dispatch:zeta,alpha" "$(qs <<SQL | tr '\n' ' ' | sed 's/ $//'
BEGIN;
SELECT string_agg(execution_id || '|' || attempt, ',') FROM vq_take_jobs('{cb_notify}', 10);
SELECT count(*) FROM cb_seen WHERE execution_id = '$NT';
SELECT string_agg(kind || ':' || array_to_string(callbacks, ','), ' ' ORDER BY id)
  FROM vq.callback_event WHERE execution_id = '$NT';
COMMIT;
SQL
)" "vq_take_jobs of $NT: taken; in its transaction, no interceptor called yet and the on_dispatch queued"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event WHERE execution_id = '$NT')" 10 \
    "the on_dispatch queued by the take to have run"
assert_eq "dispatch:first|$OWNER,dispatch:second|$OWNER" \
    "$(q "SELECT string_agg(who || ':' || name || '|' || cur, ',' ORDER BY id) FROM cb_seen
            WHERE execution_id = '$NT' AND who <> 'listener'")" \
    "on_dispatch at the take of $NT, in order, as $OWNER"
assert_eq t "$(q "SELECT vq_complete('$NT', 0)")" "vq_complete of $NT"
assert_eq "COMPLETED" "$(q "SELECT state FROM vq.job WHERE execution_id = '$NT'")" "$NT after the reply"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event WHERE execution_id = '$NT')" 10 \
    "the on_complete queued by the reply to have run"
assert_eq "COMPLETED|$OWNER" "$(q "SELECT kind || '|' || cur FROM cb_seen WHERE execution_id = '$NT' AND who = 'complete'")" \
    "on_complete for the reply, as $OWNER"
q "SELECT vq_unregister_interceptor('zeta'), vq_unregister_interceptor('alpha')" >/dev/null
AFTER="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"after\"}')")"
wait_state "$AFTER" COMPLETED 10
assert_eq 0 "$(q "SELECT count(*) FROM cb_seen WHERE execution_id = '$AFTER'")" "no interceptor after unregistering"

# ---------------------------------------------------------------------------
log "5. transition listeners on every path"
q "TRUNCATE cb_seen" >/dev/null
qs >/dev/null <<'SQL'
SELECT vq_register_transition_listener('all', 'cb_listen(vq.job_transition, vq.job)', queues => '{cb}');
SELECT vq_register_transition_listener('dead', 'cb_listen_dl(vq.job_transition, vq.job)',
                                       kinds => '{DEAD_LETTER}', handlers => '{cb_fail}');
SELECT vq_register_transition_listener('bad', 'cb_listen_bad(vq.job_transition, vq.job)', kinds => '{COMPLETED}');
SELECT vq_register_transition_listener('wire', channel => 'cb_transitions', kinds => '{COMPLETED}');
SQL
listener_start wire cb_transitions
START_ID="$(q "SELECT coalesce(max(id), 0) FROM vq.job_transition_data")"
# completion, visible and inline
IDS=()
for i in 1 2 3; do IDS+=("$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"l$i\"}')")"); done
IDS+=("$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"slow\", \"sleep\": 0.3}')")")
# failure, then dead letter
F2="$(q "SELECT vq_enqueue('cb_fail', '{}')")"
IDS+=("$F2")
# cancel of a future job, a redrive of a dead letter
FUT="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"future\"}', run_at => now() + interval '1 hour')")"
IDS+=("$FUT")
q "SELECT vq_cancel('$FUT')" >/dev/null
wait_state "$F2" DEAD_LETTER 10
assert_eq 1 "$(q "SELECT vq_redrive('$F2'::uuid)")" "redrive of $F2"
wait_state "$F2" DEAD_LETTER 10
for id in "${IDS[@]:0:4}"; do wait_state "$id" COMPLETED 10; done
# timeout: vq.execution_timeout_ms = 500 and a handler sleeping 3 s, one attempt left after it
set_config vq.execution_timeout_ms 500
TO="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"timeout\", \"sleep\": 3}', max_attempts => 1)")"
IDS+=("$TO")
wait_state "$TO" DEAD_LETTER 10
reset_config vq.execution_timeout_ms
# rescue: kill -9 the executor of a RUNNING job
KJ="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"killed\", \"sleep\": 30}')")"
IDS+=("$KJ")
wait_for "SELECT state = 'RUNNING' AND worker_pid IS NOT NULL FROM vq.job WHERE execution_id = '$KJ'" 10 "$KJ RUNNING"
KPID="$(q "SELECT worker_pid FROM vq.job WHERE execution_id = '$KJ'")"
kill -9 "$KPID"
sleep 0.5   # the postmaster restarts every backend; then the server accepts connections again
wait_ready 60
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job_transition WHERE execution_id = '$KJ' AND kind = 'ABANDONED')" 30 \
    "$KJ ABANDONED after the kill"
q "SELECT vq_cancel('$KJ')" >/dev/null
wait_for "SELECT state IN ('CANCELLED', 'COMPLETED') FROM vq.job WHERE execution_id = '$KJ'" 40 "$KJ to end"

# every transition of these jobs reached 'all' exactly once, as $OWNER (those recorded in this
# session, the cancel and the redrive, through an executor: wait until it has run them)
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event)" 10 "the queued listener calls to have run"
MISMATCH="$(q "WITH ids(id) AS (SELECT unnest('{$(IFS=,; echo "${IDS[*]}")}'::uuid[])),
                  t AS (SELECT execution_id, kind, from_state::text, to_state::text FROM vq.job_transition
                         WHERE execution_id IN (SELECT id FROM ids)),
                  s AS (SELECT execution_id, kind, from_state, to_state FROM cb_seen WHERE name = 'all'
                         AND execution_id IN (SELECT id FROM ids))
               SELECT coalesce(string_agg(d, '; '), '') FROM (
                 (SELECT 'missed ' || kind || ' ' || from_state || '>' || to_state d FROM (SELECT * FROM t EXCEPT ALL SELECT * FROM s) x)
                 UNION ALL
                 (SELECT 'extra ' || kind || ' ' || from_state || '>' || to_state FROM (SELECT * FROM s EXCEPT ALL SELECT * FROM t) y)) z")"
assert_eq "" "$MISMATCH" "transitions vs the catch-all listener's calls"
assert_sql "SELECT (SELECT count(*) FROM cb_seen WHERE name = 'all' AND execution_id IN
                     (SELECT unnest('{$(IFS=,; echo "${IDS[*]}")}'::uuid[]))) >= 14" \
    "the catch-all listener saw at least 14 transitions"
for k in CLAIMED COMPLETED FAILED ABANDONED CANCELLED REDRIVEN; do
    assert_sql "SELECT EXISTS (SELECT 1 FROM cb_seen WHERE name = 'all' AND kind = '$k')" "a $k transition reached the listener"
done
assert_eq "$OWNER" "$(q "SELECT string_agg(DISTINCT cur, ',') FROM cb_seen WHERE name IN ('all', 'dead')")" \
    "the role listeners run as"
assert_eq "FAILED>DEAD_LETTER,FAILED>DEAD_LETTER" \
    "$(q "SELECT string_agg(kind || '>' || to_state, ',' ORDER BY id) FROM cb_seen WHERE name = 'dead'")" \
    "the DEAD_LETTER listener of cb_fail: both dead letters of $F2 (before and after its redrive)"
listener_wait wire "\"execution_id\" : \"${IDS[0]}\"" 10
N="$(notification wire "${IDS[0]}")"
assert_eq "{\"execution_id\" : \"${IDS[0]}\", \"attempt\" : 0, \"kind\" : \"COMPLETED\"}" "$N" "the channel listener's message"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_log WHERE level = 'ERROR' AND message LIKE 'transition listener%'")" \
    "no listener failed so far"

# ---------------------------------------------------------------------------
log "6. a listener that raises: the transition stands"
LB="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"lbreak\"}', job_id => 'break-listener-1')")"
wait_state "$LB" COMPLETED 10
assert_eq 1 "$(q "SELECT count(*) FROM cb_effect WHERE tag = 'lbreak'")" "the handler's write of $LB"
assert_eq 0 "$(q "SELECT count(*) FROM cb_seen WHERE name = 'bad' AND execution_id = '$LB'")" "the failing listener's write rolled back"
assert_eq 1 "$(q "SELECT count(*) FROM cb_seen WHERE name = 'all' AND execution_id = '$LB' AND kind = 'COMPLETED'")" \
    "the other listener saw the COMPLETED transition of $LB"
assert_sql "SELECT EXISTS (SELECT 1 FROM vq.job_log WHERE execution_id = '$LB' AND level = 'ERROR'
                             AND message = 'transition listener \"bad\" (COMPLETED) failed: listener breaks')" \
    "the job log of $LB names the failed listener"

# ---------------------------------------------------------------------------
log "7. a transition that rolls back calls nothing"
VICTIM="$(q "SELECT vq_enqueue('cb_ok', '{\"tag\": \"victim\"}', run_at => now() + interval '1 hour')")"
CF="$(q "SELECT vq_enqueue('cb_cancel_then_fail', jsonb_build_object('victim', '$VICTIM'))")"
wait_state "$CF" DEAD_LETTER 10
assert_eq ENQUEUED "$(q "SELECT state FROM vq.job WHERE execution_id = '$VICTIM'")" "the victim after the handler rolled back"
assert_eq 0 "$(q "SELECT count(*) FROM cb_seen WHERE execution_id = '$VICTIM'")" "listener calls for the rolled-back cancel"
q "SELECT vq_cancel('$VICTIM')" >/dev/null
log "PASS"

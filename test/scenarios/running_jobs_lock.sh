#!/usr/bin/env bash
# running_jobs_lock.sh: vq.running_jobs_now() (callable by PUBLIC) never holds up a claim.
#   1. A job of role A runs (a handler that waits for its cancellation). Another session holds
#      an ACCESS EXCLUSIVE lock on pg_catalog.pg_auth_members, so that the privilege check of
#      a fresh non-superuser session (is it a member of A?) waits for that lock. Role P calls
#      vq.running_jobs_now() and waits there. Meanwhile a due job is enqueued: the enqueue
#      returns and the job completes within 15 s (the enqueue's commit and the executor's
#      claim take the database slot's lock, which P's call must not be holding: it copied the
#      running jobs out of shared memory before its privilege checks). P gets its answer (0
#      rows: it is not a member of A) once the catalog lock is released.
#   2. Two sessions of role P call vq.running_jobs_now() in a tight loop (pgbench) while 300
#      due jobs are enqueued: they all complete within 30 s (loose: a claim waits for no
#      caller of it), and the pollers saw no error.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

A="vq_rjl_a_$$"
P="vq_rjl_p_$$"
WORK="$(mktemp -d /tmp/vq_sc_rjl.XXXXXX)"
BENCH_PID=""

cleanup() {
    set +e
    sessions_stop                   # the lock holder's end releases whoever waits for it
    [[ -n "$BENCH_PID" ]] && kill "$BENCH_PID" 2>/dev/null && wait "$BENCH_PID" 2>/dev/null
    q "SELECT vq_cancel(execution_id) FROM vq.job WHERE handler = 'rjl_wait' AND state IN ('ENQUEUED', 'RUNNING')" >/dev/null 2>&1
    drop_roles "$A" "$P"
    rm -rf "$WORK"
}
trap cleanup EXIT

log "setup: roles $A (enqueues) and $P (polls); a handler that runs until cancelled, a quick one"
qs >/dev/null <<SQL
CREATE ROLE "$A";
CREATE ROLE "$P";
CREATE FUNCTION public.rjl_wait(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    FOR i IN 1 .. 12000 LOOP
        EXIT WHEN vq_job_cancelled();
        PERFORM pg_sleep(0.05);
    END LOOP;
END \$\$;
CREATE FUNCTION public.rjl_quick(p jsonb) RETURNS void LANGUAGE sql AS 'SELECT';
GRANT EXECUTE ON FUNCTION public.rjl_wait(jsonb) TO "$A";
SELECT vq_register_handler('rjl_wait', 'public.rjl_wait(jsonb)');
SELECT vq_register_handler('rjl_quick', 'public.rjl_quick(jsonb)');
-- poll(query, secs): whether query returned true within secs (a wait with a deadline inside one
-- statement, for a session that must not open another connection meanwhile)
CREATE FUNCTION public.rjl_poll(query text, secs float8) RETURNS boolean LANGUAGE plpgsql AS \$\$
DECLARE
    ok boolean;
    deadline timestamptz := clock_timestamp() + secs * interval '1 second';
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();   -- pg_stat_activity as it is now, not as first read
        EXECUTE query INTO ok;
        IF coalesce(ok, false) OR clock_timestamp() > deadline THEN
            RETURN coalesce(ok, false);
        END IF;
        PERFORM pg_sleep(0.02);
    END LOOP;
END \$\$;
SQL
waiting="$(q_as "$A" "SELECT vq_enqueue('rjl_wait', '{}')")"
wait_for "SELECT count(*) = 1 FROM vq.running_jobs_now() WHERE execution_id = '$waiting'" 15 "$A's job running"

# ---------------------------------------------------------------------------
log "1. a caller waiting inside its privilege check holds up no claim"
# Every session of this step connects before the catalog lock is taken: a backend that starts
# while it is held may itself wait for it (building its relation cache reads pg_auth_members
# when a catalog change, such as autovacuum's, removed the cached copy).
session_start "$WORK" observer "vq_rjl_observer_$$"
session_start "$WORK" enqueuer "vq_rjl_enqueuer_$$"
session_start "$WORK" poller "vq_rjl_poller_$$"
session_send poller "SET ROLE \"$P\"; SELECT 'ready';"
for s in observer enqueuer; do
    session_send "$s" "SELECT 'ready';"
done
for s in observer enqueuer poller; do
    session_wait_line "$s" ready 10 >/dev/null
done
session_start "$WORK" locker "vq_rjl_locker_$$"
session_send locker "BEGIN; LOCK TABLE pg_catalog.pg_auth_members IN ACCESS EXCLUSIVE MODE; SELECT 'locked';"
session_wait_line locker locked 10 >/dev/null

session_send poller "SELECT 'rows=' || count(*) FROM vq.running_jobs_now();"
session_send observer "SELECT 'poller waiting: ' || public.rjl_poll(\$\$SELECT wait_event_type = 'Lock' AND wait_event = 'relation'
    AND query LIKE '%running_jobs_now%' FROM pg_stat_activity WHERE application_name = 'vq_rjl_poller_$$'\$\$, 10);"
assert_eq "poller waiting: true" "$(session_wait_line observer 'poller waiting: (true|false)' 15)" \
    "$P's vq.running_jobs_now() waiting for the catalog lock in its privilege check"

t0="$(now_ms)"
session_send enqueuer "SELECT vq_enqueue('rjl_quick', '{}');"
session_send enqueuer "SELECT 'committed';"
session_send observer "SELECT 'completed: ' || public.rjl_poll(\$\$SELECT EXISTS (SELECT 1 FROM vq.job
    WHERE handler = 'rjl_quick' AND state = 'COMPLETED')\$\$, 15);"
if [[ "$(session_wait_line observer 'completed: (true|false)' 20)" != "completed: true" ]]; then
    grep -qx committed "$WORK/enqueuer.out" &&
        fail "a job enqueued while $P's vq.running_jobs_now() waited in its privilege check was not claimed within 15 s"
    fail "an enqueue's commit did not return within 15 s while $P's vq.running_jobs_now() waited in its privilege check"
fi
log "   a job enqueued meanwhile completed after $(($(now_ms) - t0)) ms"
session_send observer "SELECT pg_stat_clear_snapshot(); SELECT 'poller now: ' || wait_event_type
    FROM pg_stat_activity WHERE application_name = 'vq_rjl_poller_$$';"
assert_eq "poller now: Lock" "$(session_wait_line observer 'poller now: .*' 10)" \
    "$P still waiting for the catalog lock after the job was claimed"

session_send locker "COMMIT;"
session_end locker
assert_eq "rows=0" "$(session_wait_line poller 'rows=.*' 15)" \
    "rows $P (not a member of $A) got from vq.running_jobs_now()"
for s in poller enqueuer observer; do
    session_end "$s"
done

# ---------------------------------------------------------------------------
log "2. two sessions polling vq.running_jobs_now() in a tight loop while 300 jobs run"
cat >"$WORK/poll.sql" <<EOF
SET ROLE "$P";
SELECT count(*) FROM vq.running_jobs_now();
EOF
"$VQ_PG_BIN/pgbench" -n -c 2 -j 2 -T 120 -f "$WORK/poll.sql" >"$WORK/pgbench.out" 2>&1 &
BENCH_PID=$!
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE application_name = 'pgbench' AND datname = current_database()" \
    10 "the two pollers connected"
t0="$(now_ms)"
q "SELECT vq_enqueue('rjl_quick', jsonb_build_object('i', i)) FROM generate_series(1, 300) i" >/dev/null
wait_for "SELECT count(*) = 301 FROM vq.job WHERE handler = 'rjl_quick' AND state = 'COMPLETED'" 30 \
    "300 more jobs completed while $P polls"
log "   300 jobs completed in $(($(now_ms) - t0)) ms with two pollers"
kill -TERM "$BENCH_PID" 2>/dev/null || true
wait "$BENCH_PID" || true
BENCH_PID=""
# (pgbench ended by a signal prints no summary; a client's error is printed when it happens)
if grep -qiE 'error|aborted' "$WORK/pgbench.out"; then
    fail "a poller failed: $(grep -iE 'error|aborted' "$WORK/pgbench.out" | head -n 5)"
fi

assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$waiting')")" "cancelling $A's job"
wait_state "$waiting" CANCELLED 15
log "PASS"

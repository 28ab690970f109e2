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
LOCKER_PID="" LOCKER_FD="" POLLER_PID="" BENCH_PID=""

cleanup() {
    set +e
    [[ -n "$LOCKER_FD" ]] && exec {LOCKER_FD}>&-
    for pid in "$LOCKER_PID" "$POLLER_PID" "$BENCH_PID"; do
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    done
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
SQL
waiting="$(q_as "$A" "SELECT vq_enqueue('rjl_wait', '{}')")"
wait_for "SELECT count(*) = 1 FROM vq.running_jobs_now() WHERE execution_id = '$waiting'" 15 "$A's job running"

# ---------------------------------------------------------------------------
log "1. a caller waiting inside its privilege check holds up no claim"
mkfifo "$WORK/locker.in"
psql -XAtq <"$WORK/locker.in" >"$WORK/locker.out" 2>&1 &
LOCKER_PID=$!
exec {LOCKER_FD}>"$WORK/locker.in"
printf "BEGIN;\nLOCK TABLE pg_catalog.pg_auth_members IN ACCESS EXCLUSIVE MODE;\nSELECT 'locked';\n" >&"$LOCKER_FD"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE relation = 'pg_catalog.pg_auth_members'::regclass
                            AND mode = 'AccessExclusiveLock' AND granted)" 10 "the lock on pg_auth_members"

PGAPPNAME="vq_rjl_poller_$$" psql -XAtq -v ON_ERROR_STOP=1 -c "SET ROLE \"$P\"" \
    -c "SELECT count(*) FROM vq.running_jobs_now()" >"$WORK/poller.out" 2>&1 &
POLLER_PID=$!
wait_for "SELECT wait_event_type = 'Lock' AND wait_event = 'relation' AND query LIKE '%running_jobs_now%'
            FROM pg_stat_activity WHERE application_name = 'vq_rjl_poller_$$'" 10 \
    "$P's vq.running_jobs_now() waiting for the catalog lock in its privilege check"

# (the enqueue's commit lowers a claim position under the slot's lock: bounded by timeout,
# since a backend waiting for an LWLock cannot be cancelled)
t0="$(now_ms)"
quick="$(timeout 15 psql -XAtq -v ON_ERROR_STOP=1 -c "SELECT vq_enqueue('rjl_quick', '{}')")" ||
    fail "an enqueue did not return within 15 s while $P's vq.running_jobs_now() waited in its privilege check"
wait_state "$quick" COMPLETED 15
log "   a job enqueued meanwhile completed after $(($(now_ms) - t0)) ms"
assert_eq "Lock" "$(q "SELECT wait_event_type FROM pg_stat_activity WHERE application_name = 'vq_rjl_poller_$$'")" \
    "$P still waiting for the catalog lock while the job was claimed"

printf "COMMIT;\n" >&"$LOCKER_FD"
exec {LOCKER_FD}>&-
LOCKER_FD=""
wait "$LOCKER_PID" || fail "the lock holder failed: $(cat "$WORK/locker.out")"
LOCKER_PID=""
wait "$POLLER_PID" || fail "$P's vq.running_jobs_now() failed: $(cat "$WORK/poller.out")"
POLLER_PID=""
assert_eq 0 "$(cat "$WORK/poller.out")" "rows $P (not a member of $A) got from vq.running_jobs_now()"

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

#!/usr/bin/env bash
# first_job_dropped_role.sh: the first job a fresh executor meets may belong to a role dropped
# since its enqueue. The database is fresh, so its executors have run nothing yet; a job of a
# role dropped (from another database) before the job is due, of a handler never run before
# (so it is claimed visibly), ends DEAD_LETTER with "role ... no longer exists", and the
# server does not restart (no vq_job process died on a signal: before, the executor crashed
# writing the logs of a run that never began).
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

ROLE="vq_fd_$$"
SERVER_LOG="${VQ_CLUSTER_DIR:?}/server.log"
cleanup() {
    set +e
    drop_roles "$ROLE"
}
trap cleanup EXIT

log "setup: a role, a handler no executor has run"
qs >/dev/null <<SQL
CREATE ROLE "$ROLE";
CREATE FUNCTION fd_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
GRANT EXECUTE ON FUNCTION fd_noop(jsonb) TO "$ROLE";
SELECT vq_register_handler('fd_noop', 'fd_noop(jsonb)');
SQL
[[ "$(q "SELECT count(*) FROM vq.job")" == 0 ]] || fail "the database is not fresh: it has jobs"
log_start=$(($(stat -c %s "$SERVER_LOG") + 1))
id="$(q_as "$ROLE" "SELECT vq_enqueue('fd_noop', '{}', now() + interval '3 seconds', max_attempts => 1)")"
oid="$(q "SELECT oid FROM pg_roles WHERE rolname = '$ROLE'")"
q "REVOKE EXECUTE ON FUNCTION fd_noop(jsonb) FROM \"$ROLE\"" >/dev/null
psql -XAtq -v ON_ERROR_STOP=1 -d postgres -c "DROP ROLE \"$ROLE\"" || fail "DROP ROLE from the postgres database failed"
[[ "$(q "SELECT state FROM vq.job WHERE execution_id = '$id'")" == ENQUEUED ]] ||
    fail "the role was dropped too late: job $id is already $(job_state "$id")"

log "the job becomes due: the first an executor of this database runs"
wait_state "$id" DEAD_LETTER 15
st="$(job_state "$id")"
[[ "$st" == "DEAD_LETTER|0|role $oid that enqueued the job no longer exists" ]] ||
    fail "expected DEAD_LETTER saying role $oid no longer exists, found '$st'"
died="$(tail -c +"$log_start" "$SERVER_LOG" | grep -E 'vq_job [a-z]+" \(PID [0-9]+\) was terminated by signal' || true)"
[[ -z "$died" ]] || fail "a vq_job process died: $died"
log "PASS"

#!/usr/bin/env bash
# worker_version.sh: the executors run jobs only while the installed extension version is the
# version of the loaded library. The installed version is changed by hand (UPDATE pg_extension,
# as superuser: what a half-done upgrade looks like to the executors):
#   - within 3 s of the change this database has no executor, the server log has a WARNING
#     naming both versions, and a job enqueued meanwhile stays ENQUEUED for 2 s;
#   - with the version restored, executors come back (the launcher retries every 10 s) and the
#     job completes within 15 s, without a server restart.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"

VERSION="$(q "SELECT extversion FROM pg_extension WHERE extname = 'vq_job'")"
[[ -n "$VERSION" ]] || fail "vq_job is not installed in $PGDATABASE"
restore() {
    local rc=$?
    q "UPDATE pg_extension SET extversion = '$VERSION' WHERE extname = 'vq_job'" >/dev/null 2>&1 || true
    exit "$rc"
}
trap restore EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

SERVER_LOG="${VQ_CLUSTER_DIR:?}/server.log"
EXECUTORS="SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
             AND backend_type = 'vq_job executor'"

log "setup: a queue and a handler; executors running"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('verq', sleep_delay_ms => 200);
CREATE TABLE ver_runs (n int PRIMARY KEY);
CREATE FUNCTION h_ver(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO ver_runs VALUES ((payload->>'n')::int) $$;
SELECT vq_register_handler('ver', 'h_ver(jsonb, vq.job_context)', queue => 'verq');
SQL
q "SELECT vq_enqueue('ver', '{\"n\": 1}')" >/dev/null
wait_for "SELECT count(*) = 1 FROM ver_runs" 10 "a job runs while the versions match"
wait_for "SELECT ($EXECUTORS) > 0" 10 "executors running in this database"

log "installed version changed to 0.0.0-mismatch: the executors stop"
q "UPDATE pg_extension SET extversion = '0.0.0-mismatch' WHERE extname = 'vq_job'" >/dev/null
wait_for "SELECT ($EXECUTORS) = 0" 3 "no executor in this database within 3 s of the version change"
grep -q "extension vq_job is installed at version 0.0.0-mismatch in this database, but the loaded library is version $VERSION" \
    "$SERVER_LOG" || fail "no WARNING naming both versions in the server log $SERVER_LOG"
q "SELECT vq_enqueue('ver', '{\"n\": 2}')" >/dev/null
assert_stays "SELECT count(*) FROM ver_runs" 2 "runs while the versions differ"
assert_eq ENQUEUED "$(q "SELECT state FROM vq.job WHERE payload->>'n' = '2'")" "job enqueued during the mismatch"

log "version restored: executors come back and run the job"
q "UPDATE pg_extension SET extversion = '$VERSION' WHERE extname = 'vq_job'" >/dev/null
wait_for "SELECT count(*) = 2 FROM ver_runs" 15 "the waiting job completes within 15 s of the version being restored"
log "PASS"

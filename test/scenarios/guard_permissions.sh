#!/usr/bin/env bash
# guard_permissions.sh: only a role allowed to run a database-level statement stops the executors.
#   A role that may not DROP, RENAME or copy the served database (no ownership, no CREATEDB;
#   then CREATEDB but neither owner nor a template) gets PostgreSQL's own error at once, and
#   the database's executors go on: the same processes, and a job enqueued afterwards runs.
#   The owner's own statement (a RENAME there and back) still stops and restarts them.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

STRANGER="vq_gp_stranger_$$"
CREATOR="vq_gp_creator_$$"
DB="$PGDATABASE"

cleanup() {
    set +e
    PGDATABASE=postgres drop_roles "$STRANGER" "$CREATOR"
}
trap cleanup EXIT

executors() {
    q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
        WHERE backend_type = 'vq_job executor' AND datname = current_database()"
}
# as ROLE SQL: run SQL from the postgres database as ROLE; prints "SQLSTATE|message" of the error.
as() {
    local out
    out="$(psql -XAtq -U "$1" -d postgres -v ON_ERROR_STOP=1 -v VERBOSITY=sqlstate -c "$2" 2>&1)" && {
        echo "no error"
        return
    }
    echo "$out"
}

log "setup: roles $STRANGER (LOGIN) and $CREATOR (LOGIN CREATEDB); a handler"
q "CREATE ROLE \"$STRANGER\" LOGIN; CREATE ROLE \"$CREATOR\" LOGIN CREATEDB" -d postgres >/dev/null
qs >/dev/null <<'SQL'
CREATE TABLE gp_done (n int);
CREATE FUNCTION public.gp_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.gp_done VALUES ((p ->> 'n')::int) $$;
SELECT vq_register_handler('gp_record', 'public.gp_record(jsonb)');
SQL
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
           AND datname = current_database()" 20 "two executors serving $DB"
before="$(executors)"

log "statements the roles may not run fail at once, with PostgreSQL's errors"
check() { # ROLE SQL EXPECTED_SQLSTATE
    local start out
    start="$(now_ms)"
    out="$(as "$1" "$2")"
    [[ "$out" == *"$3"* ]] || fail "$1: $2: expected SQLSTATE $3, got [$out]"
    (($(now_ms) - start < 2000)) || fail "$1: $2 took $(($(now_ms) - start)) ms (it waited for the executors?)"
}
check "$STRANGER" "DROP DATABASE \"$DB\"" 42501
check "$STRANGER" "ALTER DATABASE \"$DB\" RENAME TO \"${DB}_x\"" 42501
check "$STRANGER" "CREATE DATABASE \"${DB}_copy\" TEMPLATE \"$DB\"" 42501
check "$CREATOR" "CREATE DATABASE \"${DB}_copy\" TEMPLATE \"$DB\"" 42501
check "$CREATOR" "ALTER DATABASE \"$DB\" RENAME TO \"${DB}_x\"" 42501

log "the executors went on"
assert_eq "$before" "$(executors)" "executor processes of $DB after the refused statements"
id="$(q "SELECT vq_enqueue('gp_record', '{\"n\": 1}')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 5 "a job enqueued after them COMPLETED"

log "the owner's RENAME (there and back) stops the executors, which come back"
psql -XAtq -d postgres -v ON_ERROR_STOP=1 -c "ALTER DATABASE \"$DB\" RENAME TO \"${DB}_x\"" \
    -c "ALTER DATABASE \"${DB}_x\" RENAME TO \"$DB\"" >/dev/null
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
           AND datname = current_database()" 20 "two executors serving $DB again"
[[ "$(executors)" != "$before" ]] || fail "the owner's RENAME did not restart the executors"
id="$(q "SELECT vq_enqueue('gp_record', '{\"n\": 2}')")"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 5 "a job enqueued after the RENAME COMPLETED"
log "PASS"

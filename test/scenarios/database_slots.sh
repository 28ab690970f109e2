#!/usr/bin/env bash
# database_slots.sh: only databases with vq_job keep a vq.max_databases slot.
#   Creates vq.max_databases + 2 databases without the extension (any role with CREATEDB
#   could); once the launcher has probed them (they give their slots back), CREATE EXTENSION
#   in one more database still gets it served: its executors start within 5 s, and a job there
#   completes. The databases are dropped at the end.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

PREFIX="vq_ds_$$"
n="$(q "SHOW vq.max_databases")"
count=$((n + 2))

cleanup() {
    set +e
    for ((i = 0; i <= count; i++)); do
        dropdb --if-exists --force "${PREFIX}_$i" >/dev/null 2>&1
    done
}
trap cleanup EXIT

log "creating $count databases without vq_job (vq.max_databases = $n)"
for ((i = 1; i <= count; i++)); do
    createdb "${PREFIX}_$i" || fail "createdb ${PREFIX}_$i failed"
done
# each is probed (an executor starts, finds no extension, exits) and gives its slot back
wait_for "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
           AND datname LIKE '${PREFIX}\\_%'" 30 "the probes of the new databases to end"

log "CREATE EXTENSION in one more database"
createdb "${PREFIX}_0" || fail "createdb ${PREFIX}_0 failed"
t0="$(now_ms)"
psql -XAtq -v ON_ERROR_STOP=1 -d "${PREFIX}_0" -c "CREATE EXTENSION vq_job" || fail "CREATE EXTENSION failed"
wait_for "SELECT count(*) >= 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '${PREFIX}_0'" 5 \
    "executors for ${PREFIX}_0 (all $count other databases were created before it)"
log "ok: executors serve ${PREFIX}_0 $(($(now_ms) - t0)) ms after CREATE EXTENSION"
psql -XAtq -v ON_ERROR_STOP=1 -d "${PREFIX}_0" >/dev/null <<'SQL'
CREATE FUNCTION ds_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('ds_noop', 'ds_noop(jsonb)');
SQL
id="$(psql -XAtq -v ON_ERROR_STOP=1 -d "${PREFIX}_0" -c "SELECT vq_enqueue('ds_noop', '{}')")"
PGDATABASE="${PREFIX}_0" wait_state "$id" COMPLETED 10
log "PASS"

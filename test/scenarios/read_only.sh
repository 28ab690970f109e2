#!/usr/bin/env bash
# read_only.sh: with default_transaction_read_only = on (how an HA tool fences a promoted node
# until the old primary is known down), the workers stay idle without an error; when it is
# turned off, they start and run what is due.
#   - on: this database's executors exit (a LOG line, no ERROR) and none is started for 3 s;
#     a due job stays ENQUEUED;
#   - off: executors are back and the job COMPLETED within 10 s;
#   - no vq_job process logged an ERROR meanwhile (before the fix, every executor start failed
#     with "cannot execute SELECT FOR UPDATE in a read-only transaction", once a second).
# The script's own sessions write with PGOPTIONS default_transaction_read_only=off.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
export PGOPTIONS="${PGOPTIONS:-} -c default_transaction_read_only=off"

SERVER_LOG="${VQ_CLUSTER_DIR:?}/server.log"
LOG_START=$(($(stat -c %s "$SERVER_LOG" 2>/dev/null || echo 0) + 1))
# (not set_config: the new sessions it checks with are ours, which override the setting)
read_only() { # on|off
    if [[ "$1" == on ]]; then
        q "ALTER SYSTEM SET default_transaction_read_only = on" >/dev/null
    else
        q "ALTER SYSTEM RESET default_transaction_read_only" >/dev/null
    fi
    q "SELECT pg_reload_conf()" >/dev/null
}
cleanup() {
    set +e
    read_only off
}
trap cleanup EXIT

executors() { q "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()"; }

log "setup: a handler"
q "CREATE FUNCTION ro_noop(p jsonb) RETURNS void LANGUAGE sql AS ''" >/dev/null
q "SELECT vq_register_handler('ro_noop', 'ro_noop(jsonb)')" >/dev/null
wait_for "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 "executors"

log "default_transaction_read_only = on: idle"
read_only on
wait_for "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 \
    "no executor while transactions are read-only"
J="$(q "SELECT vq_enqueue('ro_noop', '{}')")"
assert_stays "SELECT count(*) || '|' || (SELECT state FROM vq.job WHERE execution_id = '$J')
                FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()" 3 \
    "no executor and the job ENQUEUED while read-only"
assert_eq "0|ENQUEUED" "$(executors)|$(q "SELECT state FROM vq.job WHERE execution_id = '$J'")" "executors|job while read-only"

log "default_transaction_read_only = off: jobs run"
read_only off
wait_state "$J" COMPLETED 10

errors="$(tail -c +"$LOG_START" "$SERVER_LOG" | grep -E 'read-only transaction|exited with exit code 1' || true)"
[[ -z "$errors" ]] || fail "vq_job processes failed while read-only: $(head -5 <<<"$errors")"
log "PASS"

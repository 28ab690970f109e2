#!/usr/bin/env bash
# preload_required.sh: vq_job works only from shared_preload_libraries.
#   1. In the test cluster (PGHOST/PGPORT, vq_job preloaded): the vq.* settings exist
#      (SHOW works, a PGC_SIGHUP one cannot be SET in a session) and the "vq" prefix is
#      reserved (SET vq.no_such_setting fails).
#   2. In a second throwaway cluster WITHOUT shared_preload_libraries: CREATE EXTENSION vq_job,
#      LOAD 'vq_job' and session_preload_libraries = 'vq_job' are each refused with
#      "vq_job must be loaded via shared_preload_libraries", and nothing is left installed.
# Exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

: "${PGHOST:?}" "${PGPORT:?}" "${PGDATABASE:?}" "${VQ_REPO_ROOT:?}"
# shellcheck source=../../scripts/lib.sh
. "$VQ_REPO_ROOT/scripts/lib.sh"

MESSAGE="vq_job must be loaded via shared_preload_libraries"

# expect_error DESCRIPTION SQLSTATE PATTERN -- PSQL-ARGS...: psql must fail, and its
# (verbose) error output must show SQLSTATE and match the extended regex PATTERN.
expect_error() {
    local what="$1" code="$2" pattern="$3" out rc=0
    shift 4
    out="$(psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "$@" 2>&1)" || rc=$?
    ((rc != 0)) || fail "$what: expected an error, but it succeeded: $out"
    grep -qE "(ERROR|FATAL): +$code:" <<<"$out" || fail "$what: expected SQLSTATE $code, got: $out"
    grep -qE "$pattern" <<<"$out" || fail "$what: expected a message matching /$pattern/, got: $out"
    log "ok: $what ($code)"
}

# ---------------------------------------------------------------------------
log "test cluster: vq.* settings and the reserved prefix"
timeout_ms="$(psql -X -q -v ON_ERROR_STOP=1 -At -c 'SHOW vq.execution_timeout_ms')" ||
    fail "SHOW vq.execution_timeout_ms failed"
[[ "$timeout_ms" =~ ^[0-9]+(ms|s|min|h|d)?$ ]] || fail "SHOW vq.execution_timeout_ms printed '$timeout_ms'"
log "ok: SHOW vq.execution_timeout_ms = $timeout_ms"
unit="$(psql -X -q -v ON_ERROR_STOP=1 -At -c \
    "SELECT unit || '/' || context FROM pg_settings WHERE name = 'vq.execution_timeout_ms'")"
[[ "$unit" == ms/sighup ]] || fail "vq.execution_timeout_ms: expected unit ms and context sighup, got '$unit'"
expect_error "SET vq.no_such_setting = 1 (reserved prefix)" 42602 '"vq" is a reserved prefix' \
    -- -c 'SET vq.no_such_setting = 1'
expect_error "SET vq.execution_timeout_ms in a session (sighup)" 55P02 'parameter "vq\.execution_timeout_ms" cannot be changed now' \
    -- -c 'SET vq.execution_timeout_ms = 1000'

# ---------------------------------------------------------------------------
MAIN_ENV="$(declare -p PGHOST PGPORT PGUSER 2>/dev/null || true)"
SECOND_DIR="$(mktemp -d /tmp/vq_job.nopreload.XXXXXX)"
cleanup() {
    set +e
    vq_cluster_destroy "$SECOND_DIR" >/dev/null 2>&1
    rm -rf "$SECOND_DIR"
}
trap cleanup EXIT
port="$(vq_free_port)"
log "second cluster without shared_preload_libraries, port $port"
# vq_cluster_start exports PGHOST/PGPORT for the new cluster; keep ours and use its values
# explicitly below.
VQ_NO_PRELOAD=1 vq_cluster_start "$SECOND_DIR" "$port" "fsync = off" >"$SECOND_DIR.start.log" 2>&1 ||
    { cat "$SECOND_DIR.start.log" >&2; rm -f "$SECOND_DIR.start.log"; fail "could not start the second cluster"; }
rm -f "$SECOND_DIR.start.log"
SECOND_HOST="$PGHOST"
SECOND_PORT="$PGPORT"
eval "$MAIN_ENV"
[[ "$SECOND_PORT" == "$port" && "$SECOND_PORT" != "$PGPORT" ]] ||
    fail "the second cluster is not on its own port ($SECOND_PORT vs $PGPORT)"
second() { psql -h "$SECOND_HOST" -p "$SECOND_PORT" -U postgres "$@"; }
preload="$(second -X -q -At -d postgres -c 'SHOW shared_preload_libraries')"
[[ -z "$preload" ]] || fail "the second cluster preloads '$preload'"

expect_error "CREATE EXTENSION vq_job without preload" 55000 "$MESSAGE" \
    -- -h "$SECOND_HOST" -p "$SECOND_PORT" -U postgres -d postgres -c 'CREATE EXTENSION vq_job'
expect_error "LOAD 'vq_job' without preload" 55000 "$MESSAGE" \
    -- -h "$SECOND_HOST" -p "$SECOND_PORT" -U postgres -d postgres -c "LOAD 'vq_job'"
# A failed load must not leave a half-initialised library behind: a second attempt in the
# same session is refused the same way, and so is CREATE EXTENSION after it.
out="$(second -X -q -v ON_ERROR_STOP=0 -v VERBOSITY=verbose -d postgres \
        -c "LOAD 'vq_job'" -c "LOAD 'vq_job'" -c 'CREATE EXTENSION vq_job' 2>&1 || true)"
n="$(grep -cE "ERROR: +55000: $MESSAGE" <<<"$out" || true)"
((n == 3)) || fail "LOAD, LOAD, CREATE EXTENSION in one session: expected 3 refusals, got $n: $out"
log "ok: LOAD, LOAD, CREATE EXTENSION in one session are each refused"
out="$(PGOPTIONS='-c session_preload_libraries=vq_job' second -X -q -v VERBOSITY=verbose -d postgres -c 'SELECT 1' 2>&1)" &&
    fail "a session with session_preload_libraries=vq_job started: $out"
grep -qE "FATAL: +$MESSAGE" <<<"$out" ||
    fail "session_preload_libraries=vq_job: expected FATAL '$MESSAGE', got: $out"
log "ok: session_preload_libraries = 'vq_job' is refused at connection"

installed="$(second -X -q -At -d postgres -c "SELECT count(*) FROM pg_extension WHERE extname = 'vq_job'")"
[[ "$installed" == 0 ]] || fail "vq_job is installed in the second cluster after the refusals"
schema="$(second -X -q -At -d postgres -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'vq'")"
[[ "$schema" == 0 ]] || fail "schema vq exists in the second cluster after the refused CREATE EXTENSION"
log "ok: nothing was installed"

log "PASS: preload required"

# shellcheck shell=bash
# test/scenarios/lib/common.sh — helpers shared by the scenario scripts.
# Source it (after `set -euo pipefail`):  . "$(dirname "$0")/lib/common.sh"
#
#   fail MSG...                 print "FAIL: MSG" on stderr and exit 1
#   log MSG...                  print "-- MSG" (a step marker)
#   q SQL [psql args...]        run SQL in a new session; print the unaligned tuples
#                               (-XAtq, ON_ERROR_STOP); a SQL error fails the script
#   assert_eq EXPECTED ACTUAL WHAT
#                               fail "WHAT: expected ..., found ..." unless equal
#   assert_sql SQL WHAT         fail unless SQL returns t (prints what it returned)
#   qs [psql args...]           run the SQL script read from stdin in one new session
#                               (-XAtq, ON_ERROR_STOP); prints what it returns
#   wait_for SQL TIMEOUT_SECS WHAT
#                               poll SQL (returning a boolean) every 20 ms until it
#                               returns t; after TIMEOUT_SECS fail naming WHAT and the
#                               last value (or error) seen
#   assert_stays SQL SECS WHAT  poll SQL every 20 ms for SECS seconds; fail as soon as
#                               it returns something other than what it returned first
#                               (e.g. a counter that must not move)
#   set_config NAME VALUE       ALTER SYSTEM SET + pg_reload_conf(); waits until a NEW
#                               session sees VALUE (as current_setting or as the raw
#                               pg_settings.setting, so '500' and '500ms' both work)
#   reset_config NAME           restores NAME to what it was before the first
#                               set_config (an ALTER SYSTEM value that was already
#                               there is put back; otherwise ALTER SYSTEM RESET) and
#                               waits until a new session sees it
#   cleanup_configs             reset_config of every setting changed by set_config;
#                               never fails (use it from an EXIT trap)
#   now_ms                      wall-clock milliseconds since the epoch
#
# set_config must run in the main shell (not in $(...) or a pipeline), because it
# remembers what to restore in shell variables.
#
# The background workers reload their configuration on SIGHUP too, a moment after a new
# session does; a setting that they read takes effect for them within their next loop.

: "${PGDATABASE:?PGDATABASE must name the scenario database}"

VQ_WAIT_POLL_SECS="${VQ_WAIT_POLL_SECS:-0.02}"

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

log() { printf -- '-- %s\n' "$*"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

q() {
    local sql="$1"
    shift
    psql -XAtq -v ON_ERROR_STOP=1 "$@" -c "$sql"
}

qs() {
    psql -XAtq -v ON_ERROR_STOP=1 "$@" -f -
}

assert_eq() { # EXPECTED ACTUAL WHAT
    if [[ "$1" != "$2" ]]; then
        fail "$3: expected [$1], found [$2]"
    fi
}

assert_sql() { # SQL WHAT
    local v
    v="$(q "$1")" || fail "$2: query failed: $1"
    [[ "$v" == t ]] || fail "$2: expected t, got [$v] from: $1"
}

# wait_for SQL TIMEOUT_SECS WHAT
wait_for() {
    local sql="$1" timeout="${2:-10}" what="${3:-$1}" v="" deadline
    deadline=$(($(date +%s%N) + $(awk -v t="$timeout" 'BEGIN { printf "%.0f", t * 1e9 }')))
    while :; do
        v="$(psql -XAtq -v ON_ERROR_STOP=1 -c "$sql" 2>&1)" || v="(error) $v"
        [[ "$v" == t ]] && return 0
        if (($(date +%s%N) >= deadline)); then
            fail "timed out after ${timeout}s waiting for: $what (last value: [$v]; query: $sql)"
        fi
        sleep "$VQ_WAIT_POLL_SECS"
    done
}

# assert_stays SQL SECS WHAT
assert_stays() {
    local sql="$1" secs="$2" what="$3" first v deadline
    deadline=$(($(date +%s%N) + $(awk -v t="$secs" 'BEGIN { printf "%.0f", t * 1e9 }')))
    first="$(q "$sql")" || fail "$what: query failed: $sql"
    while (($(date +%s%N) < deadline)); do
        sleep "$VQ_WAIT_POLL_SECS"
        v="$(q "$sql")" || fail "$what: query failed: $sql"
        [[ "$v" == "$first" ]] || fail "$what: changed from [$first] to [$v] (query: $sql)"
    done
}

# ---- settings ---------------------------------------------------------------------------
declare -gA VQ_CONFIG_ORIG=()        # name -> value a new session saw before set_config
declare -gA VQ_CONFIG_ORIG_AUTO=()   # name -> 1 if that value came from ALTER SYSTEM
declare -ga VQ_CONFIG_NAMES=()       # names, in the order first changed

_vq_sql_literal() { # VALUE -> 'VALUE' with quotes doubled
    printf "'%s'" "${1//\'/\'\'}"
}

# _vq_wait_setting NAME VALUE: a new session sees NAME = VALUE (displayed or raw).
_vq_wait_setting() {
    local name lit
    name="$(_vq_sql_literal "$1")"
    lit="$(_vq_sql_literal "$2")"
    wait_for "SELECT current_setting($name, true) = $lit
                  OR EXISTS (SELECT 1 FROM pg_settings WHERE name = $name AND setting = $lit)" \
        10 "setting $1 = '$2' visible in a new session"
}

set_config() { # NAME VALUE
    local name="$1" value="$2" row
    if [[ -z "${VQ_CONFIG_ORIG[$name]+x}" ]]; then
        row="$(q "SELECT current_setting($(_vq_sql_literal "$name")) || '|' ||
                         (coalesce(sourcefile, '') LIKE '%postgresql.auto.conf')::int
                  FROM pg_settings WHERE name = $(_vq_sql_literal "$name")")" ||
            fail "set_config $name: cannot read its current value"
        [[ -n "$row" ]] || fail "set_config: unknown setting $name"
        VQ_CONFIG_ORIG[$name]="${row%|*}"
        VQ_CONFIG_ORIG_AUTO[$name]="${row##*|}"
        VQ_CONFIG_NAMES+=("$name")
    fi
    psql -XAtq -v ON_ERROR_STOP=1 \
        -c "ALTER SYSTEM SET $name = $(_vq_sql_literal "$value")" \
        -c "SELECT pg_reload_conf()" >/dev/null || fail "set_config $name = '$value' failed"
    _vq_wait_setting "$name" "$value"
}

reset_config() { # NAME
    local name="$1"
    if [[ -z "${VQ_CONFIG_ORIG[$name]+x}" ]]; then
        psql -XAtq -v ON_ERROR_STOP=1 -c "ALTER SYSTEM RESET $name" \
            -c "SELECT pg_reload_conf()" >/dev/null || fail "reset_config $name failed"
        return 0
    fi
    if [[ "${VQ_CONFIG_ORIG_AUTO[$name]}" == 1 ]]; then
        psql -XAtq -v ON_ERROR_STOP=1 \
            -c "ALTER SYSTEM SET $name = $(_vq_sql_literal "${VQ_CONFIG_ORIG[$name]}")" \
            -c "SELECT pg_reload_conf()" >/dev/null || fail "reset_config $name failed"
    else
        psql -XAtq -v ON_ERROR_STOP=1 -c "ALTER SYSTEM RESET $name" \
            -c "SELECT pg_reload_conf()" >/dev/null || fail "reset_config $name failed"
    fi
    _vq_wait_setting "$name" "${VQ_CONFIG_ORIG[$name]}"
}

cleanup_configs() {
    local name
    for name in "${VQ_CONFIG_NAMES[@]}"; do
        (reset_config "$name") || echo "WARNING: could not restore setting $name" >&2
    done
    VQ_CONFIG_NAMES=()
    VQ_CONFIG_ORIG=()
    VQ_CONFIG_ORIG_AUTO=()
    return 0
}

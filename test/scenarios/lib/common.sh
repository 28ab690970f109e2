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
#   wait_for SQL TIMEOUT_SECS WHAT [JOB_ID]
#                               poll SQL (returning a boolean) every 20 ms until it
#                               returns t (an error, e.g. while the server restarts,
#                               counts as "not yet"); after TIMEOUT_SECS fail naming
#                               WHAT and the last value (or error) seen, then, if
#                               JOB_ID is given, the job's job_state at that moment,
#                               and, if VQ_WAIT_REPORT names a command (a function),
#                               what that command prints
#   assert_stays SQL SECS WHAT  poll SQL every 20 ms for SECS seconds; fail as soon as
#                               it returns something other than what it returned first
#                               (e.g. a counter that must not move)
#   wait_state ID STATE SECS    wait_for job ID to be in STATE ("job ID to be STATE";
#                               the timeout message shows the job's job_state)
#   wait_ready SECS             poll pg_isready until the server accepts connections;
#                               fail after SECS
#   job_state ID                "state|attempt_number|last_error" of job ID
#   transitions ID              "kind:attempt:from>to,..." of job ID's transitions, in order
#   q_as ROLE SQL               run SQL like q, in a new session after SET ROLE ROLE
#   drop_roles ROLE...          for each ROLE that exists: DROP OWNED BY ROLE CASCADE (in
#                               the current database), then DROP ROLE; never fails (use it
#                               from an EXIT trap): prints a WARNING for a role it could
#                               not drop
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
#   now_s                       wall-clock seconds since the epoch, with nanoseconds
#                               (e.g. 1700000000.123456789)
#   fail_later MSG...           print "FAIL: MSG" on stderr, remember it and go on
#   fail_summary                if fail_later was called: print "FAIL (summary): MSG" on
#                               stderr for each of its messages and exit 1
#   bouncer_start DIR PORT USERS DATABASE_LINE...
#                               start a pgbouncer (as postgres: it refuses root) in DIR (made
#                               here; its parent is made traversable), on a unix socket in DIR
#                               named by PORT only (a TCP port could be taken by anything on
#                               the machine), transaction pooling, one server connection per
#                               database and user unless a line says pool_size, trust for the
#                               space-separated USERS; each DATABASE_LINE is a line of its
#                               [databases] section; waits until it accepts connections and
#                               sets BOUNCER_DIR and BOUNCER_PORT (connect with
#                               PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT")
#   bouncer_stop                stop the pgbouncer bouncer_start started (by its pidfile);
#                               returns 1 if it did not stop within 5 s
#   session_start DIR NAME [APPNAME]
#                               a long-lived session (psql -XAtq, ON_ERROR_STOP) fed through a
#                               fifo in DIR, its output in DIR/NAME.out, application_name
#                               APPNAME if given (it connects now: later statements need no
#                               new connection)
#   session_send NAME SQL       send SQL (one or more statements) to session NAME
#   session_wait_line NAME REGEX SECS
#                               wait until session NAME has printed a line that REGEX (grep -E)
#                               matches whole, and print that line; fail after SECS, showing
#                               what the session printed
#   session_end NAME            close its input and wait for it; fail if psql failed
#   sessions_stop               for EXIT traps: close and kill every session still open
#
# Every helper connects through the libpq environment (PGHOST, PGPORT, PGDATABASE ...); to
# run one against another database or server, prefix it: PGDATABASE=other wait_for ...
#
# set_config and fail_later must run in the main shell (not in $(...) or a pipeline),
# because they remember what to restore / report in shell variables.
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

now_s() { date +%s.%N; }

declare -ga VQ_FAILED_LATER=()       # messages of fail_later, for fail_summary

fail_later() {
    echo "FAIL: $*" >&2
    VQ_FAILED_LATER+=("$*")
}

fail_summary() {
    ((${#VQ_FAILED_LATER[@]} == 0)) && return 0
    printf 'FAIL (summary): %s\n' "${VQ_FAILED_LATER[@]}" >&2
    exit 1
}

q() {
    local sql="$1"
    shift
    psql -XAtq -v ON_ERROR_STOP=1 "$@" -c "$sql"
}

qs() {
    psql -XAtq -v ON_ERROR_STOP=1 "$@" -f -
}

q_as() { # ROLE SQL
    psql -XAtq -v ON_ERROR_STOP=1 -c "SET ROLE \"$1\"" -c "$2"
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

# wait_for SQL TIMEOUT_SECS WHAT [JOB_ID]
wait_for() {
    local sql="$1" timeout="${2:-10}" what="${3:-$1}" id="${4:-}" v="" more="" deadline
    deadline=$(($(date +%s%N) + $(awk -v t="$timeout" 'BEGIN { printf "%.0f", t * 1e9 }')))
    while :; do
        v="$(psql -XAtq -v ON_ERROR_STOP=1 -c "$sql" 2>&1)" || v="(error) $v"
        [[ "$v" == t ]] && return 0
        if (($(date +%s%N) >= deadline)); then
            if [[ -n "$id" ]]; then
                more+="; job now: [$(job_state "$id" 2>&1)]"
            fi
            if [[ -n "${VQ_WAIT_REPORT:-}" ]]; then
                more+="; $("$VQ_WAIT_REPORT" 2>&1)"
            fi
            fail "timed out after ${timeout}s waiting for: $what (last value: [$v]$more; query: $sql)"
        fi
        sleep "$VQ_WAIT_POLL_SECS"
    done
}

job_state() { # ID
    q "SELECT state || '|' || attempt_number || '|' || coalesce(last_error, '') FROM vq.job WHERE execution_id = '$1'"
}

wait_state() { # ID STATE SECS
    wait_for "SELECT state = '$2' FROM vq.job WHERE execution_id = '$1'" "$3" "job $1 to be $2" "$1"
}

transitions() { # ID
    q "SELECT string_agg(kind || ':' || attempt_number || ':' || from_state || '>' || to_state, ',' ORDER BY id)
         FROM vq.job_transition WHERE execution_id = '$1'"
}

# wait_ready SECS
wait_ready() {
    local deadline=$((SECONDS + $1))
    until pg_isready -q; do
        ((SECONDS < deadline)) || fail "the server did not accept connections within $1 s"
        sleep 0.01
    done
}

# drop_roles ROLE...: never fails (for EXIT traps). Unfinished jobs and outbox rows of the roles
# here are deleted first (DROP ROLE is refused while a role has any).
drop_roles() {
    local r lit out
    for r in "$@"; do
        lit="$(_vq_sql_literal "$r")"
        out="$(psql -XAtq -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" -c "DO \$\$ BEGIN
                   IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $lit) THEN
                       IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vq_job') THEN
                           DELETE FROM vq.job_active WHERE enqueued_by = $lit::regrole;
                           DELETE FROM vq.outbox WHERE published_by = $lit::regrole AND status = 'PENDING';
                       END IF;
                       EXECUTE format('DROP OWNED BY %I CASCADE', $lit);
                       EXECUTE format('DROP ROLE %I', $lit);
                   END IF; END \$\$" 2>&1 >/dev/null)" ||
            echo "WARNING: could not drop role $r: $out" >&2
    done
    return 0
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

# one_executor: vq.executors_per_database = 1 and vq.max_executors = 1 (none started on demand;
# restored by cleanup_configs), and wait until this database has exactly one executor, so every
# job runs in the same process.
one_executor() {
    set_config vq.executors_per_database 1
    set_config vq.max_executors 1
    wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                  AND datname = current_database()" 10 "exactly one executor for $PGDATABASE"
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

# A session that holds a REPEATABLE READ snapshot, as a report or pg_dump would: vacuum can
# then remove no row version that ends after it was taken.
VQ_HOLDER_PID="" VQ_HOLDER_FD=""
hold_snapshot() { # DIR TABLE: start the holder (its fifo and output in DIR), reading TABLE once
    mkfifo "$1/holder.in"
    psql -XAtq <"$1/holder.in" >"$1/holder.out" 2>&1 &
    VQ_HOLDER_PID=$!
    exec {VQ_HOLDER_FD}>"$1/holder.in"
    printf "BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 'holding', count(*) FROM %s;\n" "$2" >&"$VQ_HOLDER_FD"
    wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = (SELECT pid FROM pg_stat_activity
               WHERE query LIKE 'SELECT ''holding''%' AND state = 'idle in transaction') AND backend_xmin IS NOT NULL)" \
        10 "the snapshot holder idle in transaction with an xmin"
}

release_snapshot() { # the holder commits and ends
    printf "COMMIT;\n" >&"$VQ_HOLDER_FD"
    exec {VQ_HOLDER_FD}>&-
    VQ_HOLDER_FD=""
    wait "$VQ_HOLDER_PID" || true
    VQ_HOLDER_PID=""
}

stop_snapshot_holder() { # for cleanup traps: end the holder if it still runs
    [[ -n "$VQ_HOLDER_FD" ]] && exec {VQ_HOLDER_FD}>&-
    [[ -n "$VQ_HOLDER_PID" ]] && kill "$VQ_HOLDER_PID" 2>/dev/null
    VQ_HOLDER_FD="" VQ_HOLDER_PID=""
    return 0
}

# ---- pgbouncer --------------------------------------------------------------------------
BOUNCER_DIR="" BOUNCER_PORT=""
bouncer_start() { # DIR PORT USERS DATABASE_LINE...
    local dir="$1" port="$2" users="$3" u pgbouncer
    shift 3
    pgbouncer="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
    mkdir "$dir"
    for u in $users; do
        printf '"%s" ""\n' "$u"
    done >"$dir/users.txt"
    {
        echo "[databases]"
        printf '%s\n' "$@"
        cat <<EOF
[pgbouncer]
listen_port = $port
unix_socket_dir = $dir
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 1
max_client_conn = 50
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
    } >"$dir/pgbouncer.ini"
    chown -R postgres:postgres "$dir"
    chmod 755 "$(dirname "$dir")"
    BOUNCER_DIR="$dir" BOUNCER_PORT="$port"
    (cd / && runuser -u postgres -- "$pgbouncer" -d "$dir/pgbouncer.ini") ||
        fail "pgbouncer did not start: $(tail -n 20 "$dir/pgbouncer.log" 2>/dev/null)"
    PGHOST="$dir" PGPORT="$port" wait_ready 10
}

bouncer_stop() {
    local pid i
    [[ -n "$BOUNCER_DIR" && -s "$BOUNCER_DIR/pgbouncer.pid" ]] || return 0
    pid="$(cat "$BOUNCER_DIR/pgbouncer.pid")"
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 250; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.02
    done
    echo "WARNING: pgbouncer $pid did not stop within 5 s" >&2
    return 1
}

# ---- long-lived sessions ----------------------------------------------------------------
declare -gA VQ_SESSION_PID=() VQ_SESSION_FD=() VQ_SESSION_DIR=()
session_start() { # DIR NAME [APPNAME]
    local dir="$1" name="$2" fd
    mkfifo "$dir/$name.in"
    PGAPPNAME="${3:-${PGAPPNAME:-psql}}" psql -XAtq -v ON_ERROR_STOP=1 \
        <"$dir/$name.in" >"$dir/$name.out" 2>&1 &
    VQ_SESSION_PID[$name]=$!
    exec {fd}>"$dir/$name.in"
    VQ_SESSION_FD[$name]=$fd
    VQ_SESSION_DIR[$name]="$dir"
}

session_send() { # NAME SQL
    printf '%s\n' "$2" >&"${VQ_SESSION_FD[$1]}"
}

session_wait_line() { # NAME REGEX SECS
    local out="${VQ_SESSION_DIR[$1]}/$1.out" deadline
    deadline=$(($(date +%s%N) + $3 * 1000000000))
    until grep -xE -m 1 -- "$2" "$out"; do
        (($(date +%s%N) < deadline)) || fail "session $1 printed no line matching [$2] within $3 s: $(tail -n 5 "$out")"
        sleep "$VQ_WAIT_POLL_SECS"
    done
}

session_end() { # NAME
    local name="$1" rc=0 fd="${VQ_SESSION_FD[$1]}"
    exec {fd}>&-
    unset "VQ_SESSION_FD[$name]"
    wait "${VQ_SESSION_PID[$name]}" || rc=$?
    unset "VQ_SESSION_PID[$name]"
    rm -f "${VQ_SESSION_DIR[$name]}/$name.in"
    ((rc == 0)) || fail "session $name failed (exit $rc): $(cat "${VQ_SESSION_DIR[$name]}/$name.out")"
}

sessions_stop() {
    local name fd
    for name in "${!VQ_SESSION_FD[@]}"; do
        fd="${VQ_SESSION_FD[$name]}"
        exec {fd}>&-
    done
    for name in "${!VQ_SESSION_PID[@]}"; do
        kill "${VQ_SESSION_PID[$name]}" 2>/dev/null
        wait "${VQ_SESSION_PID[$name]}" 2>/dev/null
    done
    VQ_SESSION_FD=() VQ_SESSION_PID=()
    return 0
}

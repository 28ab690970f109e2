# shellcheck shell=bash
# test/scenarios/lib/consumer.sh — running vq_consumer in the consumer_*.sh scenarios.
# Source it after common.sh, with TMPD naming the scenario's scratch directory.
#
#   CONSUMER                    the vq_consumer under test
#   CONNINFO                    the scenario database, as the superuser
#   consumer_start NAME ARGS... vq_consumer ARGS in the background, application_name
#                               nc_NAME (added to --dbname CONNINFO unless ARGS give
#                               --dbname first), output in $TMPD/NAME.log
#   consumer_ready NAME [SECS]  wait until its session is idle after a take (LISTENing)
#   consumer_exit NAME SECS     wait until it exits (fail after SECS); its exit status
#                               in CONSUMER_RC (run it in the main shell, not in $(...))
#   consumer_stop NAME          SIGTERM, then consumer_exit NAME 15
#   consumer_kill_all           for EXIT traps: SIGKILL every consumer still running
#   log_wait NAME REGEX SECS    wait until $TMPD/NAME.log has a line matching REGEX (grep -E)

CONSUMER="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}/vq_consumer"
CONNINFO="host=$PGHOST port=$PGPORT user=${PGUSER:-postgres} dbname=$PGDATABASE"
declare -gA CONSUMER_PID=()

consumer_start() { # NAME ARGS...
    local name="$1"
    shift
    if [[ "${1:-}" == --dbname ]]; then
        local conninfo="$2"
        shift 2
        "$CONSUMER" --dbname "$conninfo application_name=nc_$name" "$@" >"$TMPD/$name.log" 2>&1 &
    else
        "$CONSUMER" --dbname "$CONNINFO application_name=nc_$name" "$@" >"$TMPD/$name.log" 2>&1 &
    fi
    CONSUMER_PID[$name]=$!
}

consumer_ready() { # NAME [SECS]
    wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'nc_$1'
                               AND state = 'idle' AND query LIKE '%vq_take_jobs%')" "${2:-10}" \
        "consumer $1 connected and idle after a take"
}

consumer_exit() { # NAME SECS
    local name="$1" pid="${CONSUMER_PID[$1]}" deadline rc=0
    deadline=$(($(now_ms) + $2 * 1000))
    while kill -0 "$pid" 2>/dev/null && [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]; do
        (($(now_ms) < deadline)) || fail "consumer $name (pid $pid) still runs after $2 s"
        sleep 0.05
    done
    wait "$pid" || rc=$?
    unset "CONSUMER_PID[$name]"
    CONSUMER_RC="$rc"
}

consumer_stop() { # NAME
    kill -TERM "${CONSUMER_PID[$1]}" 2>/dev/null || true
    consumer_exit "$1" 15
}

consumer_kill_all() {
    local n
    for n in "${!CONSUMER_PID[@]}"; do
        kill -KILL "${CONSUMER_PID[$n]}" 2>/dev/null
        wait "${CONSUMER_PID[$n]}" 2>/dev/null
    done
    CONSUMER_PID=()
}

log_wait() { # NAME REGEX SECS
    local deadline
    deadline=$(($(now_ms) + $3 * 1000))
    until grep -qE "$2" "$TMPD/$1.log" 2>/dev/null; do
        (($(now_ms) < deadline)) || fail "consumer $1 did not log /$2/ within $3 s: $(tail -n 5 "$TMPD/$1.log" 2>/dev/null)"
        sleep 0.05
    done
}

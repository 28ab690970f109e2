# shellcheck shell=bash
# test/scenarios/lib/listener.sh — psql sessions that LISTEN, for the NOTIFY scenarios.
# Source it after lib/common.sh; the caller sets TMPD (a scratch directory) and declares
#   declare -A LISTENER_FD=() LISTENER_PID=()
#
#   wait_file FILE REGEX SECS WHAT    poll until FILE has a line matching REGEX
#   listener_start NAME CHANNEL       a psql session LISTENing on CHANNEL ($TMPD/NAME.out)
#   listener_wait NAME REGEX SECS     let the listener print notifications until one matches
#   notification NAME EXECUTION_ID    the last JSON message that announced EXECUTION_ID
#   listener_stop NAME                end the session

wait_file() { # FILE REGEX SECS WHAT
    local file="$1" re="$2" secs="$3" what="$4" deadline
    deadline=$(($(date +%s%N) + secs * 1000000000))
    until grep -qE -- "$re" "$file" 2>/dev/null; do
        (($(date +%s%N) < deadline)) || fail "timed out after ${secs}s waiting for $what (no line matching /$re/ in $file)"
        sleep 0.02
    done
}

listener_start() { # NAME CHANNEL
    local name="$1" ch="$2" fd
    mkfifo "$TMPD/$name.in"
    psql -XAtq <"$TMPD/$name.in" >"$TMPD/$name.out" 2>&1 &
    LISTENER_PID[$name]=$!
    exec {fd}>"$TMPD/$name.in"
    LISTENER_FD[$name]=$fd
    printf 'LISTEN "%s";\nSELECT %s;\n' "$ch" "'listening-$name'" >&"$fd"
    wait_file "$TMPD/$name.out" "^listening-$name\$" 10 "listener $name to LISTEN"
}

# psql prints the notifications it received after each statement: send it empty ones.
listener_wait() { # NAME REGEX SECS
    local name="$1" re="$2" secs="$3" deadline
    deadline=$(($(date +%s%N) + secs * 1000000000))
    while :; do
        printf 'SELECT 1 WHERE false;\n' >&"${LISTENER_FD[$name]}"
        grep -qE -- "$re" "$TMPD/$name.out" && return 0
        (($(date +%s%N) < deadline)) ||
            fail "listener $name: no notification matching /$re/ within ${secs}s; it printed: $(tail -c 2000 "$TMPD/$name.out")"
        sleep 0.02
    done
}

notification() { # NAME EXECUTION_ID
    sed -n 's/^Asynchronous notification "[^"]*" with payload "\(.*\)" received from server process with PID [0-9]*\.$/\1/p' \
        "$TMPD/$1.out" | grep -F -- "$2" | tail -n 1
}

listener_stop() { # NAME
    local name="$1" fd="${LISTENER_FD[$1]}"
    exec {fd}>&-
    kill "${LISTENER_PID[$name]}" 2>/dev/null || true
    wait "${LISTENER_PID[$name]}" 2>/dev/null || true
    unset "LISTENER_PID[$name]" "LISTENER_FD[$name]"
}

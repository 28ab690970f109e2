# shellcheck shell=bash
# test/failover/lib.sh — a pg_auto_failover formation on one machine, for failover.sh.
# Source it after scripts/lib.sh.
#
# The formation: a monitor and two data nodes (node1, node2), each run by its own
# `pg_autoctl ... --run` in a process group of its own (so that a node can be killed whole,
# keeper and postmaster together, as when its machine is lost), all as the postgres user
# with HOME and the XDG directories in FO_DIR. Every server listens on localhost only, on
# ports from vq_free_port; the data nodes keep their sockets in FO_DIR/sock.
#
#   fo_init                     FO_DIR (a new directory in FO_BASE_DIR, default /tmp), ports,
#                               the postgres user's environment
#   fo_start_monitor            create and run the monitor; shorten its failure detection
#                               (unless FO_MONITOR_DEFAULTS=1)
#   fo_start_node NAME          create (first time) or run again (afterwards) a data node
#   fo_kill_node NAME           SIGKILL the node's process group (pg_autoctl and postgres)
#   fo_stop_all                 stop every node and the monitor (TERM, then KILL); never fails
#   fo_port NAME                the node's port
#   fo_on NAME CMD...           run CMD (q, wait_for ...) with PGHOST/PGPORT naming the node
#   fo_states                   "node1:primary/primary node2:secondary/secondary" (reported/goal)
#   fo_wait_states WANT SECS    wait until fo_states prints WANT
#   fo_primary                  the name of the node the monitor has as primary
#   fo_autoctl ARGS...          pg_autoctl as the postgres user, in the formation's environment
#   fo_pids ppid|pgrp ID        the processes whose parent / process group is ID (from /proc:
#                               procps, which has pgrep, is not always installed)

FO_DIR="" FO_MONITOR_PORT="" FO_URI=""
FO_ENV=()                    # the postgres user's environment for pg_autoctl (set by fo_init)
declare -gA FO_PORTS=()

fo_init() {
    FO_DIR="$(mktemp -d "${FO_BASE_DIR:-/tmp}/vq_failover.XXXXXX")"
    mkdir -p "$FO_DIR"/{xdg/config,xdg/share,xdg/run,sock}
    chown -R postgres:postgres "$FO_DIR"
    chmod 755 "$FO_DIR"
    chmod 700 "$FO_DIR/xdg/run"
    FO_MONITOR_PORT="$(vq_free_port)"
    FO_PORTS[node1]="$(fo_other_port "$FO_MONITOR_PORT")"
    FO_PORTS[node2]="$(fo_other_port "$FO_MONITOR_PORT" "${FO_PORTS[node1]}")"
    FO_URI="postgres://autoctl_node@localhost:$FO_MONITOR_PORT/pg_auto_failover?sslmode=disable"
    FO_ENV=(env -i HOME="$FO_DIR" PATH="$VQ_PG_BIN:/usr/bin:/bin" PG_CONFIG="$VQ_PG_BIN/pg_config"
            XDG_CONFIG_HOME="$FO_DIR/xdg/config" XDG_DATA_HOME="$FO_DIR/xdg/share"
            XDG_RUNTIME_DIR="$FO_DIR/xdg/run" PGHOST=localhost)
}

# fo_other_port TAKEN...: a free port other than those given (nothing listens on them yet).
fo_other_port() {
    local p taken
    while :; do
        p="$(vq_free_port)"
        for taken in "$@"; do
            [[ "$p" == "$taken" ]] && continue 2
        done
        echo "$p"
        return 0
    done
}

fo_port() { echo "${FO_PORTS[$1]}"; }

fo_on() {
    local name="$1"
    shift
    PGHOST=localhost PGPORT="${FO_PORTS[$name]}" "$@"
}

fo_autoctl() {
    (cd / && runuser -u postgres -- "${FO_ENV[@]}" pg_autoctl "$@")
}

# fo_spawn NAME ARGS...: pg_autoctl ARGS in the background, in a new process group whose id
# is kept in FO_DIR/NAME.pgid; output appended to FO_DIR/NAME.log.
fo_spawn() {
    local name="$1"
    shift
    # A background job of a script is no group leader, so setsid sets up the new group in
    # place: $! is the group's id, and the whole node can be signalled at once.
    (cd / && exec setsid runuser -u postgres -- "${FO_ENV[@]}" pg_autoctl "$@") \
        >>"$FO_DIR/$name.log" 2>&1 </dev/null &
    echo "$!" >"$FO_DIR/$name.pgid"
    disown "$!"    # watched through its pids; no job report when it is killed
}

# fo_initdb NAME: a data directory for the monitor or the first node, with the settings that
# pg_autoctl does not choose (it keeps its own in an include at the top of postgresql.conf, so
# the lines appended here win): its socket in FO_DIR/sock, and 128MB of shared buffers instead
# of a quarter of the machine's memory.
fo_initdb() {
    local data="$FO_DIR/$1"
    vq_as_pg "$VQ_PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$FO_DIR/initdb.$1.log" 2>&1 || { cat "$FO_DIR/initdb.$1.log" >&2; fail "initdb of $1 failed"; }
    cat >>"$data/postgresql.conf" <<CONF
# ---- test/failover ----
unix_socket_directories = '$FO_DIR/sock'
shared_buffers = 128MB
log_line_prefix = '%m [%p] '
CONF
}

fo_start_monitor() {
    vq_log "failover: monitor on port $FO_MONITOR_PORT ($FO_DIR/monitor.log)"
    fo_initdb monitor
    fo_spawn monitor create monitor --pgdata "$FO_DIR/monitor" --pgport "$FO_MONITOR_PORT" \
        --hostname localhost --auth trust --no-ssl --run
    PGHOST=localhost PGPORT="$FO_MONITOR_PORT" PGDATABASE=pg_auto_failover \
        wait_for "SELECT count(*) = 1 FROM pg_extension WHERE extname = 'pgautofailover'" 60 \
        "the pg_auto_failover monitor ready"
    # Detection in about 3 s instead of 20-30 s, and a demote timeout of 2 s instead of 30 s
    # (a new primary stays read-only that long when the old one does not report its demotion);
    # FO_MONITOR_DEFAULTS=1 keeps pg_auto_failover's settings.
    [[ "${FO_MONITOR_DEFAULTS:-}" == 1 ]] && return 0
    PGHOST=localhost PGPORT="$FO_MONITOR_PORT" PGDATABASE=pg_auto_failover qs >/dev/null <<'SQL'
ALTER SYSTEM SET pgautofailover.health_check_period = 1000;
ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000;
ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1;
ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500;
ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000;
ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 2000;
SELECT pg_reload_conf();
SQL
}

# fo_start_node NAME: the first node is initdb'd here, with vq_job preloaded (its
# postgresql.conf is copied by the base backup of the other).
fo_start_node() {
    local name="$1" data="$FO_DIR/$1" port="${FO_PORTS[$1]}"
    if [[ -f "$data/PG_VERSION" && -f "$FO_DIR/$name.created" ]]; then
        vq_log "failover: $name runs again"
        fo_spawn "$name" run --pgdata "$data"
        return 0
    fi
    if [[ "$name" == node1 ]]; then
        fo_initdb node1
        cat >>"$data/postgresql.conf" <<CONF
shared_preload_libraries = 'vq_job'
max_worker_processes = 32
wal_keep_size = 256MB
CONF
    fi
    vq_log "failover: $name on port $port ($FO_DIR/$name.log)"
    fo_spawn "$name" create postgres --pgdata "$data" --pgport "$port" --listen localhost \
        --hostname localhost --name "$name" --dbname app --monitor "$FO_URI" \
        --auth trust --no-ssl --run
    touch "$FO_DIR/$name.created"
}

fo_pids() {
    local field="$1" id="$2" f stat rest ppid pgrp
    for f in /proc/[0-9]*/stat; do
        { read -r stat <"$f"; } 2>/dev/null || continue
        rest="${stat##*) }"          # after the command name: state ppid pgrp ...
        read -r _ ppid pgrp _ <<<"$rest"
        if [[ "$field" == ppid && "$ppid" == "$id" || "$field" == pgrp && "$pgrp" == "$id" ]]; then
            f="${f#/proc/}"
            echo "${f%/stat}"
        fi
    done
}

# fo_node_pids NAME: the pids of the node's process group and of its postmaster.
fo_node_pids() {
    local pgid pid
    pgid="$(cat "$FO_DIR/$1.pgid" 2>/dev/null || true)"
    if [[ "$pgid" =~ ^[0-9]+$ ]]; then
        fo_pids pgrp "$pgid"
    fi
    pid="$(head -n 1 "$FO_DIR/$1/postmaster.pid" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
    return 0
}

fo_kill_node() {
    local pgid pid
    pgid="$(cat "$FO_DIR/$1.pgid")"
    pid="$(head -n 1 "$FO_DIR/$1/postmaster.pid")"
    kill -KILL -- "-$pgid" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
}

# fo_stop NAME: TERM the group (pg_autoctl stops its postgres), KILL what is left after 30 s.
fo_stop() {
    local name="$1" pgid i
    pgid="$(cat "$FO_DIR/$name.pgid" 2>/dev/null || true)"
    [[ "$pgid" =~ ^[0-9]+$ ]] || return 0
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do
        [[ -z "$(fo_node_pids "$name")" ]] && return 0
        sleep 0.1
    done
    vq_warn "failover: $name did not stop in 30 s; killing it"
    fo_kill_node "$name"
}

fo_stop_all() {
    [[ -n "$FO_DIR" && -d "$FO_DIR" ]] || return 0
    # the monitor first: stopping a primary while the monitor runs would start a failover
    fo_stop monitor
    fo_stop node1
    fo_stop node2
    return 0
}

fo_states() {
    PGHOST=localhost PGPORT="$FO_MONITOR_PORT" PGDATABASE=pg_auto_failover \
        q "SELECT string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' ' ORDER BY nodename)
             FROM pgautofailover.node"
}

fo_wait_states() { # WANT SECS
    PGHOST=localhost PGPORT="$FO_MONITOR_PORT" PGDATABASE=pg_auto_failover \
        wait_for "SELECT coalesce(string_agg(nodename || ':' || reportedstate || '/' || goalstate, ' '
                                              ORDER BY nodename), '') = '$1'
                    FROM pgautofailover.node" "$2" "formation states $1"
}

fo_primary() {
    PGHOST=localhost PGPORT="$FO_MONITOR_PORT" PGDATABASE=pg_auto_failover \
        q "SELECT nodename FROM pgautofailover.node WHERE goalstate IN ('primary', 'wait_primary', 'single')"
}

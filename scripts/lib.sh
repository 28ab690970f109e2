# shellcheck shell=bash
# scripts/lib.sh — helpers shared by scripts/run, scripts/stop, scripts/test and
# scripts/bench.  Source it; do not execute it.
#
# Everything runs as root (Debian 12).  PostgreSQL refuses to run as root, so
# every cluster is created and run by the `postgres` system user via runuser.
# The Debian-managed cluster (15/main on port 5432, /var/run/postgresql) is
# neither needed nor touched: our clusters use their own data directory, a port
# of their own and a socket directory under /tmp, and listen on no TCP address.
#
# Knobs (environment variables):
#   VQ_PG_BIN=DIR     PostgreSQL binaries (default /usr/lib/postgresql/15/bin)
#   VQ_NO_PRELOAD=1   start clusters WITHOUT shared_preload_libraries='vq_job'
#                     (to exercise this harness when the extension does not
#                     build or load yet)
#   VQ_SKIP_BUILD=1   vq_build_install does nothing (use the installed build)
#   VQ_SKIP_DEPS=1    vq_deps does nothing

VQ_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
VQ_PG_BIN="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}"
export VQ_REPO_ROOT VQ_PG_BIN
# Use the real PG 15 client binaries (psql, createdb, pg_isready ...), not the
# postgresql-common wrappers in /usr/bin; pg_prove and pg_regress find psql here.
case ":$PATH:" in
    *":$VQ_PG_BIN:"*) ;;
    *) export PATH="$VQ_PG_BIN:$PATH" ;;
esac
# Nothing from the caller's environment may redirect our clients elsewhere.
unset PGSERVICE PGSERVICEFILE PGCLUSTER PGPASSWORD PGPASSFILE PGOPTIONS PGSSLMODE 2>/dev/null || true

vq_log()  { printf '==> %s\n' "$*"; }
vq_warn() { printf 'WARNING: %s\n' "$*" >&2; }
vq_err()  { printf 'ERROR: %s\n' "$*" >&2; }

# vq_matches FILE GLOBS: true if FILE's path, name or name without extension matches one of
# the comma- or space-separated GLOBS (the VQ_TEST_ONLY / VQ_TEST_SKIP filters).
vq_matches() {
    local f="$1" base stem pat IFS=$', \t\n'
    base="${f##*/}"
    stem="${base%.*}"
    set -f
    for pat in $2; do
        # shellcheck disable=SC2053
        if [[ "$f" == $pat || "$base" == $pat || "$stem" == $pat ]]; then
            set +f
            return 0
        fi
    done
    set +f
    return 1
}

# Run a command as the postgres user, from / so that a working directory the
# postgres user cannot enter (e.g. a clone under /root) does not matter.
vq_as_pg() {
    (cd / && runuser -u postgres -- "$@")
}

# ---------------------------------------------------------------------------
# vq_deps: install the Debian 12 packages the project needs (idempotent; apt is
# skipped entirely when everything is already installed).
#   make, gcc, libc6-dev           build toolchain
#   postgresql-15                  server (+ contrib modules, pgbench)
#   postgresql-client-15           psql, createdb, pg_isready
#   postgresql-server-dev-15       PGXS, server headers, pg_regress
#   libpq-dev                      libpq headers
#   postgresql-15-pgtap            pgTAP extension
#   libtap-parser-sourcehandler-pgtap-perl   pg_prove
#   nodejs npm python3-psycopg pgbouncer      the client examples (test/scenarios/examples.sh)
#   postgresql-15-auto-failover   pg_autoctl (test/scenarios/failover.sh)
# (Debian 12 has no separate postgresql-contrib-15: contrib ships inside
# postgresql-15.  Installing postgresql-15 may create and start the packaged
# 15/main cluster on 5432; we never use it.)
VQ_DEB_PACKAGES=(
    make gcc libc6-dev
    postgresql-15 postgresql-client-15 postgresql-server-dev-15 libpq-dev
    postgresql-15-pgtap libtap-parser-sourcehandler-pgtap-perl
    nodejs npm python3-psycopg pgbouncer
    postgresql-15-auto-failover
)
vq_deps() {
    if [[ "${VQ_SKIP_DEPS:-}" == 1 ]]; then
        vq_log "deps: skipped (VQ_SKIP_DEPS=1)"
        return 0
    fi
    local p missing=()
    for p in "${VQ_DEB_PACKAGES[@]}"; do
        # NodeSource's nodejs bundles npm and conflicts with Debian's: an npm on PATH will do.
        [[ "$p" == npm ]] && command -v npm >/dev/null && continue
        if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
            missing+=("$p")
        fi
    done
    if ((${#missing[@]} == 0)); then
        vq_log "deps: all ${#VQ_DEB_PACKAGES[@]} Debian packages present"
    else
        if [[ "$(id -u)" != 0 ]]; then
            vq_err "missing packages (${missing[*]}) and not root; install them first"
            return 1
        fi
        vq_log "deps: installing ${missing[*]}"
        apt-get update || { vq_err "apt-get update failed"; return 1; }
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            "${missing[@]}" </dev/null || { vq_err "apt-get install failed"; return 1; }
    fi
    if ! getent passwd postgres >/dev/null; then
        vq_err "system user 'postgres' does not exist (postgresql-common should create it)"
        return 1
    fi
    if [[ ! -x "$VQ_PG_BIN/initdb" || ! -x "$VQ_PG_BIN/pg_ctl" ]]; then
        vq_err "PostgreSQL binaries not found in $VQ_PG_BIN"
        return 1
    fi
    command -v runuser >/dev/null || { vq_err "runuser (util-linux) not found"; return 1; }
}

# ---------------------------------------------------------------------------
# vq_build_install: clean build + install of the extension (the Makefile adds
# -Werror).  Pinned to PG 15's pg_config.
vq_build_install() {
    if [[ "${VQ_SKIP_BUILD:-}" == 1 ]]; then
        vq_log "build: skipped (VQ_SKIP_BUILD=1)"
        return 0
    fi
    local jobs
    jobs="$(nproc 2>/dev/null || echo 2)"
    vq_log "build: make clean && make && make install (PG_CONFIG=$VQ_PG_BIN/pg_config)"
    (
        cd "$VQ_REPO_ROOT" &&
        make -s PG_CONFIG="$VQ_PG_BIN/pg_config" clean &&
        make -s -j"$jobs" PG_CONFIG="$VQ_PG_BIN/pg_config" &&
        make -s PG_CONFIG="$VQ_PG_BIN/pg_config" install
    ) || { vq_err "build/install failed"; return 1; }
    vq_log "build: installed into $("$VQ_PG_BIN/pg_config" --pkglibdir)"
}

# ---------------------------------------------------------------------------
# vq_free_port: print a port in 55000-59999 that nothing listens on over TCP
# and that has no PostgreSQL unix socket in the usual places.
vq_port_in_use() {
    local port="$1" hex f
    hex="$(printf '%04X' "$port")"
    for f in /proc/net/tcp /proc/net/tcp6; do
        [[ -r "$f" ]] || continue
        # local_address is "ADDR:PORT" in hex, state 0A = LISTEN
        if awk -v p="$hex" 'NR > 1 { split($2, a, ":"); if (a[2] == p && $4 == "0A") found = 1 }
                            END { exit !found }' "$f"; then
            return 0
        fi
    done
    for f in "/tmp/.s.PGSQL.$port" "/var/run/postgresql/.s.PGSQL.$port" \
             "/tmp/vq_job.sock.$port"; do
        [[ -e "$f" ]] && return 0
    done
    return 1
}
vq_free_port() {
    local i port
    for ((i = 0; i < 200; i++)); do
        port=$((55000 + RANDOM % 5000))
        if ! vq_port_in_use "$port"; then
            echo "$port"
            return 0
        fi
    done
    vq_err "no free port found in 55000-59999"
    return 1
}

# ---------------------------------------------------------------------------
# Cluster layout.  A cluster "home" DIR holds:
#   DIR/data         the data directory (initdb)
#   DIR/server.log   the server log (pg_ctl -l)
#   DIR/cluster.env  shell-sourceable PGHOST/PGPORT/PGUSER/VQ_CLUSTER_* lines
# If the postgres user cannot reach DIR (a clone under /root, mode 700), the
# cluster lives in a mktemp dir /tmp/vq_job.XXXXXX instead, and DIR gets a
# one-line file DIR/.vq_fallback naming it (DIR itself stays root's).
# The socket directory is /tmp/vq_job.sock.PORT (socket paths max 107 bytes).

# vq_cluster_home DIR: print the directory that really holds DIR's cluster.
vq_cluster_home() {
    local dir="$1"
    if [[ ! -d "$dir/data" && -f "$dir/.vq_fallback" ]]; then
        cat "$dir/.vq_fallback"
    else
        echo "$dir"
    fi
}

vq_pg_can_use_dir() {
    vq_as_pg test -d "$1" -a -w "$1" -a -x "$1" 2>/dev/null
}

# vq_cluster_start DIR PORT [extra postgresql.conf lines...]
# Exports PGHOST PGPORT PGUSER VQ_CLUSTER_DIR VQ_CLUSTER_DATA VQ_CLUSTER_SOCKDIR.
vq_cluster_start() {
    if (($# < 2)); then
        vq_err "usage: vq_cluster_start DIR PORT [conf lines...]"
        return 1
    fi
    local dir="$1" port="$2"
    shift 2
    local sockdir="/tmp/vq_job.sock.$port"
    local home data line

    if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port < 1024 || port > 65535)); then
        vq_err "bad port '$port'"
        return 1
    fi
    if ! getent passwd postgres >/dev/null; then
        vq_err "no 'postgres' user; run vq_deps first"
        return 1
    fi

    # Refuse to clobber a running server that uses the same socket directory.
    if [[ -S "$sockdir/.s.PGSQL.$port" ]] && "$VQ_PG_BIN/pg_isready" -q -h "$sockdir" -p "$port" -t 2; then
        vq_err "a server is already running on $sockdir port $port (stop it, or use another port)"
        return 1
    fi

    # Where the cluster lives.
    mkdir -p "$dir" || { vq_err "cannot create $dir"; return 1; }
    dir="$(cd "$dir" && pwd -P)"
    rm -f "$dir/.vq_fallback"
    chown postgres:postgres "$dir" && chmod 700 "$dir" || { vq_err "cannot chown $dir to postgres"; return 1; }
    if vq_pg_can_use_dir "$dir"; then
        home="$dir"
    else
        chown root:root "$dir" 2>/dev/null || true
        home="$(mktemp -d /tmp/vq_job.XXXXXX)" || { vq_err "mktemp failed"; return 1; }
        chown postgres:postgres "$home" && chmod 700 "$home" || return 1
        echo "$home" >"$dir/.vq_fallback"
        vq_log "cluster: postgres cannot reach $dir (e.g. a clone under /root); using $home instead"
    fi
    data="$home/data"
    if [[ -e "$data" ]]; then
        vq_err "$data already exists; stop/remove it first"
        return 1
    fi

    if vq_port_in_use "$port" && [[ ! -d "$sockdir" ]]; then
        vq_warn "port $port looks in use (TCP listener or socket in /tmp, /var/run/postgresql); our server listens only on $sockdir, trying anyway"
    fi
    rm -rf "$sockdir"
    mkdir -p "$sockdir" && chown postgres:postgres "$sockdir" && chmod 755 "$sockdir" ||
        { vq_err "cannot create socket dir $sockdir"; return 1; }

    vq_log "cluster: initdb $data"
    if ! vq_as_pg "$VQ_PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 \
            --locale=C.UTF-8 >"$home/initdb.log" 2>&1; then
        cat "$home/initdb.log" >&2
        vq_err "initdb failed"
        return 1
    fi

    {
        echo ""
        echo "# ---- added by scripts/lib.sh (vq_cluster_start) ----"
        if [[ "${VQ_NO_PRELOAD:-}" == 1 ]]; then
            echo "# shared_preload_libraries omitted (VQ_NO_PRELOAD=1)"
        else
            echo "shared_preload_libraries = 'vq_job'"
        fi
        echo "port = $port"
        echo "listen_addresses = ''"
        echo "unix_socket_directories = '$sockdir'"
        echo "max_connections = 100"
        echo "shared_buffers = 256MB"
        echo "max_worker_processes = 32"
        echo "log_min_messages = warning"
        echo "logging_collector = off"
        for line in "$@"; do
            echo "$line"
        done
    } >>"$data/postgresql.conf"

    export PGHOST="$sockdir" PGPORT="$port" PGUSER=postgres
    export VQ_CLUSTER_DIR="$home" VQ_CLUSTER_DATA="$data" VQ_CLUSTER_SOCKDIR="$sockdir"
    {
        echo "export PGHOST='$sockdir' PGPORT='$port' PGUSER=postgres"
        echo "export VQ_CLUSTER_DIR='$home' VQ_CLUSTER_DATA='$data' VQ_CLUSTER_SOCKDIR='$sockdir'"
        echo "export VQ_PG_BIN='$VQ_PG_BIN'"
    } >"$home/cluster.env"

    vq_log "cluster: starting on port $port (socket dir $sockdir, log $home/server.log)"
    if ! vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$data" -l "$home/server.log" -w -t 60 start >/dev/null; then
        vq_err "cluster failed to start; last lines of $home/server.log:"
        tail -n 40 "$home/server.log" >&2 || true
        return 1
    fi
    vq_log "cluster: up (PGHOST=$PGHOST PGPORT=$PGPORT PGUSER=$PGUSER)"
}

# vq_cluster_running DIR: true if DIR's cluster has a live postmaster.
vq_cluster_running() {
    local home
    home="$(vq_cluster_home "$1")"
    [[ -f "$home/data/postmaster.pid" ]] || return 1
    vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$home/data" status >/dev/null 2>&1
}

# vq_cluster_stop DIR [mode]: stop DIR's cluster (default -m fast); no-op if it
# is not running.  Escalates to immediate, then SIGKILL of its postmaster.
vq_cluster_stop() {
    local dir="$1" mode="${2:-fast}" home data pid
    home="$(vq_cluster_home "$dir")"
    data="$home/data"
    if ! vq_cluster_running "$dir"; then
        return 0
    fi
    vq_log "cluster: stopping $data (-m $mode)"
    if vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$data" -m "$mode" -w -t 60 stop >/dev/null; then
        return 0
    fi
    if [[ "$mode" != immediate ]]; then
        vq_warn "pg_ctl stop -m $mode failed; trying -m immediate"
        vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null && return 0
    fi
    pid="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
    if [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null; then
        vq_warn "killing postmaster $pid"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 1
    fi
    ! vq_cluster_running "$dir"
}

# vq_cluster_destroy DIR: stop DIR's cluster and remove it (data dir, log,
# socket dir, the /tmp fallback dir if any).  DIR itself is kept unless it is
# a /tmp/vq_job.* directory.
vq_cluster_destroy() {
    local dir="$1" home port=""
    [[ -d "$dir" ]] || return 0
    home="$(vq_cluster_home "$dir")"
    vq_cluster_stop "$dir" || vq_warn "could not stop the cluster in $home"
    if [[ -f "$home/data/postgresql.conf" ]]; then
        port="$(sed -n "s/^port = \([0-9]*\)$/\1/p" "$home/data/postgresql.conf" | tail -n 1)"
    fi
    [[ -n "$port" ]] && rm -rf "/tmp/vq_job.sock.$port"
    rm -rf "$home/data" "$home/server.log" "$home/initdb.log" "$home/cluster.env"
    if [[ "$home" != "$dir" && "$home" == /tmp/vq_job.* ]]; then
        rm -rf "$home"
    fi
    rm -f "$dir/.vq_fallback"
    if [[ "$dir" == /tmp/vq_job.* ]]; then
        rm -rf "$dir"
    fi
}

# For scenario/crash tests (source "$VQ_REPO_ROOT/scripts/lib.sh" first); they
# act on the running test cluster named by VQ_CLUSTER_DIR / VQ_CLUSTER_DATA.
# vq_pg_ctl ARGS...: pg_ctl -D "$VQ_CLUSTER_DATA" ARGS as the postgres user.
vq_pg_ctl() {
    vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "${VQ_CLUSTER_DATA:?VQ_CLUSTER_DATA not set}" "$@"
}
# vq_cluster_restart [mode]: stop the test cluster (-m immediate by default, i.e.
# a crash) and start it again; waits until it accepts connections.
vq_cluster_restart() {
    local mode="${1:-immediate}"
    vq_pg_ctl -m "$mode" -w -t 60 stop >/dev/null || { vq_err "pg_ctl stop -m $mode failed"; return 1; }
    vq_pg_ctl -l "${VQ_CLUSTER_DIR:?}/server.log" -w -t 60 start >/dev/null ||
        { vq_err "restart failed; see $VQ_CLUSTER_DIR/server.log"; tail -n 20 "$VQ_CLUSTER_DIR/server.log" >&2; return 1; }
}

# vq_psql ARGS...: psql with the project's defaults (no psqlrc, stop on error).
vq_psql() {
    "$VQ_PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"
}

# vq_fresh_db NAME [EXTENSION]: (re)create database NAME, optionally with an
# extension installed.
vq_fresh_db() {
    local db="$1" ext="${2:-}"
    PGOPTIONS='-c client_min_messages=warning' "$VQ_PG_BIN/dropdb" --if-exists --force "$db" || return 1
    "$VQ_PG_BIN/createdb" "$db" || return 1
    if [[ -n "$ext" ]]; then
        vq_psql -d "$db" -c "CREATE EXTENSION \"$ext\"" || return 1
    fi
}

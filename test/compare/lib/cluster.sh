# shellcheck shell=bash
# test/compare/lib/cluster.sh — one fresh cluster per system, all with the same settings.
# Source after scripts/lib.sh.
#
#   cmp_cluster_start SYSTEM   start a fresh cluster for SYSTEM in $CMP_WORK/SYSTEM (exports PG*)
#   cmp_cluster_stop SYSTEM    stop and remove it

# The server settings of every system's cluster, in one place. vq_job's cluster adds only
# shared_preload_libraries = 'vq_job' (its executors are background workers of the server);
# the peers' clusters do not load it.
CMP_PG_SETTINGS=(
    "fsync = on"
    "synchronous_commit = on"
    "full_page_writes = on"
    "shared_buffers = 1GB"
    "max_connections = 100"
    "max_wal_size = 4GB"
    "checkpoint_timeout = 15min"
    "autovacuum = on"
    "jit = off"
)

cmp_cluster_start() {
    local system="$1" port
    port="$(vq_free_port)"
    if [[ "$system" == vq ]]; then
        vq_cluster_start "$CMP_WORK/$system" "$port" "${CMP_PG_SETTINGS[@]}" >&2
    else
        VQ_NO_PRELOAD=1 vq_cluster_start "$CMP_WORK/$system" "$port" "${CMP_PG_SETTINGS[@]}" >&2
    fi
    export PGDATABASE=compare
    "$VQ_PG_BIN/createdb" -h "$PGHOST" -p "$PGPORT" -U postgres compare
}

cmp_cluster_stop() {
    vq_cluster_destroy "$CMP_WORK/$1" >&2
}

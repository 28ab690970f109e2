#!/usr/bin/env bash
# test/soak/soak.sh — the chaos soak (`make soak`; not part of the regular suite): 10 minutes
# of producers and faults on a cluster of its own, then the exact accounting (test/soak/lib.sh
# says what runs; test/scenarios/soak_short.sh is the 60-s version in ./scripts/test).
# Builds and installs first, as ./scripts/test does (VQ_SKIP_BUILD=1 / VQ_SKIP_DEPS=1 skip it).
#
# Knobs: SOAK_SECS (600), SOAK_RATE (1000 jobs/s), SOAK_SPECIAL_TPS (20), SOAK_PORT (a free
# port), SOAK_KEEP_TMP=1 (keep the producers' and consumer's logs), VQ_KEEP_CLUSTER=1, and
# the other SOAK_* knobs of test/soak/lib.sh. Exits non-zero when a 'must' is violated.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"
cd "$VQ_REPO_ROOT"

vq_deps
vq_build_install

CLUSTER_DIR="$(mktemp -d /tmp/vq_job.soak.XXXXXX)"
cleanup() {
    set +e
    soak_cleanup
    if [[ "${VQ_KEEP_CLUSTER:-}" == 1 ]]; then
        vq_log "VQ_KEEP_CLUSTER=1: leaving the cluster in $(vq_cluster_home "$CLUSTER_DIR") (source its cluster.env)"
    else
        vq_cluster_destroy "$CLUSTER_DIR"
    fi
}
# shellcheck disable=SC2154  # rc is assigned in the trap
trap 'rc=$?; trap - EXIT; cleanup; exit $rc' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The settings the soak relies on: a short execution timeout (slow jobs hit it, and a killed
# consumer's jobs come back soon), a short shutdown grace (fast stops cut handlers), no
# retention (every job is still there for the accounting), and the backend type in each log
# line (the executors' errors are counted from it). fsync is off: the faults are process
# crashes, which the OS page cache survives.
vq_cluster_start "$CLUSTER_DIR" "${SOAK_PORT:-$(vq_free_port)}" \
    "fsync = off" \
    "vq.execution_timeout_ms = 3000" \
    "vq.shutdown_grace_ms = 1000" \
    "vq.retention_finished = -1" \
    "vq.retention_dead_letter = -1" \
    "vq.retention_outbox_failed = -1" \
    "log_line_prefix = '%m [%p] %b '"
export VQ_CLUSTER_DIR VQ_CLUSTER_DATA VQ_PG_BIN PGHOST PGPORT PGUSER
export PGDATABASE=soak
vq_fresh_db soak vq_job

# shellcheck source=test/scenarios/lib/common.sh
. test/scenarios/lib/common.sh
# shellcheck source=test/soak/lib.sh
. test/soak/lib.sh

SOAK_SECS="${SOAK_SECS:-600}"
SOAK_RATE="${SOAK_RATE:-1000}"
SOAK_SPECIAL_TPS="${SOAK_SPECIAL_TPS:-20}"
SOAK_FAULTS="${SOAK_FAULTS:-kill_executor kill_launcher kill_consumer immediate immediate fast fast snapshot pause alter reregister consumer_restart}"
SOAK_GAP_MS="${SOAK_GAP_MS:-2000 8000}"
SOAK_HOLD_SECS="${SOAK_HOLD_SECS:-60}"
SOAK_FUTURE_SECS="${SOAK_FUTURE_SECS:-20}"
SOAK_SETTLE_SECS="${SOAK_SETTLE_SECS:-180}"

soak_run

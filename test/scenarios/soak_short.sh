#!/usr/bin/env bash
# soak_short.sh: the chaos soak of test/soak/lib.sh for about 60 s in the suite's cluster
# (`make soak` runs it for 10 minutes on a cluster of its own). For 35 s producers commit
# ~400 jobs/s (vq_enqueue and vq_enqueue_many in transactions, some rolled back on purpose;
# DELAYED_JOB and NOTIFY outbox publishes; future-dated jobs; jobs failing until their last
# attempt or always; jobs timing out; NOTIFY jobs served by vq_consumer; jobs cancelled),
# while each of these faults strikes at least once, in random order: kill -9 of an
# executor, of the launcher and of the consumer, pg_ctl stop -m immediate and -m fast with
# restarts, a snapshot held for 15 s, a queue paused and resumed, vq_alter_queue, and
# re-registration of a handler. Once everything has settled the exact accounting is printed;
# the scenario fails on any violated 'must' (nothing lost, no duplicate effect, one job per
# outbox row, no attempt consumed by an orderly stop, ...). The cluster is left running.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
: "${VQ_REPO_ROOT:?}" "${VQ_CLUSTER_DATA:?}" "${VQ_CLUSTER_DIR:?}"
# shellcheck source=scripts/lib.sh
. "$VQ_REPO_ROOT/scripts/lib.sh"
# shellcheck source=test/soak/lib.sh
. "$VQ_REPO_ROOT/test/soak/lib.sh"

cleanup() {
    local rc=$?
    set +e
    soak_cleanup
    cleanup_configs
    exit "$rc"
}
trap cleanup EXIT

# what the soak relies on (test/soak/soak.sh says why)
set_config vq.execution_timeout_ms 3000
set_config vq.shutdown_grace_ms 1000
set_config vq.retention_finished -1
set_config vq.retention_dead_letter -1
set_config vq.retention_outbox_failed -1
set_config log_line_prefix '%m [%p] %b '

SOAK_SECS="${SOAK_SECS:-35}"
SOAK_RATE="${SOAK_RATE:-400}"
SOAK_SPECIAL_TPS="${SOAK_SPECIAL_TPS:-10}"
SOAK_FAULTS="${SOAK_FAULTS:-kill_executor kill_launcher kill_consumer immediate fast snapshot pause alter reregister}"
SOAK_GAP_MS="${SOAK_GAP_MS:-500 2000}"
SOAK_HOLD_SECS="${SOAK_HOLD_SECS:-15}"
SOAK_FUTURE_SECS="${SOAK_FUTURE_SECS:-4}"
SOAK_SETTLE_SECS="${SOAK_SETTLE_SECS:-40}"

soak_run
log "PASS: chaos soak accounting"

#!/usr/bin/env bash
# failover.sh: the short run of test/failover/failover.sh (`make failover` runs the long one).
#   Its own pg_auto_failover formation (a monitor and two nodes with vq_job preloaded, on free
#   ports, in /tmp), not the suite's cluster: producers through a multi-host connection string,
#   one `pg_autoctl perform switchover`, then a SIGKILL of the primary's node and its return as
#   a standby. Checks: executors never on a standby; a job runs on the new primary within 5 s of
#   its accepting writes; every acknowledged enqueue kept; every job run exactly once; jobs
#   RUNNING on the old primary rescued on the new one; the old primary back as an idle standby.
#   Every process of the formation is stopped on exit, whatever the outcome.
set -euo pipefail
# On tmpfs when there is room: pg_rewind and base backups sync every file they write, which
# takes seconds on a slow disk and is not what is tested (`make failover` runs on disk).
base=/tmp
if [[ -d /dev/shm && -w /dev/shm ]] && (($(df -Pk /dev/shm | awk 'NR == 2 { print $4 }') > 2097152)); then
    base=/dev/shm
fi
exec env FO_BASE_DIR="$base" FO_EVENTS="switchover kill" FO_LOAD_SECS=3 FO_PRODUCERS=2 FO_PINNED=3 \
    "${VQ_REPO_ROOT:?}/test/failover/failover.sh"

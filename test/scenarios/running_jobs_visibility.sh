#!/usr/bin/env bash
# running_jobs_visibility.sh: what runs now is shown only to those who may see the job.
#   A job of role A sleeps in its handler. vq.running_jobs_now() (which reads the executors'
#   shared memory, beside row security) and the view vq.running_jobs show it to A and to a
#   superuser, and show nothing to role B, which is not a member of A.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

A="vq_rjv_a_$$"
B="vq_rjv_b_$$"
trap 'drop_roles "$A" "$B"' EXIT

log "setup: roles $A, $B; a handler that sleeps"
qs >/dev/null <<SQL
CREATE ROLE "$A";
CREATE ROLE "$B";
CREATE FUNCTION public.rjv_sleep(p jsonb) RETURNS void LANGUAGE plpgsql
    AS \$\$ BEGIN PERFORM pg_sleep((p ->> 'secs')::float8); END \$\$;
GRANT EXECUTE ON FUNCTION public.rjv_sleep(jsonb) TO "$A";
SELECT vq_register_handler('rjv_sleep', 'public.rjv_sleep(jsonb)');
SQL
id="$(q_as "$A" "SELECT vq_enqueue('rjv_sleep', '{\"secs\": 4}')")"
wait_for "SELECT count(*) = 1 FROM vq.running_jobs_now() WHERE execution_id = '$id'" 10 "the job running"

log "who sees it"
assert_eq 1 "$(q_as "$A" "SELECT count(*) FROM vq.running_jobs_now() WHERE execution_id = '$id'")" "running_jobs_now() as $A"
assert_eq 1 "$(q_as "$A" "SELECT count(*) FROM vq.running_jobs WHERE execution_id = '$id'")" "vq.running_jobs as $A"
assert_eq 0 "$(q_as "$B" "SELECT count(*) FROM vq.running_jobs_now()")" "running_jobs_now() as $B"
assert_eq 0 "$(q_as "$B" "SELECT count(*) FROM vq.running_jobs")" "vq.running_jobs as $B"
assert_eq 1 "$(q "SELECT count(*) FROM vq.running_jobs_now() WHERE execution_id = '$id'")" "running_jobs_now() as the superuser"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 15 "the job COMPLETED"
log "PASS"

#!/usr/bin/env bash
# consumer_auth.sh: who may take and reply to external handlers' jobs, through vq_consumer
# (connected as each role) and by hand; and replies that come too late.
#   1. a stranger (neither a member of the enqueuing role nor granted): `vq_consumer --once`
#      takes nothing of another role's jobs and exits 0 (the jobs stay ENQUEUED at attempt 0
#      with no transition, no command ran); by hand, vq_take_jobs returns nothing, and for a
#      job the superuser holds vq_extend_leases returns nothing and vq_reply_jobs is ignored
#      ('no such job that you may reply to'): the job is untouched (these two are reported at
#      the end, so that the rest runs).
#   2. a role granted with vq_grant_consumer: `--once` completes the handler's jobs (at
#      attempt 0, each command run once) but takes nothing of another handler; after
#      vq_revoke_consumer it takes nothing again.
#   3. a member of the enqueuing role: `--once` completes the jobs of both handlers.
#   4. a late reply: a job taken with a 1 s lease and not answered is ABANDONED ('lease
#      expired ...'), retried at attempt 1; the reply for attempt 0 is then ignored (the
#      reason names the attempts), vq_complete for attempt 0 returns false with a WARNING
#      (VQ011), nothing changes; attempt 1 taken and completed.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

R_ENQ="vq_nca_enq_$$"           # enqueues the jobs
R_MEMBER="vq_nca_member_$$"     # member of R_ENQ
R_STRANGER="vq_nca_stranger_$$" # no relation to R_ENQ, never granted
R_WORKER="vq_nca_worker_$$"     # granted as a consumer of nca_auth, later revoked
TMPD="$(mktemp -d /tmp/vq_nca.XXXXXX)"
# shellcheck source=test/scenarios/lib/consumer.sh
. "$(dirname "$0")/lib/consumer.sh"
export NCA_DIR="$TMPD/ran"
mkdir -p "$NCA_DIR"

cleanup() {
    local rc=$?
    set +e
    consumer_kill_all
    drop_roles "$R_MEMBER" "$R_STRANGER" "$R_WORKER" "$R_ENQ"
    if ((rc != 0)); then
        for f in "$TMPD"/*.log; do
            [[ -s "$f" ]] && { echo "---- $f (last 20 lines)"; tail -n 20 "$f"; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

# the command: one file per run
printf '#!/bin/sh\ntouch "$NCA_DIR/$VQ_JOB_ID.$VQ_ATTEMPT.$NCA_ROLE"\n' >"$TMPD/cmd.sh"
chmod +x "$TMPD/cmd.sh"
ran() { find "$NCA_DIR" -type f -name "$1" | wc -l | tr -d ' '; }
# once ROLE HANDLER...: vq_consumer --once connected as ROLE; sets RC
once() {
    local role="$1" args=()
    shift
    for h in "$@"; do args+=(--handler "$h"); done
    RC=0
    NCA_ROLE="$role" timeout 60 "$CONSUMER" --dbname "host=$PGHOST port=$PGPORT user=$role dbname=$PGDATABASE" \
        "${args[@]}" --concurrency 2 --once --pass-env NCA_DIR --pass-env NCA_ROLE -- "$TMPD/cmd.sh" \
        >>"$TMPD/once.$role.log" 2>&1 || RC=$?
}
# states PATTERN: "state/attempt:count ..." of the jobs whose job_id is LIKE PATTERN
states() {
    q "SELECT string_agg(s, ' ' ORDER BY s) FROM (SELECT state || '/' || attempt_number || ':' || count(*) AS s
         FROM vq.job WHERE job_id LIKE '$1' GROUP BY state, attempt_number) x"
}

log "setup: roles, queues, NOTIFY handlers"
qs <<SQL >/dev/null
CREATE ROLE "$R_ENQ";
CREATE ROLE "$R_MEMBER" LOGIN IN ROLE "$R_ENQ";
CREATE ROLE "$R_STRANGER" LOGIN;
CREATE ROLE "$R_WORKER" LOGIN;
SELECT vq_create_queue('nca_q', sleep_delay_ms => 200, max_concurrent_jobs => 50,
                       backoff_strategy => 'LINEAR', backoff_base_delay_ms => 200, backoff_max_delay_ms => 1000);
SELECT vq_register_notify_handler('nca_auth', 'nca_auth_ch', 'nca_q');
SELECT vq_register_notify_handler('nca_auth2', 'nca_auth2_ch', 'nca_q');
SELECT vq_register_notify_handler('nca_held', 'nca_held_ch', 'nca_q');
SELECT vq_grant_producer(h, '$R_ENQ') FROM unnest(ARRAY['nca_auth', 'nca_auth2', 'nca_held']) h;
SQL
q_as "$R_ENQ" "SELECT vq_enqueue_many('nca_auth', array_fill('{\"secret\": 1}'::jsonb, ARRAY[3]), job_ids => ARRAY['a-1', 'a-2', 'a-3'])" >/dev/null
q_as "$R_ENQ" "SELECT vq_enqueue('nca_auth2', '{\"secret\": 2}', job_id => 'b-1')" >/dev/null

# ---- 1. a stranger ----------------------------------------------------------------------------
log "1. a stranger takes nothing"
once "$R_STRANGER" nca_auth nca_auth2
assert_eq 0 "$RC" "exit status of the stranger's vq_consumer --once"
assert_eq "ENQUEUED/0:3" "$(states 'a-%')" "nca_auth jobs after the stranger's consumer"
assert_eq "ENQUEUED/0:1" "$(states 'b-%')" "nca_auth2 job after the stranger's consumer"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_transition t JOIN vq.job j USING (execution_id) WHERE j.job_id IN ('a-1', 'a-2', 'a-3', 'b-1')")" \
    "transitions of the jobs after the stranger's consumer"
assert_eq 0 "$(ran '*')" "commands the stranger's consumer ran"
assert_eq 0 "$(q_as "$R_STRANGER" "SELECT count(*) FROM vq_take_jobs(ARRAY['nca_auth', 'nca_auth2'], 100)")" "jobs a stranger takes by hand"
# a job the superuser holds (handler nca_held): the stranger's extension and reply touch nothing
ID_HELD="$(q_as "$R_ENQ" "SELECT vq_enqueue('nca_held', '{}', job_id => 'h-1')")"
assert_eq "$ID_HELD" "$(q "SELECT execution_id FROM vq_take_jobs(ARRAY['nca_held'], 1, '60 s')")" "the superuser's take of h-1"
assert_eq 0 "$(q_as "$R_STRANGER" "SELECT count(*) FROM vq_extend_leases(ARRAY['$ID_HELD']::uuid[], ARRAY[0])")" \
    "leases the stranger extends"
got="$(q_as "$R_STRANGER" "SELECT coalesce(string_agg(ignored, ','), '(applied)') FROM vq_reply_jobs(ARRAY['$ID_HELD']::uuid[], ARRAY[0])")"
[[ "$got" == "no such job that you may reply to" ]] ||
    fail_later "the stranger's vq_reply_jobs for a job the superuser holds: expected [no such job that you may reply to], found [$got]"
got="$(q "SELECT state || '|' || attempt_number FROM vq.job WHERE execution_id = '$ID_HELD'")"
[[ "$got" == "RUNNING|0" ]] || fail_later "h-1 after the stranger's reply: expected [RUNNING|0], found [$got]"

# ---- 2. a granted role --------------------------------------------------------------------------
log "2. a granted role takes the handler's jobs, not another handler's"
q "SELECT vq_grant_consumer('nca_auth', '$R_WORKER')" >/dev/null
once "$R_WORKER" nca_auth nca_auth2
assert_eq 0 "$RC" "exit status of the granted role's vq_consumer --once"
assert_eq "COMPLETED/0:3" "$(states 'a-%')" "nca_auth jobs after the granted role's consumer"
assert_eq "ENQUEUED/0:1" "$(states 'b-%')" "nca_auth2 job after the granted role's consumer (not granted)"
assert_eq "3|3" "$(ran "a-*.0.$R_WORKER")|$(ran '*')" "commands run by the granted role's consumer|in all"
assert_eq t "$(q "SELECT vq_revoke_consumer('nca_auth', '$R_WORKER')")" "vq_revoke_consumer"
q_as "$R_ENQ" "SELECT vq_enqueue('nca_auth', '{\"secret\": 3}', job_id => 'a-4')" >/dev/null
once "$R_WORKER" nca_auth
assert_eq 0 "$RC" "exit status of the revoked role's vq_consumer --once"
assert_eq "ENQUEUED/0:1" "$(states 'a-4')" "job a-4 after the revoked role's consumer"

# ---- 3. a member of the enqueuing role -----------------------------------------------------------
log "3. a member of the enqueuing role takes its jobs"
once "$R_MEMBER" nca_auth nca_auth2
assert_eq 0 "$RC" "exit status of the member's vq_consumer --once"
assert_eq "COMPLETED/0:1|COMPLETED/0:1" "$(states 'a-4')|$(states 'b-%')" "jobs a-4|b-1 after the member's consumer"
assert_eq 2 "$(ran "*.0.$R_MEMBER")" "commands run by the member's consumer"

# ---- 4. a late reply -------------------------------------------------------------------------------
log "4. a reply after the lease expired is ignored"
L="$(q "SELECT vq_enqueue('nca_auth', '{\"late\": 1}', job_id => 'late-1', max_attempts => 5)")"
assert_eq "$L|0" "$(q "SELECT execution_id || '|' || attempt FROM vq_take_jobs(ARRAY['nca_auth'], 5, '1 s')")" "the take of late-1"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job_transition WHERE execution_id = '$L' AND kind = 'ABANDONED')" 10 \
    "attempt 0 of late-1 ABANDONED after its 1 s lease" "$L"
assert_eq "0|RUNNING>ENQUEUED|true" "$(q "SELECT attempt_number || '|' || from_state || '>' || to_state || '|' || (error LIKE 'lease expired at %')
                                           FROM vq.job_transition WHERE execution_id = '$L' AND kind = 'ABANDONED'")" \
    "ABANDONED transition: attempt|from>to|error 'lease expired at ...'"
ignored="$(q "SELECT ignored FROM vq_reply_jobs(ARRAY['$L']::uuid[], ARRAY[0])")"
[[ "$ignored" == *"attempt 0"*"attempt 1"* || "$ignored" == "the job is ENQUEUED" ]] ||
    fail "the late reply for attempt 0: expected it ignored naming the attempts (or the job ENQUEUED), got [$ignored]"
out="$(psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SELECT vq_complete('$L', 0)" 2>&1)"
[[ "$out" == *"VQ011"*"f" || "$out" == *"VQ011"* ]] || fail "vq_complete for attempt 0: expected a VQ011 WARNING, got [$out]"
[[ "$(tail -n 1 <<<"$out")" == f ]] || fail "vq_complete for attempt 0: expected false, got [$out]"
assert_eq "ENQUEUED/1" "$(q "SELECT state || '/' || attempt_number FROM vq.job WHERE execution_id = '$L'")" "late-1 after the late replies"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job WHERE execution_id = '$L' AND scheduled_at <= now())" 5 "late-1's retry due"
assert_eq "$L|1" "$(q "SELECT execution_id || '|' || attempt FROM vq_take_jobs(ARRAY['nca_auth'], 5)")" "the take of late-1's attempt 1"
assert_eq 0 "$(q "SELECT count(*) FROM vq_reply_jobs(ARRAY['$L']::uuid[], ARRAY[1])")" "replies ignored for attempt 1"
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,ABANDONED:0:RUNNING>ENQUEUED,CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED" \
    "$(transitions "$L")" "history of late-1"

fail_summary
log "PASS consumer_auth"

#!/usr/bin/env bash
# notify_consumer_auth.sh: replies to NOTIFY jobs by hand (psql): late replies, who may
# reply, and the queue capacity of NOTIFY jobs.
#   1. late reply (vq.execution_timeout_ms = 1000): a job pulled with vq_pull and not answered
#      is ABANDONED 1-3 s after the pull ("no reply within 1000 ms"), re-enqueued and
#      re-announced at attempt 1; vq_complete/vq_fail for attempt 0 then return false with a
#      WARNING (VQ011) naming attempt 0, and change nothing; attempt 1 pulled and completed ->
#      true, COMPLETED; a second vq_complete / vq_fail -> false with a WARNING ("COMPLETED").
#      History: CLAIMED:0, ABANDONED:0, CLAIMED:1, COMPLETED:1, and nothing afterwards.
#      A job announced and never pulled (vq.notify_take_timeout_ms = 500) is never abandoned
#      (the execution timeout counts from the take): RUNNING at attempt 0 past two timeouts,
#      announced again, then pulled and completed at attempt 0.
#   2. authorisation: a role that is neither a member of the enqueuing role nor granted gets
#      VQ010 from vq_complete / vq_fail with the same message as for a random uuid, nothing
#      from vq_pull or vq_take, NULL from vq_job_payload, no rows in vq.job, and cannot call
#      vq_grant_consumer; the job is untouched; while the job's row is locked, the stranger's
#      reply is refused at once (it never waits on nor takes another role's row lock). A member of the enqueuing role may read, pull
#      and reply. After vq_grant_consumer(handler, role) the role reads the payload, takes the
#      job with vq_take (once: a second take and a pull return nothing; not at another attempt,
#      not another handler's job) and completes it; after vq_revoke_consumer it cannot any more.
#   3. capacity (12 queues with max_concurrent_jobs 2, sleep_delay_ms 10 s; 5 jobs each, one
#      commit per queue, nobody replying; vq.notify_take_timeout_ms 10 minutes, so announced
#      jobs keep holding capacity): no queue ever has more than 2 RUNNING (announced);
#      after one reply another job is announced within 1.5 s (the reply frees room, as a
#      function handler's end does); vq_pull does not take jobs past the capacity either.
#      A paused queue announces nothing and vq_pull takes nothing from it; resumed, its job
#      is announced.
# Checks in part 3 are reported one by one ("soft"), and the script fails at the end if any did.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

export PGCLIENTENCODING=UTF8
R_ENQ="vq_nca_enq_$$"           # enqueues the jobs
R_MEMBER="vq_nca_member_$$"     # member of R_ENQ
R_STRANGER="vq_nca_stranger_$$" # no relation to R_ENQ, never granted
R_WORKER="vq_nca_worker_$$"     # granted as a consumer of nc_auth, later revoked
ROLES=("$R_MEMBER" "$R_STRANGER" "$R_WORKER" "$R_ENQ")
TMPD="$(mktemp -d /tmp/vq_nca.XXXXXX)"
SOFT_FAILS=0
NCAP=12                         # capacity queues (the over-capacity race is not hit every time)
declare -A LISTENER_FD=() LISTENER_PID=()

cleanup() {
    local rc=$? n
    set +e
    for n in "${!LISTENER_PID[@]}"; do listener_stop "$n" 2>/dev/null; done
    cleanup_configs
    drop_roles "${ROLES[@]}"
    if ((rc != 0)); then
        for f in "$TMPD"/*.out "$TMPD"/*.err; do
            [[ -s "$f" ]] && { echo "---- $f (last 20 lines)"; tail -n 20 "$f" | cut -c1-500; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

# ---- helpers -----------------------------------------------------------------------------
# sql_error ROLE SQL: "SQLSTATE: message" of the error SQL raises as ROLE (fails if it succeeds)
sql_error() {
    local out
    if out="$(psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SET ROLE \"$1\"" -c "$2" 2>&1 >/dev/null)"; then
        fail "expected an error from [$2] as $1, but it succeeded"
    fi
    sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\): \(.*\)$/\1: \2/p' <<<"$out" | head -n 1
}
# soft CMD...: run an assertion in a subshell; on failure count it and go on
soft() {
    if ! ("$@"); then
        SOFT_FAILS=$((SOFT_FAILS + 1))
    fi
}

# shellcheck source=test/scenarios/lib/listener.sh
. "$(dirname "$0")/lib/listener.sh"

# ---- setup -------------------------------------------------------------------------------
log "setup: roles, queues, NOTIFY handlers"
# shellcheck disable=SC2119
qs <<SQL >/dev/null
CREATE ROLE "$R_ENQ";
CREATE ROLE "$R_MEMBER" IN ROLE "$R_ENQ";
CREATE ROLE "$R_STRANGER";
CREATE ROLE "$R_WORKER";
SELECT vq_create_queue('nca_late_q', sleep_delay_ms => 200);
SELECT vq_create_queue('nca_auth_q', sleep_delay_ms => 200);
-- capacity 2; a 10 s poll interval, so that only a wake-up announces a job within seconds
SELECT vq_create_queue('nca_cap_' || k, sleep_delay_ms => 10000, max_concurrent_jobs => 2),
       vq_register_notify_handler('nc_cap_' || k, 'nca_cap_ch', 'nca_cap_' || k)
  FROM generate_series(1, $NCAP) k;
SELECT vq_create_queue('nca_pause_q', sleep_delay_ms => 200);
SELECT vq_register_notify_handler('nc_late', 'nca_late_ch', 'nca_late_q', max_attempts => 5);
SELECT vq_register_notify_handler('nc_late2', 'nca_late_ch', 'nca_late_q', max_attempts => 2);
SELECT vq_register_notify_handler('nc_auth', 'nca_auth_ch', 'nca_auth_q');
SELECT vq_register_notify_handler('nc_auth2', 'nca_auth2_ch', 'nca_auth_q');
SELECT vq_register_notify_handler('nc_paused', 'nca_pause_ch', 'nca_pause_q');
-- enqueuing for a NOTIFY handler needs a producer grant
SELECT vq_grant_producer(h, '$R_ENQ') FROM unnest(ARRAY['nc_auth', 'nc_auth2']) h;
SQL

# ---- 1. late reply -------------------------------------------------------------------------
log "1. late reply (vq.execution_timeout_ms = 1000)"
set_config vq.execution_timeout_ms 1000
set_config vq.notify_take_timeout_ms 500
listener_start late nca_late_ch
L="$(q "SELECT vq_enqueue('nc_late', '{\"late\": 1}', job_id => 'late-1')")"
# announced and never pulled (max_attempts 2): see below
L2="$(q "SELECT vq_enqueue('nc_late2', '{\"late\": 2}', job_id => 'late-2')")"
listener_wait late "\"execution_id\": \"$L\".*\"attempt\": 0" 10
assert_eq "$L|0" "$(q "SELECT execution_id || '|' || attempt FROM vq_pull('nc_late', 5)")" "vq_pull of the announced job"
PULLED_MS="$(q "SELECT round(extract(epoch FROM consumer_claimed_at) * 1000) FROM vq.job WHERE execution_id = '$L'")"
[[ -n "$PULLED_MS" ]] || fail "consumer_claimed_at not set by vq_pull (job: $(job_state "$L"))"

wait_for "SELECT EXISTS (SELECT 1 FROM vq.job_transition WHERE execution_id = '$L' AND kind = 'ABANDONED')" 5 \
    "attempt 0 of late-1 ABANDONED after no reply for 1 s (job: $(job_state "$L"))"
got="$(q "SELECT attempt_number || '|' || from_state || '>' || to_state || '|' || error || '|' ||
                 (round(extract(epoch FROM at) * 1000) - $PULLED_MS BETWEEN 1000 AND 3000)
            FROM vq.job_transition WHERE execution_id = '$L' AND kind = 'ABANDONED'")"
assert_eq "0|RUNNING>ENQUEUED|no reply within 1000 ms|true" "$got" \
    "ABANDONED transition: attempt|from>to|error|within 1-3 s of the pull"
# re-announced at attempt 1; answer it at once (its own 1 s clock runs from here)
listener_wait late "\"execution_id\": \"$L\".*\"attempt\": 1" 5
psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -v "id=$L" >"$TMPD/reply.out" 2>"$TMPD/reply.err" <<'SQL'
SELECT 'late_complete=' || vq_complete(:'id', 0);
SELECT 'late_fail=' || vq_fail(:'id', 'late failure', 0);
SELECT 'after=' || state || '/' || attempt_number || '/' || (consumer_claimed_at IS NULL) FROM vq.job WHERE execution_id = :'id';
SELECT 'pulled=' || attempt FROM vq_pull('nc_late', 5);
SELECT 'ok=' || vq_complete(:'id', 1);
SELECT 'again=' || vq_complete(:'id', 1);
SELECT 'again_fail=' || vq_fail(:'id', 'too late', 1);
SELECT 'final=' || state || '/' || attempt_number FROM vq.job WHERE execution_id = :'id';
SQL
assert_eq "late_complete=false
late_fail=false
after=RUNNING/1/true
pulled=1
ok=true
again=false
again_fail=false
final=COMPLETED/1" "$(cat "$TMPD/reply.out")" "late replies, then pull + reply for attempt 1, then repeated replies"
warnings="$(grep '^WARNING:' "$TMPD/reply.err" || true)"
assert_eq 4 "$(grep -c . <<<"$warnings")" "WARNING lines of the ignored replies (stderr: $(cat "$TMPD/reply.err"))"
assert_eq 4 "$(grep -c "^DETAIL:  The reply was for job $L\.\$" "$TMPD/reply.err")" "DETAIL lines naming the job of the ignored replies"
for i in 1 2; do
    w="$(sed -n "${i}p" <<<"$warnings")"
    [[ "$w" == "WARNING:  VQ011: reply ignored: "*"attempt 0"*"attempt 1"* ]] ||
        fail "late reply $i: expected a VQ011 WARNING naming attempt 0 and the job's attempt 1, got [$w]"
done
for i in 3 4; do
    w="$(sed -n "${i}p" <<<"$warnings")"
    [[ "$w" == "WARNING:  VQ011: reply ignored: "*COMPLETED* ]] ||
        fail "repeated reply $((i - 2)): expected a VQ011 WARNING saying the job is COMPLETED, got [$w]"
done
EXPECT_HISTORY="CLAIMED:0:ENQUEUED>RUNNING,ABANDONED:0:RUNNING>ENQUEUED,CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED"
assert_eq "$EXPECT_HISTORY" "$(transitions "$L")" "history of late-1"
assert_stays "SELECT count(*) || '|' || max(state::text) FROM vq.job_transition t JOIN vq.job j USING (execution_id)
               WHERE execution_id = '$L'" 1.5 "late-1's history and state after COMPLETED (past another timeout period)"

# late-2, announced and never taken: the execution timeout counts from the take, so it is
# never abandoned; after vq.notify_take_timeout_ms (500 ms here) it holds no capacity and is
# announced again while its queue has room; a consumer that comes later takes it at attempt 0.
assert_stays "SELECT state || '/' || attempt_number || '/' ||
                     (SELECT string_agg(kind, ',') FROM vq.job_transition WHERE execution_id = '$L2')
                FROM vq.job WHERE execution_id = '$L2'" 2.5 \
    "late-2, never taken, past two execution timeouts: RUNNING at attempt 0 with one CLAIMED transition"
deadline=$((SECONDS + 5))
while n="$(grep -c "\"execution_id\": \"$L2\".*\"attempt\": 0" "$TMPD/late.out" || true)"; ((n < 2)); do
    ((SECONDS < deadline)) || fail "late-2 was announced $n time(s) in 5 s; expected it announced again (take timeout 500 ms)"
    printf 'SELECT 1 WHERE false;\n' >&"${LISTENER_FD[late]}"
    sleep 0.1
done
assert_eq "$L2|0" "$(q "SELECT execution_id || '|' || attempt FROM vq_pull('nc_late2', 5)")" "vq_pull of late-2 by a late consumer"
assert_eq t "$(q "SELECT vq_complete('$L2', 0)")" "vq_complete of late-2 at attempt 0"
assert_eq "CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED" "$(transitions "$L2")" "history of late-2"
listener_stop late
reset_config vq.execution_timeout_ms
reset_config vq.notify_take_timeout_ms

# ---- 2. authorisation ----------------------------------------------------------------------
log "2. who may pull, read and reply"
J1="$(q_as "$R_ENQ" "SELECT vq_enqueue('nc_auth', '{\"secret\": \"s1\"}', job_id => 'auth-1')")"
K1="$(q_as "$R_ENQ" "SELECT vq_enqueue('nc_auth2', '{\"secret\": \"k1\"}', job_id => 'auth2-1')")"
wait_for "SELECT count(*) = 2 FROM vq.job WHERE execution_id IN ('$J1', '$K1') AND state = 'RUNNING'" 5 "auth-1 and auth2-1 announced"

log "   a stranger"
RANDOM_ID="$(q "SELECT gen_random_uuid()")"
e_rand="$(sql_error "$R_STRANGER" "SELECT vq_complete('$RANDOM_ID', 0)")"
assert_eq "VQ010: no job $RANDOM_ID that you may reply to" "$e_rand" "vq_complete of a random uuid"
e_job="$(sql_error "$R_STRANGER" "SELECT vq_complete('$J1', 0)")"
assert_eq "${e_rand//$RANDOM_ID/$J1}" "$e_job" "vq_complete of another role's job by a stranger (same error as for a random uuid)"
e_job="$(sql_error "$R_STRANGER" "SELECT vq_fail('$J1', 'nope', 0)")"
assert_eq "${e_rand//$RANDOM_ID/$J1}" "$e_job" "vq_fail of another role's job by a stranger"
e_job="$(sql_error "$R_STRANGER" "SELECT vq_complete('$J1')")"
assert_eq "${e_rand//$RANDOM_ID/$J1}" "$e_job" "vq_complete (no attempt) of another role's job by a stranger"
assert_eq 0 "$(q_as "$R_STRANGER" "SELECT count(*) FROM vq_pull('nc_auth', 100)")" "jobs a stranger pulls"
assert_eq 0 "$(q_as "$R_STRANGER" "SELECT count(*) FROM vq_take('$J1')")" "vq_take of another role's job by a stranger"
assert_eq t "$(q_as "$R_STRANGER" "SELECT vq_job_payload('$J1') IS NULL")" "vq_job_payload of another role's job, as a stranger"
assert_eq 0 "$(q_as "$R_STRANGER" "SELECT count(*) FROM vq.job")" "vq.job rows a stranger sees"
e_job="$(sql_error "$R_STRANGER" "SELECT vq_grant_consumer('nc_auth', '$R_STRANGER')")"
[[ "$e_job" == 42501:* ]] || fail "vq_grant_consumer by a plain role: expected 42501 (permission denied), got [$e_job]"
assert_eq "RUNNING|true|0" "$(q "SELECT state || '|' || (consumer_claimed_at IS NULL) || '|' || attempt_number FROM vq.job WHERE execution_id = '$J1'")" \
    "auth-1 after the stranger's attempts (state|not claimed|attempt)"
assert_eq "CLAIMED:0:ENQUEUED>RUNNING" "$(transitions "$J1")" "history of auth-1 after the stranger's attempts"
# no lock side channel: while the job's row is locked (here by a superuser session holding it
# FOR UPDATE), a stranger's reply is refused at once instead of waiting for the lock
psql -XAtq -c "BEGIN; SELECT 1 FROM vq.job WHERE execution_id = '$J1' FOR UPDATE; SELECT pg_sleep(5); COMMIT" >/dev/null 2>&1 &
locker=$!
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE 'BEGIN; SELECT 1 FROM vq.job WHERE execution_id%'
           AND state = 'active' AND wait_event = 'PgSleep')" 5 "the row lock to be held"
e_job="$(sql_error "$R_STRANGER" "SET lock_timeout = '500ms'; SELECT vq_complete('$J1', 0)")"
assert_eq "${e_rand//$RANDOM_ID/$J1}" "$e_job" "a stranger's vq_complete while the row is locked (not a lock wait: 55P03)"
kill "$locker" 2>/dev/null || true
wait "$locker" 2>/dev/null || true
q "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE 'BEGIN; SELECT 1 FROM vq.job WHERE execution_id%'" >/dev/null

log "   a granted consumer"
q "SELECT vq_grant_consumer('nc_auth', '$R_WORKER')" >/dev/null
assert_eq t "$(q_as "$R_WORKER" "SELECT vq_job_payload('$J1') = '{\"secret\": \"s1\"}'")" "vq_job_payload as the granted role"
assert_eq t "$(q_as "$R_WORKER" "SELECT vq_job_payload('$K1') IS NULL")" "vq_job_payload of another handler's job as the granted role"
e_job="$(sql_error "$R_WORKER" "SELECT vq_complete('$K1', 0)")"
assert_eq "VQ010: no job $K1 that you may reply to" "$e_job" "vq_complete of another handler's job by the granted role"
got="$(psql -XAtq -v ON_ERROR_STOP=1 -c "SET ROLE \"$R_WORKER\"" \
    -c "SELECT 'other_handler=' || count(*) FROM vq_take('$K1', 0)" \
    -c "SELECT 'wrong_attempt=' || count(*) FROM vq_take('$J1', 1)" \
    -c "SELECT 'taken=' || string_agg(execution_id || '/' || attempt || '/' || (payload->>'secret'), ',') FROM vq_take('$J1', 0)" \
    -c "SELECT 'again=' || count(*) FROM vq_take('$J1', 0)" \
    -c "SELECT 'pulled=' || count(*) FROM vq_pull('nc_auth', 100)" \
    -c "SELECT 'complete=' || vq_complete('$J1', 0)" \
    -c "SELECT 'after=' || count(*) FROM vq_take('$J1')")"
assert_eq "other_handler=0
wrong_attempt=0
taken=$J1/0/s1
again=0
pulled=0
complete=true
after=0" "$got" "the granted role takes auth-1 (once, only at its attempt, not another handler's job), then completes it"
assert_eq "COMPLETED" "$(q "SELECT state FROM vq.job WHERE execution_id = '$J1'")" "auth-1 state"

log "   revoked"
J2="$(q_as "$R_ENQ" "SELECT vq_enqueue('nc_auth', '{\"secret\": \"s2\"}', job_id => 'auth-2')")"
wait_for "SELECT state = 'RUNNING' FROM vq.job WHERE execution_id = '$J2'" 5 "auth-2 announced"
assert_eq t "$(q "SELECT vq_revoke_consumer('nc_auth', '$R_WORKER')")" "vq_revoke_consumer of a grant"
assert_eq f "$(q "SELECT vq_revoke_consumer('nc_auth', '$R_WORKER')")" "vq_revoke_consumer again"
assert_eq 0 "$(q_as "$R_WORKER" "SELECT count(*) FROM vq_pull('nc_auth', 100)")" "jobs the revoked role pulls"
assert_eq t "$(q_as "$R_WORKER" "SELECT vq_job_payload('$J2') IS NULL")" "vq_job_payload as the revoked role"
e_job="$(sql_error "$R_WORKER" "SELECT vq_complete('$J2', 0)")"
assert_eq "VQ010: no job $J2 that you may reply to" "$e_job" "vq_complete by the revoked role"

log "   a member of the enqueuing role"
assert_eq t "$(q_as "$R_MEMBER" "SELECT vq_job_payload('$J2') = '{\"secret\": \"s2\"}'")" "vq_job_payload as a member of the enqueuer"
got="$(psql -XAtq -v ON_ERROR_STOP=1 -c "SET ROLE \"$R_MEMBER\"" \
    -c "SELECT 'pulled=' || string_agg(execution_id || '/' || attempt, ',') FROM vq_pull('nc_auth', 100)" \
    -c "SELECT 'fail=' || vq_fail('$J2', 'member says no', 0)")"
assert_eq "pulled=$J2/0
fail=true" "$got" "a member of the enqueuing role pulls and fails auth-2"
assert_eq "ENQUEUED|1|member says no|CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED" \
    "$(q "SELECT state || '|' || attempt_number || '|' || last_error FROM vq.job WHERE execution_id = '$J2'")|$(transitions "$J2")" \
    "auth-2 after the member's vq_fail (state|attempt|last_error|history)"

# ---- 3. capacity and pause ---------------------------------------------------------------------
log "3. capacity: max_concurrent_jobs 2, five jobs per queue, nobody replying ($NCAP queues)"
# (announced jobs hold capacity until taken or vq.notify_take_timeout_ms: long enough here)
set_config vq.notify_take_timeout_ms 600000
# queue -> "running/enqueued" for every capacity queue
PER_QUEUE="SELECT string_agg(queue || '=' || r || '/' || e, ' ' ORDER BY queue) FROM (
             SELECT queue, count(*) FILTER (WHERE state = 'RUNNING') r, count(*) FILTER (WHERE state = 'ENQUEUED') e
               FROM vq.job WHERE queue LIKE 'nca_cap_%' GROUP BY queue) s"
# one commit per queue: each wakes both executors, which race for the queue's capacity
for ((k = 1; k <= NCAP; k++)); do
    q "SELECT vq_enqueue_many('nc_cap_$k', array_agg(jsonb_build_object('i', i)), job_ids => array_agg('cap-$k-' || i))
         FROM generate_series(1, 5) i" >/dev/null
    wait_for "SELECT count(*) >= 2 FROM vq.job WHERE queue = 'nca_cap_$k' AND state = 'RUNNING'" 5 "two nc_cap_$k jobs announced"
done
soft assert_stays "$PER_QUEUE" 1 "per-queue RUNNING/ENQUEUED with nobody replying"
over="$(q "SELECT string_agg(queue || '=' || n, ' ') FROM (SELECT queue, count(*) n FROM vq.job
             WHERE queue LIKE 'nca_cap_%' AND state = 'RUNNING' GROUP BY queue HAVING count(*) > 2) s")"
soft assert_eq "" "$over" "capacity-2 queues with more than 2 NOTIFY jobs RUNNING (queue=running)"

# a queue at exactly 2 RUNNING / 3 ENQUEUED for the next checks
CQ="$(q "SELECT queue FROM vq.job WHERE queue LIKE 'nca_cap_%' GROUP BY queue
          HAVING count(*) FILTER (WHERE state = 'RUNNING') = 2 AND count(*) FILTER (WHERE state = 'ENQUEUED') = 3
          ORDER BY queue LIMIT 1")"
[[ -n "$CQ" ]] || fail "no capacity queue at 2 RUNNING / 3 ENQUEUED: $(q "$PER_QUEUE")"
CH="nc_cap_${CQ#nca_cap_}"
RUNNING_CQ="SELECT count(*) FILTER (WHERE state = 'RUNNING') || '|' || count(*) FILTER (WHERE state = 'ENQUEUED')
              FROM vq.job WHERE queue = '$CQ'"
# reply to one announced job (not through vq_pull, which may take an ENQUEUED one instead)
FIRST="$(q "SELECT execution_id FROM vq.job WHERE queue = '$CQ' AND state = 'RUNNING' ORDER BY execution_id LIMIT 1")"
t_reply="$(now_ms)"
assert_eq t "$(q "SELECT vq_complete('$FIRST', 0)")" "reply to one announced job of $CQ"
soft wait_for "SELECT count(*) FILTER (WHERE state = 'RUNNING') = 2 FROM vq.job WHERE queue = '$CQ'" 1.5 \
    "another $CQ job announced within 1.5 s of the reply that freed room (the queue polls only every 10 s)"
wait_for "SELECT count(*) FILTER (WHERE state = 'RUNNING') = 2 FROM vq.job WHERE queue = '$CQ'" 15 \
    "another $CQ job announced after the reply, at the latest by the next 10 s poll"
log "   next job announced $(($(now_ms) - t_reply)) ms after the reply"
soft assert_eq "2|2" "$(q "$RUNNING_CQ")" "$CQ jobs RUNNING|ENQUEUED after one reply"

got="$(q "SELECT count(*) FROM vq_pull('$CH', 10)")"
soft assert_eq 2 "$got" "rows vq_pull('$CH', 10) takes with capacity 2 and 2 jobs announced"
soft assert_eq "2|2" "$(q "$RUNNING_CQ")" "$CQ jobs RUNNING|ENQUEUED after a consumer's vq_pull(.., 10)"

# drain: complete what is RUNNING, pull the rest
q "SELECT vq_alter_queue('nca_cap_' || k, sleep_delay_ms => 200) FROM generate_series(1, $NCAP) k" >/dev/null
deadline=$(($(now_ms) + 20000))
while [[ "$(q "SELECT count(*) FROM vq.job WHERE queue LIKE 'nca_cap_%' AND state <> 'COMPLETED'")" != 0 ]]; do
    (($(now_ms) < deadline)) || fail "capacity queues not drained after 20 s: $(q "$PER_QUEUE")"
    q "SELECT count(*) FROM generate_series(1, $NCAP) k, vq_pull('nc_cap_' || k, 10)" >/dev/null
    q "SELECT count(vq_complete(execution_id)) FROM vq.job WHERE queue LIKE 'nca_cap_%' AND state = 'RUNNING'" >/dev/null
    sleep 0.1
done
got="$(q "SELECT count(*) FROM vq.job j WHERE queue LIKE 'nca_cap_%' AND
              (SELECT string_agg(kind, ',' ORDER BY id) FROM vq.job_transition t
                WHERE t.execution_id = j.execution_id) <> 'CLAIMED,COMPLETED'")"
assert_eq 0 "$got" "capacity-queue jobs whose history is not CLAIMED,COMPLETED"

log "   a paused queue"
q "SELECT vq_pause_queue('nca_pause_q')" >/dev/null
P="$(q "SELECT vq_enqueue('nc_paused', '{\"p\": 1}', job_id => 'paused-1')")"
soft assert_stays "SELECT state FROM vq.job WHERE execution_id = '$P'" 1 "job of a paused queue (must stay ENQUEUED)"
soft assert_eq 0 "$(q "SELECT count(*) FROM vq_pull('nc_paused', 10)")" "jobs vq_pull takes from a paused queue"
q "SELECT vq_resume_queue('nca_pause_q')" >/dev/null
wait_for "SELECT state = 'RUNNING' FROM vq.job WHERE execution_id = '$P'" 5 "job announced after vq_resume_queue"
assert_eq t "$(q "SELECT vq_complete('$P')")" "vq_complete (no attempt given) of the resumed queue's job"

reset_config vq.notify_take_timeout_ms
((SOFT_FAILS == 0)) || fail "$SOFT_FAILS check(s) failed (see FAIL lines above)"
log "PASS notify_consumer_auth"

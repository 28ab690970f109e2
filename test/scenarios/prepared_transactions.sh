#!/usr/bin/env bash
# prepared_transactions.sh: jobs enqueued (and outbox rows published) in a prepared transaction
# start as promptly after COMMIT PREPARED as after a plain commit; ROLLBACK PREPARED wakes and
# forgets nothing. The queue polls once a minute, so only a wake-up at COMMIT PREPARED and claim
# positions that know of the jobs make them start within the bounds (3 s; seconds to a minute,
# or never for a priority level the executors do not know, without them).
#   1. due jobs at a known and at a new priority level, prepared in one session and committed
#      in another: both COMPLETED within 3 s of COMMIT PREPARED;
#   2. a delayed job (4 s): starts at its scheduled_at, within 3 s after it;
#   3. an outbox row published in a prepared transaction: relayed, its job COMPLETED within 3 s;
#   4. jobs at more priority levels than a prepared transaction's notes keep: all prompt;
#   5. ROLLBACK PREPARED: its job never exists, and a job planted by hand at the rolled-back
#      job's level, one the executors do not know (no commit told them), stays ENQUEUED for 3 s:
#      the rollback applied no note (that would lower the level's position and wake them) and
#      made them forget nothing; a COMMIT PREPARED with notes leaves it too (its notes lower
#      only its levels);
#   6. a server restart between PREPARE and COMMIT PREPARED (the notes are lost with shared
#      memory): the due job is COMPLETED within 3 s of COMMIT PREPARED, the delayed one at its
#      time, and a job planted after the restart runs too (the executors looked at everything).
# Needs max_prepared_transactions > 0 (./scripts/test sets it); otherwise sets it and restarts.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "${VQ_REPO_ROOT:?}/scripts/lib.sh"

RESET_PREPARED=0
on_exit() {
    local rc=$?
    set +e
    q "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'pt\_%' AND database = current_database()" 2>/dev/null |
        while read -r gid; do q "ROLLBACK PREPARED '$gid'" >/dev/null 2>&1; done
    if ((RESET_PREPARED)); then
        q "ALTER SYSTEM RESET max_prepared_transactions" >/dev/null 2>&1
        vq_cluster_restart fast >/dev/null 2>&1
        wait_ready 60
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

if [[ "$(q "SELECT current_setting('max_prepared_transactions')::int > 0")" != t ]]; then
    log "max_prepared_transactions is 0: setting it to 8 (server restart)"
    q "ALTER SYSTEM SET max_prepared_transactions = 8" >/dev/null
    RESET_PREPARED=1
    vq_cluster_restart fast || fail "restart failed"
    wait_ready 60
fi

log "setup: queue pt_q polling once a minute; handler pt_h recording its runs"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('pt_q', sleep_delay_ms => 60000, max_concurrent_jobs => 20);
CREATE TABLE pt_runs (tag text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.pt_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.pt_runs (tag) VALUES (p ->> 'tag') $$;
SELECT vq_register_handler('pt_h', 'public.pt_record(jsonb)', queue => 'pt_q');
SQL

# warm_up TAG: a plain job runs, so the executors know queue pt_q and sleep (poll in a minute).
warm_up() {
    local id
    id="$(q "SELECT vq_enqueue('pt_h', '{\"tag\": \"$1\"}')")"
    wait_state "$id" COMPLETED 15
}
# prepare GID: run the SQL read from stdin in a transaction, PREPARE TRANSACTION it as GID; prints what it returned.
prepare() {
    { echo "BEGIN;"; cat; echo "PREPARE TRANSACTION '$1';"; } | qs
}
# commit_prepared GID: COMMIT PREPARED in a session of its own; prints when it returned (epoch s).
commit_prepared() {
    q "COMMIT PREPARED '$1'" >/dev/null
    now_s
}
# assert_prompt ID SINCE WHAT: job ID COMPLETED within 15 s, and started within 3 s of SINCE (epoch s).
assert_prompt() {
    local lag
    wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$1'" 15 "$3: COMPLETED" "$1"
    lag="$(q "SELECT round(extract(epoch FROM coalesce(started_at, finished_at)) - $2, 3)
                FROM vq.job WHERE execution_id = '$1'")"
    log "$3: started ${lag}s after"
    assert_sql "SELECT $lag < 3" "$3: started within 3 s (took ${lag}s)"
}
# plant PRIORITY TAG: a due job written by hand (in a function, as no restore does), at a level
# the executors do not know: no commit lowers a position for it. Prints its execution id.
plant() {
    q "DO \$\$ BEGIN
         INSERT INTO vq.job_active (execution_id, state, priority, max_attempts, scheduled_at, created_at,
                                    updated_at, enqueued_by, queue, job_id, handler, handler_address,
                                    handler_function, payload, metadata)
         SELECT e, 'ENQUEUED', $1, 3, now(), now(), now(), 'postgres', 'pt_q', 'delayed-' || e, 'pt_h',
                'public.pt_record(jsonb)', 'public.pt_record(jsonb)'::regprocedure, '{\"tag\": \"$2\"}', '{}'
           FROM gen_random_uuid() e;
       END \$\$" >/dev/null
    q "SELECT execution_id FROM vq.job WHERE payload ->> 'tag' = '$2'"
}

warm_up warm-1

log "1. due jobs at a known level (0) and a new one (7), prepared, committed from another session"
mapfile -t ids < <(prepare pt_due <<'SQL'
SELECT vq_enqueue('pt_h', '{"tag": "due-0"}');
SELECT vq_enqueue('pt_h', '{"tag": "due-7"}', priority => 7);
SQL
)
((${#ids[@]} == 2)) || fail "expected two execution ids from the prepared enqueue, got [${ids[*]}]"
assert_sql "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE execution_id IN ('${ids[0]}', '${ids[1]}'))" \
    "prepared jobs are not visible before COMMIT PREPARED"
t0="$(commit_prepared pt_due)"
assert_prompt "${ids[0]}" "$t0" "prepared job at priority 0"
assert_prompt "${ids[1]}" "$t0" "prepared job at priority 7"

log "2. a delayed job (4 s) in a prepared transaction runs at its time"
id="$(prepare pt_later <<'SQL'
SELECT vq_enqueue('pt_h', '{"tag": "later"}', run_at => clock_timestamp() + interval '4 s');
SQL
)"
commit_prepared pt_later >/dev/null
due="$(q "SELECT extract(epoch FROM scheduled_at) FROM vq.job WHERE execution_id = '$id'")"
assert_prompt "$id" "$due" "prepared delayed job, after its scheduled_at"
assert_sql "SELECT started_at >= scheduled_at FROM vq.job WHERE execution_id = '$id'" \
    "the delayed job did not start before its scheduled_at"

log "3. an outbox row published in a prepared transaction"
oid="$(prepare pt_outbox <<'SQL'
SELECT vq_outbox_publish('pt_h', '{"tag": "outbox"}');
SQL
)"
t0="$(commit_prepared pt_outbox)"
wait_for "SELECT status = 'PUBLISHED' FROM vq.outbox WHERE id = $oid" 15 "outbox row $oid PUBLISHED"
id="$(q "SELECT execution_id FROM vq.job WHERE payload ->> 'tag' = 'outbox'")"
assert_prompt "$id" "$t0" "job relayed from a prepared outbox row"

log "4. jobs at six new priority levels in one prepared transaction"
prepare pt_many >/dev/null <<'SQL'
SELECT vq_enqueue('pt_h', jsonb_build_object('tag', 'many-' || p), priority => p) FROM generate_series(31, 36) p;
SQL
t0="$(commit_prepared pt_many)"
for id in $(q "SELECT execution_id FROM vq.job WHERE payload ->> 'tag' LIKE 'many-%'"); do
    assert_prompt "$id" "$t0" "prepared job $id of six levels"
done

log "5. ROLLBACK PREPARED wakes and forgets nothing"
planted="$(plant 14 planted-1)"        # the rolled-back job's level
rid="$(prepare pt_rollback <<'SQL'
SELECT vq_enqueue('pt_h', '{"tag": "rolled-back"}', priority => 14);
SQL
)"
q "ROLLBACK PREPARED 'pt_rollback'" >/dev/null
assert_stays "SELECT state || ' ' || (SELECT count(*) FROM pt_runs WHERE tag IN ('planted-1', 'rolled-back'))
                FROM vq.job WHERE execution_id = '$planted'" 3 "the planted job after ROLLBACK PREPARED"
assert_eq "ENQUEUED" "$(job_state "$planted" | cut -d'|' -f1)" "the planted job after ROLLBACK PREPARED"
assert_sql "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE execution_id = '$rid')" "the rolled-back job does not exist"
id="$(prepare pt_noted <<'SQL'
SELECT vq_enqueue('pt_h', '{"tag": "noted"}');
SQL
)"
t0="$(commit_prepared pt_noted)"
assert_prompt "$id" "$t0" "prepared job next to the planted one"
assert_eq "ENQUEUED" "$(job_state "$planted" | cut -d'|' -f1)" \
    "the planted job after a COMMIT PREPARED with notes (they lower only their own levels)"

log "6. a server restart between PREPARE and COMMIT PREPARED"
mapfile -t ids < <(prepare pt_restart <<'SQL'
SELECT vq_enqueue('pt_h', '{"tag": "restart-due"}');
SELECT vq_enqueue('pt_h', '{"tag": "restart-later"}', priority => 21, run_at => clock_timestamp() + interval '8 s');
SQL
)
((${#ids[@]} == 2)) || fail "expected two execution ids from the prepared enqueue, got [${ids[*]}]"
vq_cluster_restart fast || fail "restart failed"
wait_ready 60
wait_for "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
              AND datname = current_database()" 20 "executors back after the restart"
warm_up warm-2                                  # (and the job planted before the restart ran)
wait_state "$planted" COMPLETED 15
planted="$(plant 17 planted-2)"
t0="$(commit_prepared pt_restart)"
assert_prompt "${ids[0]}" "$t0" "due job prepared before the restart"
due="$(q "SELECT greatest(extract(epoch FROM scheduled_at), $t0) FROM vq.job WHERE execution_id = '${ids[1]}'")"
assert_prompt "${ids[1]}" "$due" "delayed job prepared before the restart, after its time"
assert_sql "SELECT started_at >= scheduled_at FROM vq.job WHERE execution_id = '${ids[1]}'" \
    "the delayed job did not start before its scheduled_at"
assert_prompt "$planted" "$t0" "job planted after the restart (the executors looked at everything)"

log "every run once: $(q "SELECT count(*) || ' runs, ' || count(DISTINCT tag) || ' tags' FROM pt_runs")"
assert_sql "SELECT count(*) = count(DISTINCT tag) FROM pt_runs" "no job ran twice"
assert_sql "SELECT NOT EXISTS (SELECT 1 FROM pt_runs WHERE tag = 'rolled-back')" "the rolled-back job never ran"
log "ok"

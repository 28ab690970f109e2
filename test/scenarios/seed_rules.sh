#!/usr/bin/env bash
# seed_rules.sh: rules of the job model that no other test pins down.
#   1. poll backoff (one executor, sleep_delay_ms 200): while a queue is empty its poll interval
#      doubles up to 4x (800 ms) and resets when work is found. A job made due behind the
#      executors' back (an UPDATE of scheduled_at: no wake-up) is found only by a poll: after
#      1.5 s of idleness the longest of 6 such waits is over 350 ms (the interval grew past the
#      base) and under 1.3 s (it stopped at 4x); one made due 150 ms after work was found (after
#      1.5 s idle) waits under 450 ms (the interval was reset to the base).
#   2. claim order by priority across executors (2 executors, batch 10): 60 jobs of priority 0
#      due a minute ago and 60 of priority 10 due now, committed together: the first job to
#      start is a priority-10 one, and at most 30 priority-0 jobs (of 60, all older) start before
#      the last priority-10 one (the last batches of priority 10 may still run in one executor while
#      the other, finding no priority-10 job left to claim, starts on priority 0).
#   3. the relay's retryable result for a DELAYED_JOB row: an enqueue that fails for another
#      reason than the job itself (here an injected trigger error) leaves the row PENDING with
#      'retryable: ...' and a retry time; once the fault is gone the row is PUBLISHED with
#      exactly one job.
#   4. a transient persistence error (a REPEATABLE READ enqueue of a job_id that a transaction
#      committed after its snapshot holds: 40001) carries the context line saying that
#      retrying the transaction may succeed.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

TMPD="$(mktemp -d)"
cleanup() {
    set +e
    q "DROP TRIGGER IF EXISTS sr_fault ON vq.job_active" >/dev/null 2>&1
    cleanup_configs
    rm -rf "$TMPD"
}
trap cleanup EXIT

log "setup: queues pb, po; handlers"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('pb', sleep_delay_ms => 200, max_concurrent_jobs => 10);
SELECT vq_create_queue('po', sleep_delay_ms => 100, max_concurrent_jobs => 100);
CREATE TABLE sr_started (execution_id uuid, priority int, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION sr_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION sr_record(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.sr_started (execution_id, priority) VALUES (c.execution_id, c.priority);
    PERFORM pg_sleep(0.005);
END $$;
SELECT vq_register_handler('sr_noop', 'sr_noop(jsonb)', queue => 'pb');
SELECT vq_register_handler('sr_record', 'sr_record(jsonb, vq.job_context)', queue => 'po');
SELECT vq_register_handler('sr_relayed', 'sr_noop(jsonb)', queue => 'po');
SQL

# ---------------------------------------------------------------------------
log "1. poll backoff"
one_executor
# due_behind_the_back: a job made due by an UPDATE (no wake-up); prints the ms until it started.
due_behind_the_back() {
    local id at
    id="$(q "SELECT vq_enqueue('sr_noop', '{}', '2999-01-01')")"
    at="$(q "UPDATE vq.job_active SET scheduled_at = now() WHERE execution_id = '$id' RETURNING clock_timestamp()")"
    wait_state "$id" COMPLETED 10
    q "SELECT round(extract(epoch FROM started_at - '$at'::timestamptz) * 1000) FROM vq.job WHERE execution_id = '$id'"
}
# due_after_work: in one transaction, a job due now (the commit wakes the executor, which finds
# it: work) and one made due 150 ms later behind its back; prints how long the second waited
# after its due time.
due_after_work() {
    local id
    id="$(qs <<'SQL' | tail -n 1
BEGIN;
SELECT vq_enqueue('sr_noop', '{}') IS NOT NULL;
SELECT vq_enqueue('sr_noop', '{}', '2999-01-01') AS xid \gset
UPDATE vq.job_active SET scheduled_at = now() + interval '150 ms' WHERE execution_id = :'xid'
RETURNING execution_id;
COMMIT;
SQL
)"
    wait_state "$id" COMPLETED 10
    q "SELECT round(extract(epoch FROM started_at - scheduled_at) * 1000) FROM vq.job WHERE execution_id = '$id'"
}
WARM="$(q "SELECT vq_enqueue('sr_noop', '{}')")"
wait_state "$WARM" COMPLETED 10
IDLE_WAITS=() RESET_WAITS=()
for i in 1 2 3 4 5 6; do
    wait_for "SELECT clock_timestamp() > max(finished_at) + interval '1.5 s' FROM vq.job WHERE handler = 'sr_noop'" 10 "1.5 s idle"
    IDLE_WAITS+=("$(due_behind_the_back)")
    wait_for "SELECT clock_timestamp() > max(finished_at) + interval '1.5 s' FROM vq.job WHERE handler = 'sr_noop'" 10 "1.5 s idle"
    RESET_WAITS+=("$(due_after_work)")
done
MAX_IDLE="$(printf '%s\n' "${IDLE_WAITS[@]}" | sort -n | tail -n 1)"
MAX_RESET="$(printf '%s\n' "${RESET_WAITS[@]}" | sort -n | tail -n 1)"
log "  waits after 1.5 s idle: ${IDLE_WAITS[*]} ms (longest $MAX_IDLE); due 150 ms after work: ${RESET_WAITS[*]} ms (longest $MAX_RESET)"
((MAX_IDLE > 350)) || fail "the longest wait after 1.5 s idle was ${MAX_IDLE} ms: the poll interval did not grow past the base (200 ms)"
((MAX_IDLE < 1300)) || fail "the longest wait after 1.5 s idle was ${MAX_IDLE} ms: the poll interval grew past 4x the base (800 ms)"
((MAX_RESET < 450)) || fail "a job due 150 ms after work was found waited ${MAX_RESET} ms: the interval was not reset to the base (200 ms)"
cleanup_configs

# ---------------------------------------------------------------------------
log "2. claim order by priority across executors"
set_config vq.batch_size 10
set_config vq.executors_per_database 2
set_config vq.max_executors 2
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
              AND datname = current_database()" 10 "two executors"
q "SELECT vq_enqueue('sr_record', '{}')" >/dev/null   # a first run, so that the handler is known fast
wait_for "SELECT count(*) = 1 FROM sr_started" 10 "the first sr_record job"
q "TRUNCATE sr_started" >/dev/null
qs >/dev/null <<'SQL'
BEGIN;
SELECT vq_enqueue_many('sr_record', array_fill('{}'::jsonb, ARRAY[60]), now() - interval '1 minute', priority => 0);
SELECT vq_enqueue_many('sr_record', array_fill('{}'::jsonb, ARRAY[60]), now(), priority => 10);
COMMIT;
SQL
wait_for "SELECT count(*) = 120 FROM sr_started" 30 "120 jobs started"
assert_eq 10 "$(q "SELECT priority FROM sr_started ORDER BY at LIMIT 1")" "the priority of the first job to start"
EARLY_LOW="$(q "SELECT count(*) FROM sr_started WHERE priority = 0
                  AND at < (SELECT max(at) FROM sr_started WHERE priority = 10)")"
log "  priority-0 jobs started before the last priority-10 one: $EARLY_LOW"
((EARLY_LOW <= 30)) || fail "$EARLY_LOW priority-0 jobs started before the last priority-10 one (at most 30 expected)"
cleanup_configs

# ---------------------------------------------------------------------------
log "3. the relay: a retryable DELAYED_JOB row, then delivered once"
qs >/dev/null <<'SQL'
CREATE FUNCTION public.sr_fault() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.payload ->> 'fault' = 'yes' THEN
        RAISE EXCEPTION USING ERRCODE = '55000', MESSAGE = 'injected fault';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER sr_fault BEFORE INSERT ON vq.job_active FOR EACH ROW EXECUTE FUNCTION public.sr_fault();
SQL
ROW_ID="$(q "SELECT vq_outbox_publish('sr_relayed', '{\"fault\": \"yes\"}')")"
wait_for "SELECT attempts >= 1 FROM vq.outbox WHERE id = $ROW_ID" 10 "a relay attempt of outbox row $ROW_ID"
assert_eq "PENDING|retryable: injected fault|true" \
    "$(q "SELECT status || '|' || last_error || '|' || (next_attempt_at > updated_at) FROM vq.outbox WHERE id = $ROW_ID")" \
    "outbox row $ROW_ID after a failed delivery"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE handler = 'sr_relayed'")" "jobs of the failed delivery"
q "DROP TRIGGER sr_fault ON vq.job_active" >/dev/null
wait_for "SELECT status = 'PUBLISHED' FROM vq.outbox WHERE id = $ROW_ID" 15 "outbox row $ROW_ID PUBLISHED after the fault"
assert_eq 1 "$(q "SELECT count(*) FROM vq.job WHERE handler = 'sr_relayed'")" "jobs of outbox row $ROW_ID"

# ---------------------------------------------------------------------------
log "4. a transient persistence error says a retry may succeed"
mkfifo "$TMPD/rr.in"
psql -XAtq -v VERBOSITY=verbose <"$TMPD/rr.in" >"$TMPD/rr.out" 2>&1 &
RR_PID=$!
exec {RR}>"$TMPD/rr.in"
printf "BEGIN ISOLATION LEVEL REPEATABLE READ;\nSELECT 'snapshot-taken';\n" >&"$RR"
for _ in $(seq 1 250); do grep -q '^snapshot-taken$' "$TMPD/rr.out" && break; sleep 0.02; done
grep -q '^snapshot-taken$' "$TMPD/rr.out" || fail "the REPEATABLE READ session did not start: $(cat "$TMPD/rr.out")"
q "SELECT vq_enqueue('sr_noop', '{}', '2999-01-01', job_id => 'rr-key')" >/dev/null
printf "SELECT vq_enqueue('sr_noop', '{}', '2999-01-01', job_id => 'rr-key');\nROLLBACK;\n" >&"$RR"
exec {RR}>&-
wait "$RR_PID" || true
grep -q 'ERROR:  40001:' "$TMPD/rr.out" || fail "expected a serialization failure (40001), got: $(cat "$TMPD/rr.out")"
grep -qF 'vq_enqueue: persisting a job for handler "sr_noop" failed transiently; retrying the transaction may succeed' \
    "$TMPD/rr.out" || fail "the 40001 error lacks the retry context line: $(cat "$TMPD/rr.out")"
log "PASS"

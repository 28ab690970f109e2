#!/usr/bin/env bash
# notify_absent_consumer.sh: an absent NOTIFY consumer blocks nobody.
# Queue na (capacity 1 x 5) serves a NOTIFY handler and a function handler;
# vq.notify_take_timeout_ms = 1000, vq.execution_timeout_ms = 3000; no consumer runs.
#   1. five NOTIFY jobs are announced (they take the queue's whole capacity); 100 function
#      jobs enqueued next in the same queue all complete within 2.5 s (the announcements give
#      their capacity back after the take timeout).
#   2. past the execution timeout the NOTIFY jobs are still RUNNING at attempt 0 with their one
#      CLAIMED transition: untaken, they are never abandoned (the timeout counts from the take).
#   3. vq_consumer started afterwards takes all five (its start-up vq_pull) and completes them
#      at their first attempt: history CLAIMED, COMPLETED; its command ran once each.
#   4. cancellation reaches consumers: with the consumer stopped, an announced job is cancelled
#      (CANCEL_REQUESTED); by hand, vq_take returns it with cancel_requested = true and a
#      vq_complete records it CANCELLED ('cancelled while running'); another one, left to
#      vq_consumer started again, is not run (no command) and ends CANCELLED too.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

CONSUMER="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}/vq_consumer"
CONNINFO="host=$PGHOST port=$PGPORT user=postgres dbname=$PGDATABASE"
TMPD="$(mktemp -d /tmp/vq_na.XXXXXX)"
CPID=""

cleanup() {
    local rc=$?
    set +e
    [[ -n "$CPID" ]] && { kill -TERM "$CPID" 2>/dev/null; wait "$CPID" 2>/dev/null; }
    cleanup_configs
    ((rc != 0)) && [[ -s "$TMPD/consumer.log" ]] && tail -n 40 "$TMPD/consumer.log"
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

cat >"$TMPD/cmd.sh" <<'SH'
#!/bin/sh
psql -XAtq -v ON_ERROR_STOP=1 -c "INSERT INTO na_ran VALUES ('$VQ_EXECUTION_ID', $VQ_ATTEMPT)" || exit 9
exit 0
SH
chmod +x "$TMPD/cmd.sh"

log "setup: queue na (capacity 5), a NOTIFY and a function handler, take timeout 1 s"
set_config vq.notify_take_timeout_ms 1000
set_config vq.execution_timeout_ms 3000
qs >/dev/null <<'SQL'
SELECT vq_create_queue('na', sleep_delay_ms => 100, instances => 1, max_concurrent_jobs => 5);
CREATE TABLE na_done (execution_id uuid, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE na_ran (execution_id uuid, attempt int);
CREATE FUNCTION na_fn(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.na_done (execution_id) VALUES (ctx.execution_id); END $$;
SELECT vq_register_handler('na_fn', 'na_fn(jsonb, vq.job_context)', queue => 'na');
SELECT vq_register_notify_handler('na_notify', 'na_ch', 'na');
SQL

# ---------------------------------------------------------------------------
log "1. five NOTIFY jobs announced to nobody, then 100 function jobs in the same queue"
q "SELECT vq_enqueue('na_notify', jsonb_build_object('i', i)) FROM generate_series(1, 5) i" >/dev/null
wait_for "SELECT count(*) = 5 FROM vq.job WHERE handler = 'na_notify' AND state = 'RUNNING'" 10 "five announcements"
t0="$(now_ms)"
q "SELECT vq_enqueue('na_fn', '{}') FROM generate_series(1, 100)" >/dev/null
wait_for "SELECT count(*) = 100 FROM na_done" 2.5 "the 100 function jobs (an absent consumer must not hold them up; take timeout 1 s)"
log "ok: 100 function jobs done $(($(now_ms) - t0)) ms after their enqueue"

# ---------------------------------------------------------------------------
log "2. untaken NOTIFY jobs are not abandoned (execution timeout 3 s)"
sleep_until=$((t0 + 4000))
while (($(now_ms) < sleep_until)); do sleep 0.1; done
got="$(q "SELECT string_agg(DISTINCT state || '/' || attempt_number || '/' ||
                   (SELECT string_agg(kind, ',') FROM vq.job_transition t WHERE t.execution_id = j.execution_id), ' ')
            FROM vq.job j WHERE handler = 'na_notify'")"
assert_eq "RUNNING/0/CLAIMED" "$got" "state/attempt/transitions of the untaken NOTIFY jobs 4 s after their announcement"
log "ok: $got"

# ---------------------------------------------------------------------------
log "3. a consumer started now takes them all at their first attempt"
PASS_ENV="--pass-env PGHOST --pass-env PGPORT --pass-env PGUSER --pass-env PGDATABASE"
# shellcheck disable=SC2086
"$CONSUMER" --dbname "$CONNINFO application_name=na_consumer" --channel na_ch --handler na_notify \
    $PASS_ENV --verbose -- "$TMPD/cmd.sh" >"$TMPD/consumer.log" 2>&1 &
CPID=$!
wait_for "SELECT count(*) = 5 FROM vq.job WHERE handler = 'na_notify' AND state = 'COMPLETED'" 15 "the five NOTIFY jobs COMPLETED"
got="$(q "SELECT string_agg(DISTINCT attempt_number || '/' ||
                   (SELECT string_agg(kind, ',' ORDER BY id) FROM vq.job_transition t WHERE t.execution_id = j.execution_id), ' ')
            FROM vq.job j WHERE handler = 'na_notify'")"
assert_eq "0/CLAIMED,COMPLETED" "$got" "attempt/history of the NOTIFY jobs"
assert_eq "5|5|0" "$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) || '|' || max(attempt) FROM na_ran")" \
    "command runs|distinct jobs|highest attempt"
log "ok: $got"

# ---------------------------------------------------------------------------
log "4. a cancelled NOTIFY job: the consumer is told, and its reply records CANCELLED"
kill -TERM "$CPID"; wait "$CPID" 2>/dev/null || true; CPID=""
ids="$(q "SELECT string_agg(vq_enqueue('na_notify', jsonb_build_object('cancel', i))::text, ' ') FROM generate_series(1, 2) i")"
read -r c1 c2 <<<"$ids"
wait_for "SELECT count(*) = 2 FROM vq.job WHERE execution_id IN ('$c1', '$c2') AND state = 'RUNNING'" 10 "the two announcements"
assert_eq "CANCEL_REQUESTED|CANCEL_REQUESTED" "$(q "SELECT vq_cancel('$c1') || '|' || vq_cancel('$c2')")" "vq_cancel of the announced jobs"
assert_eq "$c1|true" "$(q "SELECT execution_id || '|' || cancel_requested FROM vq_take('$c1')")" "vq_take of a cancelled job tells the consumer"
assert_eq t "$(q "SELECT vq_complete('$c1')")" "the consumer's reply"
assert_eq "CANCELLED|cancelled while running|CLAIMED,CANCELLED" \
    "$(q "SELECT state || '|' || last_error || '|' || (SELECT string_agg(kind, ',' ORDER BY id) FROM vq.job_transition t
                                                      WHERE t.execution_id = j.execution_id)
          FROM vq.job j WHERE execution_id = '$c1'")" "state|last_error|history of the job cancelled before its reply"
# shellcheck disable=SC2086
"$CONSUMER" --dbname "$CONNINFO application_name=na_consumer" --channel na_ch --handler na_notify \
    $PASS_ENV --verbose -- "$TMPD/cmd.sh" >>"$TMPD/consumer.log" 2>&1 &
CPID=$!
wait_state "$c2" CANCELLED 10
assert_eq 0 "$(q "SELECT count(*) FROM na_ran WHERE execution_id = '$c2'")" "command runs for the job cancelled before vq_consumer took it"
log "ok: both CANCELLED; vq_consumer did not run the second"
log "PASS"

#!/usr/bin/env bash
# backdated_jobs.sh: a role without a grant on a queue cannot make its jobs run ahead of the
# jobs already waiting there by dating them in the past, through any enqueue path.
#   Queue bd (paused while the jobs go in; one job at a time once resumed): tenant A enqueues
#   three due jobs; then tenant B (no queue grant) enqueues one with run_at '2000-01-01', a
#   batch of one (vq_enqueue_many) an hour in the past, and publishes one to the outbox with
#   scheduled_at '2000-01-01', which the relay enqueues as B; a role granted the queue
#   (vq_grant_queue) enqueues one with run_at '2000-01-01'. Resumed, the jobs run in the order
#   granted, a1, a2, a3, b-direct, b-batch, b-outbox: B's jobs after every job that was due
#   when they were enqueued; the granted role's past time is kept.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

A="vq_bd_a_$$" B="vq_bd_b_$$" G="vq_bd_granted_$$"
cleanup() {
    set +e
    drop_roles "$A" "$B" "$G"
}
trap cleanup EXIT

log "setup: roles, queue bd (paused), a handler that records the order it runs in"
qs >/dev/null <<SQL
CREATE ROLE "$A"; CREATE ROLE "$B"; CREATE ROLE "$G";
SELECT vq_create_queue('bd', sleep_delay_ms => 100, max_concurrent_jobs => 1);
SELECT vq_pause_queue('bd');
CREATE TABLE bd_runs (id bigserial PRIMARY KEY, job_id text NOT NULL);
CREATE FUNCTION bd_record(p jsonb, c vq.job_context) RETURNS void LANGUAGE sql AS
    \$\$ INSERT INTO public.bd_runs (job_id) VALUES (c.job_id) \$\$;
GRANT INSERT ON bd_runs TO "$A", "$B", "$G";
GRANT USAGE ON SEQUENCE bd_runs_id_seq TO "$A", "$B", "$G";
GRANT EXECUTE ON FUNCTION bd_record(jsonb, vq.job_context) TO "$A", "$B", "$G";
SELECT vq_register_handler('bd_h', 'bd_record(jsonb, vq.job_context)', queue => 'bd');
SELECT vq_grant_queue('bd', '$G');
SQL

log "A's due jobs, then B's backdated ones, then the granted role's"
for k in a1 a2 a3; do
    q_as "$A" "SELECT vq_enqueue('bd_h', '{}', job_id => '$k')" >/dev/null
done
q_as "$B" "SELECT vq_enqueue('bd_h', '{}', '2000-01-01', job_id => 'b-direct')" >/dev/null
q_as "$B" "SELECT vq_enqueue_many('bd_h', ARRAY['{}'::jsonb], now() - interval '1 hour', job_ids => ARRAY['b-batch'])" >/dev/null
OB="$(q_as "$B" "SELECT vq_outbox_publish('bd_h', '{}', '2000-01-01')")"
wait_for "SELECT status = 'PUBLISHED' FROM vq.outbox WHERE id = $OB" 10 "the relay to enqueue B's outbox row"
q "UPDATE vq.job SET job_id = 'b-outbox' WHERE queue = 'bd' AND enqueued_by = '$B'::regrole AND job_id LIKE 'delayed-%'" >/dev/null
q_as "$G" "SELECT vq_enqueue('bd_h', '{}', '2000-01-01', job_id => 'granted')" >/dev/null
assert_eq "granted|true" \
    "$(q "SELECT string_agg(job_id, ',') || '|' || bool_and(scheduled_at = '2000-01-01')
            FROM vq.job WHERE queue = 'bd' AND scheduled_at < '2001-01-01'")" \
    "the only job kept in the past (the granted role's)"
assert_eq t "$(q "SELECT min(scheduled_at) FILTER (WHERE job_id LIKE 'b-%')
                       > max(scheduled_at) FILTER (WHERE job_id LIKE 'a%') FROM vq.job WHERE queue = 'bd'")" \
    "B's jobs due after A's"

log "resume: one job at a time, in claim order"
q "SELECT vq_resume_queue('bd')" >/dev/null
wait_for "SELECT count(*) = 7 FROM bd_runs" 20 "the 7 jobs to run"
assert_eq "granted a1 a2 a3 b-direct b-batch b-outbox" "$(q "SELECT string_agg(job_id, ' ' ORDER BY id) FROM bd_runs")" \
    "the order the jobs ran in"
log "PASS"

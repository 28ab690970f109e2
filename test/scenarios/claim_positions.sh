#!/usr/bin/env bash
# claim_positions.sh: claims that resume where the previous ones ended never skip a due job.
# After a first load moves the claim positions along, jobs land before them in every way
# there is: an earlier scheduled_at, a new higher and a new lower priority level, an
# enqueue that commits long after it began (other jobs are claimed past it meanwhile),
# a rolled-back enqueue, retries after a backoff, future jobs coming due at a high
# priority, a dead-lettered job re-driven, jobs claimed and released unreached by inline
# batches cut at their time limit, and a second queue. Every committed job runs exactly
# once (the rolled-back one never); then, with one executor and a paused queue filled
# out of order, the run order is priority DESC, scheduled_at ASC. Last, a job put back
# behind the positions by hand (no commit lowers them) is found by their safety net
# within seconds, and logged.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

TMPD="$(mktemp -d /tmp/vq_sc_cp.XXXXXX)"
trap 'cleanup_configs; rm -rf "$TMPD"' EXIT

log "setup: two executors; queues cp_q and cp_q2; handlers cp_record, cp_flaky, cp_once, cp_slow"
set_config vq.executors_per_database 2
qs >/dev/null <<'SQL'
SELECT vq_create_queue('cp_q', sleep_delay_ms => 200, max_concurrent_jobs => 50,
                       backoff_strategy => 'FIXED', backoff_base_delay_ms => 300);
SELECT vq_create_queue('cp_q2', sleep_delay_ms => 200, max_concurrent_jobs => 50);
CREATE TABLE cp_runs (tag text, seq bigserial, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION public.cp_record(p jsonb) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.cp_runs (tag) VALUES (p ->> 'tag') $$;
-- fails at the first attempt of every job
CREATE FUNCTION public.cp_flaky(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ctx.attempt_number = 0 THEN
        RAISE EXCEPTION 'first attempt of % fails', p ->> 'tag';
    END IF;
    INSERT INTO public.cp_runs (tag) VALUES (p ->> 'tag');
END $$;
-- fails while cp_gate_closed has a row
CREATE TABLE cp_gate_closed (closed boolean);
INSERT INTO cp_gate_closed VALUES (true);
CREATE FUNCTION public.cp_gate(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.cp_gate_closed) THEN
        RAISE EXCEPTION 'gate closed for %', p ->> 'tag';
    END IF;
    INSERT INTO public.cp_runs (tag) VALUES (p ->> 'tag');
END $$;
CREATE FUNCTION public.cp_slow(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(0.03);
    INSERT INTO public.cp_runs (tag) VALUES (p ->> 'tag');
END $$;
SELECT vq_register_handler('cp_record', 'public.cp_record(jsonb)', queue => 'cp_q');
SELECT vq_register_handler('cp_flaky', 'public.cp_flaky(jsonb, vq.job_context)', queue => 'cp_q',
                           max_attempts => 3);
SELECT vq_register_handler('cp_once', 'public.cp_gate(jsonb)', queue => 'cp_q', max_attempts => 1);
SELECT vq_register_handler('cp_slow', 'public.cp_slow(jsonb)', queue => 'cp_q');
SELECT vq_register_handler('cp_other', 'public.cp_record(jsonb)', queue => 'cp_q2');
SQL

enqueue_tags() { # HANDLER PREFIX N [extra vq_enqueue_many arguments]
    q "SELECT vq_enqueue_many('$1', array_agg(jsonb_build_object('tag', '$2' || g))${4:+, $4})
         FROM generate_series(1, $3) g" >/dev/null
}
wait_runs() { # PREFIX N SECS
    wait_for "SELECT count(*) >= $2 FROM cp_runs WHERE tag LIKE '$1%'" "$3" "$2 runs of $1*"
}

log "1. a first load moves the positions of cp_q (priority 0) along"
enqueue_tags cp_record warm- 300
wait_runs warm- 300 20

log "2. jobs land before the positions"
# an enqueue that commits long after it began: its scheduled_at is older than jobs claimed meanwhile
q "BEGIN; SELECT vq_enqueue('cp_record', '{\"tag\": \"late-commit\"}'); SELECT pg_sleep(1.5); COMMIT" >/dev/null &
late_pid=$!
enqueue_tags cp_record during- 200
q "BEGIN; SELECT vq_enqueue('cp_record', '{\"tag\": \"rolled-back\"}'); ROLLBACK" >/dev/null
q "SELECT vq_enqueue('cp_record', '{\"tag\": \"earlier\"}', now() - interval '1 hour')" >/dev/null
q "SELECT vq_enqueue('cp_record', '{\"tag\": \"high\"}', priority => 7)" >/dev/null
q "SELECT vq_enqueue('cp_record', '{\"tag\": \"low\"}', priority => -7)" >/dev/null
q "SELECT vq_enqueue('cp_record', '{\"tag\": \"future-high\"}', now() + interval '2 s', priority => 9)" >/dev/null
q "SELECT vq_enqueue('cp_record', '{\"tag\": \"future-zero\"}', now() + interval '2 s')" >/dev/null
enqueue_tags cp_flaky retry- 20
once="$(q "SELECT vq_enqueue('cp_once', '{\"tag\": \"redriven\"}')")"
enqueue_tags cp_other q2- 100
wait "$late_pid"
enqueue_tags cp_record after- 100

wait_for "SELECT state = 'DEAD_LETTER' FROM vq.job WHERE execution_id = '$once'" 15 "cp_once dead-lettered"
q "DELETE FROM cp_gate_closed" >/dev/null
assert_eq 1 "$(q "SELECT vq_redrive('$once'::uuid)")" "vq_redrive of the dead-lettered job"

log "3. batches cut at their time limit release claimed jobs (inline handlers of 30 ms)"
set_config vq.inline_handler_ms 1000
enqueue_tags cp_slow slow-warm- 2
wait_runs slow-warm- 2 10
enqueue_tags cp_slow slow- 60

log "4. every committed job runs exactly once"
wait_for "SELECT count(*) = 0 FROM vq.job WHERE state IN ('ENQUEUED', 'RUNNING')
           AND handler LIKE 'cp\_%'" 30 "every cp_* job finished"
for tag in late-commit earlier high low future-high future-zero redriven; do
    assert_eq 1 "$(q "SELECT count(*) FROM cp_runs WHERE tag = '$tag'")" "runs of $tag"
done
assert_eq 0 "$(q "SELECT count(*) FROM cp_runs WHERE tag = 'rolled-back'")" "runs of the rolled-back job"
for spec in warm-:300 during-:200 retry-:20 q2-:100 after-:100 slow-:60; do
    prefix="${spec%%:*}" n="${spec##*:}"
    assert_eq "$n|$n" "$(q "SELECT count(*) || '|' || count(DISTINCT tag) FROM cp_runs WHERE tag LIKE '$prefix%'
                              AND tag NOT LIKE 'slow-warm%'")" "runs|distinct tags of $prefix*"
done
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE handler LIKE 'cp\_%' AND state <> 'COMPLETED'")" \
    "cp_* jobs not COMPLETED"
assert_eq 20 "$(q "SELECT count(*) FROM vq.job WHERE handler = 'cp_flaky' AND attempt_number = 1")" \
    "retried jobs completed at their second attempt"

log "5. claim order within a queue: priority DESC, then scheduled_at"
reset_config vq.inline_handler_ms
set_config vq.executors_per_database 1
qs >/dev/null <<'SQL'
SELECT vq_pause_queue('cp_q');
SELECT vq_enqueue('cp_record', jsonb_build_object('tag', 'order-' || p || '-' || s), now() - s * interval '1 min',
                  priority => p)
  FROM (VALUES (1), (5), (3)) pr(p), generate_series(1, 4) s ORDER BY random();
SELECT vq_resume_queue('cp_q');
SQL
wait_runs order- 12 15
assert_eq "order-5-4,order-5-3,order-5-2,order-5-1,order-3-4,order-3-3,order-3-2,order-3-1,order-1-4,order-1-3,order-1-2,order-1-1" \
    "$(q "SELECT string_agg(tag, ',' ORDER BY seq) FROM cp_runs WHERE tag LIKE 'order-%'")" "run order"

log "6. racing commits: 8 clients enqueue in transactions that stay open a random few ms"
reset_config vq.executors_per_database
cat >"$TMPD/race.sql" <<'SQL'
BEGIN;
SELECT vq_enqueue('cp_record', jsonb_build_object('tag', 'race-' || :client_id || '-' || random()));
SELECT pg_sleep(random() * 0.005);
SELECT vq_enqueue('cp_record', jsonb_build_object('tag', 'race-' || :client_id || '-' || random()),
                  priority => (random() * 2)::int);
COMMIT;
SQL
pgbench -n -c 8 -j 2 -T 10 -f "$TMPD/race.sql" >"$TMPD/race.out" 2>&1 || fail "pgbench: $(cat "$TMPD/race.out")"
wait_for "SELECT count(*) = 0 FROM vq.job WHERE state = 'ENQUEUED' AND handler = 'cp_record'" 20 \
    "every racing job claimed (left: $(q "SELECT count(*) FROM vq.job WHERE state = 'ENQUEUED' AND handler = 'cp_record'"))"
assert_eq "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'tag' LIKE 'race-%'")" \
    "$(q "SELECT count(*) FROM cp_runs WHERE tag LIKE 'race-%'")" "racing jobs enqueued vs run"

log "7. a job put back behind the positions by hand (an UPDATE of vq.job: no commit lowers them)"
# claims never reach it again; the positions' safety net (executor 0, every 10 s here) must
log_offset="$(stat -c %s "$VQ_CLUSTER_DIR/server.log")"
q "UPDATE vq.job SET state = 'ENQUEUED', finished_at = NULL WHERE payload ->> 'tag' = 'warm-1'" >/dev/null
wait_for "SELECT count(*) = 2 FROM cp_runs WHERE tag = 'warm-1'" 30 "warm-1 run again"
tail -c +"$((log_offset + 1))" "$VQ_CLUSTER_DIR/server.log" |
    grep -q 'a due job of queue "cp_q" (priority 0, scheduled at .*) was behind the claim position' ||
    fail "no LOG line of the job found behind the claim position"
log "PASS"

#!/usr/bin/env bash
# outbox_relay.sh: what the outbox relay (in the executors) does with published rows.
#   1. rollback -> no outbox row and no job; commit -> exactly one job, built from the
#      snapshot even though a contract override changed in the publishing transaction after
#      the publish (queue/priority/max_attempts), payload equal, metadata = metadata.context
#      verbatim, no header key or value anywhere in the job, enqueued_by = published_by (the
#      handler runs as that role), the row PUBLISHED with published_at; latency publish
#      commit -> job row (10 samples, bound 2 s);
#   2. scheduled_at: a future one (override changed after commit) becomes the job's
#      scheduled_at and the job does not run before it; a past one is stored as the time of
#      the publish (the publisher has no grant on the queue), and the job gets that time;
#   3. unregistered targets (a superuser INSERT with a snapshot; a publish followed by
#      vq_unregister_handler in the same transaction) stay PENDING with attempts 0 while the
#      relay serves other rows, and are relayed after vq_register_handler;
#   4. one batch (one transaction of rows) with failures and successes: snapshot missing /
#      malformed / naming a missing queue / bad maxAttempts / context not an object ->
#      FAILED 'permanent: ...' and no job; a custom destination returning SUCCESS (called once,
#      as the publisher, with destination/payload/headers/metadata), RETRYABLE (attempts grow,
#      next_attempt_at = updated_at + 1 s, then + 2 s, 'retryable: <message>'), PERMANENT
#      (FAILED), UNRESOLVABLE ('unresolvable: ...'), raising (-> retryable), a function the
#      publisher may not execute (-> permanent), a NOTIFY over 8000 bytes (-> permanent); the
#      successes after the failures in the same batch are delivered in the same transaction;
#   5. NOTIFY destination: a psql LISTENer gets exactly one notification per row,
#      {"outbox_id", "payload", "headers"};
#   6. retention: with vq.retention_finished = 1 s, PUBLISHED rows go, FAILED and PENDING stay;
#      then with vq.retention_outbox_failed = 1 s the FAILED rows go too, PENDING ones stay;
#   7. rows whose publishing role was dropped before the relay: FAILED 'permanent: ...', no job
#      enqueued and no destination function run for a role that no longer exists.
# Crash accounting is in outbox_relay_crash.sh.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

PUB="vq_or_pub_$$"    # the plain role that publishes
TMPD="$(mktemp -d /tmp/vq_or.XXXXXX)"
LISTENER_PID="" LISTENER_FD=""

cleanup() {
    local rc=$?
    set +e
    if [[ -n "$LISTENER_PID" ]]; then
        [[ -n "$LISTENER_FD" ]] && eval "exec $LISTENER_FD>&-"
        kill "$LISTENER_PID" 2>/dev/null
        wait "$LISTENER_PID" 2>/dev/null
    fi
    cleanup_configs
    drop_roles "vq_or_gone_$$" "$PUB"
    if ((rc != 0)) && [[ -s "$TMPD/listener.out" ]]; then
        echo "---- listener output (last 20 lines)"
        tail -n 20 "$TMPD/listener.out"
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

# q_pub SQL: SQL in a new session as the publishing role
q_pub() { q_as "$PUB" "$1"; }
# row ID: "status|attempts|last_error" of an outbox row (for messages)
row() { q "SELECT status || '|' || attempts || '|' || coalesce(last_error, '') FROM vq.outbox WHERE id = $1"; }
# wait_status ID STATUS SECS
wait_status() {
    wait_for "SELECT status = '$2' FROM vq.outbox WHERE id = $1" "$3" "outbox row $1 to be $2 (now: $(row "$1"))"
}

# ---- setup ---------------------------------------------------------------------------------
log "setup: role $PUB, queues, handlers, effect tables, destination types"
qs >/dev/null <<SQL
CREATE ROLE $PUB;
SELECT vq_create_queue('rel_q1', sleep_delay_ms => 200), vq_create_queue('rel_q2', sleep_delay_ms => 200);
-- What each job run did: one row per execution_id (a second run of a job would fail).
CREATE TABLE rel_effect (execution_id uuid PRIMARY KEY, handler text, payload jsonb, metadata jsonb,
                         run_as text, at timestamptz NOT NULL DEFAULT clock_timestamp());
GRANT INSERT ON rel_effect TO $PUB;
CREATE FUNCTION rel_fn(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.rel_effect (execution_id, handler, payload, metadata, run_as)
    VALUES (ctx.execution_id, ctx.handler, p, ctx.metadata, current_user);
END \$\$;
SELECT vq_register_handler('rel_plain', 'rel_fn(jsonb, vq.job_context)');
SELECT vq_register_handler('rel_contract', 'rel_fn(jsonb, vq.job_context)', 'rel_q1', 5, 7);
SELECT vq_register_handler('rel_late2', 'rel_fn(jsonb, vq.job_context)');
-- A custom destination: returns the status named by payload.result ('RAISE' raises), and
-- records each call (rolled back unless the result is SUCCESS).
CREATE TABLE rel_dest_call (destination text, payload jsonb, headers jsonb, metadata jsonb, run_as text,
                            search_path text, at timestamptz NOT NULL DEFAULT clock_timestamp());
GRANT INSERT ON rel_dest_call TO $PUB;
CREATE FUNCTION rel_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.rel_dest_call (destination, payload, headers, metadata, run_as, search_path)
    VALUES (destination, payload, headers, metadata, current_user, current_setting('search_path'));
    IF payload ->> 'result' = 'RAISE' THEN
        RAISE EXCEPTION 'rel_dest failed for %', payload ->> 'case';
    END IF;
    RETURN ROW((payload ->> 'result')::vq.publish_status, 'message for ' || (payload ->> 'case'));
END \$\$;
SELECT vq_register_destination('rel.dest', 'rel_dest(text, jsonb, jsonb, jsonb)');
-- A destination function the publisher may not execute.
CREATE FUNCTION rel_dest_secret(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE sql AS \$\$ SELECT ROW('SUCCESS', NULL)::vq.publish_result \$\$;
REVOKE EXECUTE ON FUNCTION rel_dest_secret(text, jsonb, jsonb, jsonb) FROM PUBLIC;
SELECT vq_register_destination('rel.secret', 'rel_dest_secret(text, jsonb, jsonb, jsonb)');
SQL

# ---- 1. rollback / commit, snapshot, context, headers, enqueued_by ------------------------
log "1. rollback leaves nothing; commit gives exactly one job built from the snapshot"
CTX='{"trace": {"traceId": "abc-123", "nested": [1, {"x": null}]}, "tenant": "acme"}'
HDRS='{"x-secret-header": "hv-987", "traceparent": "00-hdr-01"}'
rb_id="$(qs <<SQL
SET ROLE $PUB;
BEGIN;
SELECT vq_outbox_publish('rel_contract', '{"case": "rollback"}');
ROLLBACK;
SQL
)"
c_id="$(qs <<SQL
BEGIN;
SET LOCAL ROLE $PUB;
SELECT vq_context_set('trace', '{"traceId": "abc-123", "nested": [1, {"x": null}]}');
SELECT vq_context_set('tenant', '"acme"');
SELECT vq_outbox_publish('rel_contract', '{"case": "commit", "n": 1, "deep": {"a": [true, null]}}', NULL, '$HDRS');
RESET ROLE;
-- the override changes after the publish, in the same transaction: the snapshot wins
SELECT vq_set_contract_override('rel_contract', 'rel_q2', 9, 2);
COMMIT;
SQL
)"
c_id="$(grep -E '^[0-9]+$' <<<"$c_id" || true)"   # (the void calls print empty lines)
[[ "$c_id" =~ ^[0-9]+$ ]] || fail "vq_outbox_publish did not return an id: [$c_id]"
assert_eq "rel_q2|9|2" "$(q "SELECT queue || '|' || priority || '|' || max_attempts FROM vq_resolve_target('rel_contract')")" \
    "the override is in effect after the commit"
wait_status "$c_id" PUBLISHED 5
wait_for "SELECT EXISTS (SELECT 1 FROM rel_effect WHERE payload ->> 'case' = 'commit')" 5 "the committed job to run"
assert_eq 0 "$(q "SELECT count(*) FROM vq.outbox WHERE id = $rb_id OR payload ->> 'case' = 'rollback'")" \
    "outbox rows of the rolled-back publish"
assert_eq 1 "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'case' = 'commit'")" "jobs of the committed publish"
assert_eq "rel_contract|rel_q1|5|7|COMPLETED|$PUB" \
    "$(q "SELECT handler || '|' || queue || '|' || priority || '|' || max_attempts || '|' || state || '|' || enqueued_by
            FROM vq.job WHERE payload ->> 'case' = 'commit'")" \
    "job (handler|queue|priority|max_attempts|state|enqueued_by): the snapshot rel_q1/5/7, not the override rel_q2/9/2"
assert_sql "SELECT j.payload = o.payload AND j.metadata = o.metadata -> 'context'
                   AND j.metadata = '$CTX'::jsonb
                   AND j.enqueued_by = o.published_by
                   AND o.metadata -> 'delivery' -> 'delayedJob' = '{\"queue\": \"rel_q1\", \"priority\": 5, \"maxAttempts\": 7}'
              FROM vq.job j, vq.outbox o WHERE j.payload ->> 'case' = 'commit' AND o.id = $c_id" \
    "job payload = outbox payload, job metadata = metadata.context verbatim, enqueued_by = published_by"
for needle in x-secret-header hv-987 traceparent 00-hdr-01; do
    assert_eq 0 "$(q "SELECT count(*) FROM vq.job j LEFT JOIN rel_effect e USING (execution_id)
                       WHERE j.payload ->> 'case' = 'commit'
                         AND (j.payload::text LIKE '%$needle%' OR j.metadata::text LIKE '%$needle%'
                              OR e.metadata::text LIKE '%$needle%')")" "jobs carrying the header text '$needle'"
done
assert_eq "1|$PUB|true" "$(q "SELECT count(*) || '|' || min(e.run_as) || '|' || bool_and(e.metadata = '$CTX'::jsonb)::text
                             FROM rel_effect e WHERE e.payload ->> 'case' = 'commit'")" \
    "effects of the committed job (count|run as|ctx.metadata = context)"
assert_sql "SELECT status = 'PUBLISHED' AND published_at IS NOT NULL AND published_at >= created_at
                   AND last_error IS NULL AND headers = '$HDRS'::jsonb
              FROM vq.outbox WHERE id = $c_id" "the outbox row is PUBLISHED with published_at, headers kept"
# scheduled_at NULL: the job is due when the relay enqueues it (not before the publication)
assert_sql "SELECT j.scheduled_at = j.created_at AND j.scheduled_at >= o.created_at
              FROM vq.job j, vq.outbox o WHERE j.payload ->> 'case' = 'commit' AND o.id = $c_id" \
    "a NULL outbox scheduled_at: job due at its creation"

log "1b. latency publish commit -> job row (10 samples)"
for i in $(seq 1 10); do
    id="$(q "SELECT vq_outbox_publish('rel_plain', jsonb_build_object('case', 'latency', 'i', $i))")"
    wait_for "SELECT EXISTS (SELECT 1 FROM vq.job WHERE payload = jsonb_build_object('case', 'latency', 'i', $i))" 5 \
        "latency sample $i: job of outbox row $id"
done
lat="$(q "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)) || '|' || round(max(ms))
            FROM (SELECT extract(epoch FROM j.created_at - o.created_at) * 1000 AS ms
                    FROM vq.outbox o JOIN vq.job j ON j.payload = o.payload
                   WHERE o.payload ->> 'case' = 'latency') s")"
log "LATENCY publish commit -> job row: median ${lat%|*} ms, max ${lat#*|} ms"
((${lat#*|} <= 2000)) || fail "publish -> job latency max ${lat#*|} ms, expected <= 2000 ms (the relay is woken at commit)"

# ---- 2. scheduled_at --------------------------------------------------------------------
log "2. scheduled_at becomes the job's scheduled_at; override changed after commit is ignored"
s_id="$(q_pub "SELECT vq_outbox_publish('rel_contract', '{\"case\": \"scheduled\"}', clock_timestamp() + interval '2 seconds')")"
p_id="$(q_pub "SELECT vq_outbox_publish('rel_contract', '{\"case\": \"past\"}', '2020-02-02 02:02:02+00')")"
q "SELECT vq_set_contract_override('rel_contract', 'rel_q1', 1, 1)" >/dev/null
wait_status "$p_id" PUBLISHED 5
wait_status "$s_id" PUBLISHED 8
wait_for "SELECT count(*) = 2 FROM rel_effect WHERE payload ->> 'case' IN ('scheduled', 'past')" 5 "the scheduled jobs to run"
assert_eq "rel_q2|9|2" "$(q "SELECT queue || '|' || priority || '|' || max_attempts FROM vq.job WHERE payload ->> 'case' = 'scheduled'")" \
    "scheduled job settings (snapshot at publish time rel_q2/9/2; override now rel_q1/1/1)"
assert_sql "SELECT count(*) = 2 AND bool_and(j.scheduled_at = o.scheduled_at)
              FROM vq.job j JOIN vq.outbox o ON o.payload = j.payload WHERE o.id IN ($s_id, $p_id)" \
    "job scheduled_at = outbox scheduled_at (future and past)"
assert_sql "SELECT scheduled_at >= created_at FROM vq.outbox WHERE id = $p_id" \
    "a past scheduled_at of a publisher without a queue grant: stored as the time of the publish"
assert_sql "SELECT e.at >= o.scheduled_at FROM rel_effect e JOIN vq.outbox o ON o.payload = e.payload WHERE o.id = $s_id" \
    "the scheduled job did not run before its scheduled_at"
late_ms="$(q "SELECT round(extract(epoch FROM j.created_at - o.scheduled_at) * 1000) FROM vq.job j JOIN vq.outbox o ON o.payload = j.payload WHERE o.id = $s_id")"
log "future scheduled_at: job row written ${late_ms} ms after it"
((late_ms <= 1500)) || fail "the job of a row scheduled in the future was written ${late_ms} ms after its scheduled_at, expected <= 1500 ms"
q "SELECT vq_drop_contract_override('rel_contract')" >/dev/null

# ---- 3. unregistered targets --------------------------------------------------------------
log "3. unregistered targets stay PENDING (attempts 0) and are relayed after registration"
u1_id="$(q "INSERT INTO vq.outbox (destination_type, destination, payload, metadata, published_by)
            VALUES ('DELAYED_JOB', 'rel_late', '{\"case\": \"late\"}',
                    '{\"delivery\": {\"delayedJob\": {\"queue\": \"rel_q1\", \"priority\": 3, \"maxAttempts\": 4}},
                      \"context\": {\"k\": \"v\"}}', '$PUB') RETURNING id")"
u2_id="$(qs <<SQL | grep -E '^[0-9]+$'
BEGIN;
SET LOCAL ROLE $PUB;
SELECT vq_outbox_publish('rel_late2', '{"case": "late2"}');
RESET ROLE;
SELECT vq_unregister_handler('rel_late2');
COMMIT;
SQL
)"
# the relay keeps serving other rows meanwhile
sentinel="$(q_pub "SELECT vq_outbox_publish('rel_plain', '{\"case\": \"sentinel\"}')")"
wait_status "$sentinel" PUBLISHED 5
assert_stays "SELECT string_agg(status || '/' || attempts || '/' || coalesce(last_error, '-'), ',' ORDER BY id)
                FROM vq.outbox WHERE id IN ($u1_id, $u2_id)" 3 "rows of unregistered targets"
assert_eq "PENDING/0/-,PENDING/0/-" "$(q "SELECT string_agg(status || '/' || attempts || '/' || coalesce(last_error, '-'), ',' ORDER BY id)
                                         FROM vq.outbox WHERE id IN ($u1_id, $u2_id)")" "rows of unregistered targets"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE handler IN ('rel_late', 'rel_late2')")" "jobs of unregistered targets"
q "SELECT vq_register_handler('rel_late', 'rel_fn(jsonb, vq.job_context)'),
          vq_register_handler('rel_late2', 'rel_fn(jsonb, vq.job_context)', 'rel_q2', 8, 9)" >/dev/null
t0="$(now_ms)"
wait_for "SELECT count(*) = 2 FROM vq.outbox WHERE id IN ($u1_id, $u2_id) AND status = 'PUBLISHED'" 10 \
    "rows of the newly registered targets to be PUBLISHED (now: $(row "$u1_id"), $(row "$u2_id"))"
log "relayed $(($(now_ms) - t0)) ms after the registration committed"
# rel_late: the superuser-written snapshot (3/4, context {"k": "v"}); rel_late2: the snapshot
# taken when it was still registered with no defaults (default/0/3), not its new defaults.
assert_eq "rel_late|rel_q1|3|4|{\"k\": \"v\"}|$PUB,rel_late2|default|0|3|{}|$PUB" \
    "$(q "SELECT string_agg(handler || '|' || queue || '|' || priority || '|' || max_attempts || '|' || metadata || '|' || enqueued_by,
                            ',' ORDER BY handler) FROM vq.job WHERE handler IN ('rel_late', 'rel_late2')")" \
    "jobs of the late targets (handler|queue|priority|max_attempts|metadata|enqueued_by)"
wait_for "SELECT count(*) = 2 FROM rel_effect WHERE handler IN ('rel_late', 'rel_late2')" 5 "the late jobs to run"

# ---- 4. one batch of failures and successes ------------------------------------------------
log "4. one transaction of rows: permanent failures, every destination result kind, successes"
big="$(printf 'x%.0s' $(seq 1 8100))"
qs >/dev/null <<SQL
BEGIN;
-- snapshot missing / malformed / invalid (superuser INSERTs), for registered targets
INSERT INTO vq.outbox (destination_type, destination, payload, metadata, published_by) VALUES
  ('DELAYED_JOB', 'rel_plain', '{"case": "no-snapshot"}', '{}', '$PUB'),
  ('DELAYED_JOB', 'rel_plain', '{"case": "bad-priority"}',
   '{"delivery": {"delayedJob": {"queue": "default", "priority": "high", "maxAttempts": 3}}, "context": {}}', '$PUB'),
  ('DELAYED_JOB', 'rel_plain', '{"case": "no-queue"}',
   '{"delivery": {"delayedJob": {"queue": "rel_no_such_queue", "priority": 0, "maxAttempts": 3}}, "context": {}}', '$PUB'),
  ('DELAYED_JOB', 'rel_plain', '{"case": "zero-attempts"}',
   '{"delivery": {"delayedJob": {"queue": "default", "priority": 0, "maxAttempts": 0}}, "context": {}}', '$PUB'),
  ('DELAYED_JOB', 'rel_plain', '{"case": "context-array"}',
   '{"delivery": {"delayedJob": {"queue": "default", "priority": 0, "maxAttempts": 3}}, "context": [1]}', '$PUB');
SET LOCAL ROLE $PUB;
SELECT vq_context_set('trace', '"dest-ctx"');
SELECT vq_outbox_publish_to('rel.dest', 'dest-' || lower(r), jsonb_build_object('case', lower(r), 'result', r),
                            NULL, jsonb_build_object('h', lower(r)))
  FROM unnest(ARRAY['RETRYABLE', 'PERMANENT', 'UNRESOLVABLE', 'RAISE']) r;
SELECT vq_outbox_publish_to('rel.secret', 'dest-secret', '{"case": "secret"}');
SELECT vq_outbox_publish_to('NOTIFY', 'rel_big', jsonb_build_object('case', 'big', 'blob', '$big'));
-- the successes come after every failure in publication (= claim) order
SELECT vq_outbox_publish_to('rel.dest', 'dest-success', '{"case": "success", "result": "SUCCESS"}', NULL, '{"h": "success"}');
SELECT vq_outbox_publish('rel_plain', '{"case": "batch-ok"}', NULL, '{"h": "batch-ok"}');
COMMIT;
SQL
ids="$(q "SELECT string_agg(id::text, ',') FROM vq.outbox
           WHERE payload ->> 'case' IN ('no-snapshot', 'bad-priority', 'no-queue', 'zero-attempts', 'context-array',
                                        'retryable', 'permanent', 'unresolvable', 'raise', 'secret', 'big', 'success', 'batch-ok')")"
assert_eq 13 "$(q "SELECT count(*) FROM vq.outbox WHERE id IN ($ids)")" "rows of the batch"
wait_for "SELECT bool_and(attempts >= 1) FROM vq.outbox WHERE id IN ($ids)" 5 "every row of the batch to be handled once"
# case -> "status|attempts|last_error" after the first pass
outcome() { q "SELECT status || '|' || attempts || '|' || coalesce(last_error, '') FROM vq.outbox WHERE payload ->> 'case' = '$1'"; }
for c in no-snapshot bad-priority; do
    assert_eq "FAILED|1|permanent: metadata.delivery.delayedJob snapshot (queue, priority, maxAttempts) is missing or malformed" \
        "$(outcome "$c")" "outbox row '$c'"
done
assert_eq 'FAILED|1|permanent: queue "rel_no_such_queue" does not exist' "$(outcome no-queue)" "outbox row 'no-queue'"
assert_eq 'FAILED|1|permanent: max_attempts must be between 1 and 1000, got 0' "$(outcome zero-attempts)" "outbox row 'zero-attempts'"
assert_eq 'FAILED|1|permanent: metadata must be a JSON object' "$(outcome context-array)" "outbox row 'context-array'"
assert_eq 'FAILED|1|permanent: message for permanent' "$(outcome permanent)" "outbox row 'permanent' (destination result PERMANENT)"
assert_sql "SELECT status = 'FAILED' AND attempts = 1 AND last_error LIKE 'permanent: %EXECUTE%'
              FROM vq.outbox WHERE payload ->> 'case' = 'secret'" \
    "a destination function the publisher may not execute -> FAILED permanent (found: $(outcome secret))"
assert_sql "SELECT status = 'FAILED' AND last_error LIKE 'permanent: %8000%' FROM vq.outbox WHERE payload ->> 'case' = 'big'" \
    "a NOTIFY message over 8000 bytes -> FAILED permanent (found: $(outcome big | cut -c1-200))"
assert_sql "SELECT bool_and(next_attempt_at IS NULL) FROM vq.outbox WHERE id IN ($ids) AND status = 'FAILED'" \
    "FAILED rows have no next_attempt_at"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'case' IN ('no-snapshot', 'bad-priority', 'no-queue',
                                                                        'zero-attempts', 'context-array')")" \
    "jobs created from rows without a valid snapshot"
# the successes: delivered although rows before them in the batch failed. Every executor is
# woken by the commit and relays with SKIP LOCKED, so the rows may be split among them, but
# no more transactions than executors took part: failures did not end a relay batch.
assert_eq "PUBLISHED|1|" "$(outcome success)" "outbox row 'success' (destination result SUCCESS)"
assert_eq "PUBLISHED|1|" "$(outcome batch-ok)" "outbox row 'batch-ok' (after the failures in the batch)"
assert_eq t "$(q "SELECT count(DISTINCT xmin::text) <= (SELECT count(*) FROM pg_stat_activity
                                                       WHERE backend_type = 'vq_job executor'
                                                         AND datname = current_database())
                 FROM vq.outbox WHERE id IN ($ids) AND status <> 'PENDING'")" \
    "relay transactions that wrote the FAILED and PUBLISHED rows (at most one per executor)"
assert_eq 1 "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'case' = 'batch-ok'")" "jobs of 'batch-ok'"
assert_eq "1|dest-success|{\"h\": \"success\"}|{\"context\": {\"trace\": \"dest-ctx\"}}|$PUB" \
    "$(q "SELECT count(*) OVER () || '|' || destination || '|' || headers || '|' || metadata || '|' || run_as
            FROM rel_dest_call WHERE payload ->> 'case' = 'success'")" \
    "calls of the destination function for 'success' (count|destination|headers|metadata|run as)"
assert_sql "SELECT payload = '{\"case\": \"success\", \"result\": \"SUCCESS\"}' FROM rel_dest_call WHERE payload ->> 'case' = 'success'" \
    "the destination function got the payload"
assert_eq 0 "$(q "SELECT count(*) FROM rel_dest_call WHERE payload ->> 'case' <> 'success'")" \
    "calls kept for results other than SUCCESS (their work is rolled back)"
# retryable kinds: PENDING, attempts grow, back off 1 s after the first attempt, 2 s after
# the second (next_attempt_at = updated_at + 2^(attempts - 1) s)
retry_state() { q "SELECT attempts || '|' || updated_at FROM vq.outbox WHERE payload ->> 'case' = 'retryable'"; }
first="$(retry_state)"
for c in retryable unresolvable raise; do
    case $c in
        retryable) err='retryable: message for retryable' ;;
        unresolvable) err='unresolvable: message for unresolvable' ;;
        raise) err='retryable: rel_dest failed for raise' ;;
    esac
    assert_sql "SELECT status = 'PENDING' AND last_error = '$err' AND attempts >= 1
                       AND next_attempt_at = updated_at + interval '1 second' * 2 ^ (attempts - 1)
                  FROM vq.outbox WHERE payload ->> 'case' = '$c'" \
        "outbox row '$c': PENDING, '$err', next_attempt_at = updated_at + 2^(attempts-1) s (found: $(outcome "$c"))"
done
wait_for "SELECT attempts >= 2 FROM vq.outbox WHERE payload ->> 'case' = 'retryable'" 5 "a second attempt of 'retryable'"
if [[ "${first%%|*}" == 1 ]]; then
    assert_sql "SELECT attempts = 2 AND status = 'PENDING' AND last_error = 'retryable: message for retryable'
                       AND next_attempt_at = updated_at + interval '2 seconds'
                       AND updated_at >= '${first#*|}'::timestamptz + interval '1 second'
                  FROM vq.outbox WHERE payload ->> 'case' = 'retryable'" \
        "'retryable' after two attempts: the second came >= 1 s after the first, next in 2 s (found: $(outcome retryable), first: $first)"
else
    log "(the second attempt of 'retryable' came before it could be observed alone: $first)"
fi
assert_stays "SELECT string_agg(status || attempts || updated_at, ',' ORDER BY id) FROM vq.outbox
               WHERE id IN ($ids) AND status <> 'PENDING'" 1 "FAILED and PUBLISHED rows of the batch"
q "SELECT vq_unregister_destination('rel.dest')" >/dev/null   # stop the retries

# ---- 5. NOTIFY destination ----------------------------------------------------------------
log "5. NOTIFY destination: one notification per row, with outbox_id, payload and headers"
mkfifo "$TMPD/listener.in"
psql -XAtq <"$TMPD/listener.in" >"$TMPD/listener.out" 2>&1 &
LISTENER_PID=$!
exec {fd}>"$TMPD/listener.in"
LISTENER_FD=$fd
printf 'LISTEN rel_chan;\nSELECT %s;\n' "'listening'" >&"$fd"
deadline=$(($(date +%s) + 10))
until grep -qx listening "$TMPD/listener.out"; do
    (($(date +%s) < deadline)) || fail "the listener did not start LISTENing within 10 s"
    sleep 0.05
done
n_ids="$(qs <<SQL | paste -sd, -
SET ROLE $PUB;
SELECT vq_outbox_publish_to('NOTIFY', 'rel_chan', '{"case": "n1", "text": "quote \" and backslash \\\\ ok"}');
SELECT vq_outbox_publish_to('NOTIFY', 'rel_chan', NULL, NULL, '{"h": 1}');
BEGIN;
SELECT vq_outbox_publish_to('NOTIFY', 'rel_chan', '[1, 2, 3]', NULL, '{"h": "in-tx"}');
SELECT vq_outbox_publish_to('NOTIFY', 'rel_other_chan', '{"case": "other"}');
COMMIT;
BEGIN;
SELECT vq_outbox_publish_to('NOTIFY', 'rel_chan', '{"case": "rolled-back"}');
ROLLBACK;
SQL
)"
wait_for "SELECT count(*) = 4 FROM vq.outbox WHERE id IN ($n_ids) AND status = 'PUBLISHED'" 5 "the NOTIFY rows to be PUBLISHED"
# keep the listener reading for 1.5 s more: nothing is delivered twice
deadline=$(($(now_ms) + 1500))
while (($(now_ms) < deadline)); do
    printf 'SELECT 1 WHERE false;\n' >&"$fd"
    sleep 0.05
done
printf 'SELECT %s;\n' "'done'" >&"$fd"
deadline=$(($(date +%s) + 10))
until grep -qx "done" "$TMPD/listener.out"; do
    (($(date +%s) < deadline)) || fail "the listener did not finish"
    sleep 0.05
done
sed -n 's/^Asynchronous notification "rel_chan" with payload "\(.*\)" received from server process with PID [0-9]*\.$/\1/p' \
    "$TMPD/listener.out" >"$TMPD/heard"
q "CREATE TABLE rel_heard (msg text)" >/dev/null
psql -XAtq -v ON_ERROR_STOP=1 -c "\\copy rel_heard (msg) FROM '$TMPD/heard' WITH (FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02')"
assert_eq 3 "$(q "SELECT count(*) FROM rel_heard")" "notifications received on rel_chan (3 rows published to it)"
assert_eq 0 "$(grep -c 'rel_other_chan\|rolled-back' "$TMPD/listener.out" || true)" "notifications of other channels or rolled-back rows"
assert_eq 3 "$(q "SELECT count(*) FROM vq.outbox o
                   WHERE o.id IN ($n_ids) AND o.destination = 'rel_chan'
                     AND (SELECT count(*) FROM rel_heard h
                           WHERE h.msg::jsonb = jsonb_build_object('outbox_id', o.id, 'payload', o.payload,
                                                                  'headers', o.headers)) = 1")" \
    "rows of rel_chan heard exactly once as {outbox_id, payload, headers} (heard: $(head -c 600 "$TMPD/heard"))"
eval "exec $LISTENER_FD>&-"
LISTENER_FD=""
wait "$LISTENER_PID" || true
LISTENER_PID=""

# ---- 6. retention ----------------------------------------------------------------------------
log "6. retention: PUBLISHED rows are removed after vq.retention_finished, FAILED and PENDING kept"
counts() { q "SELECT string_agg(status || '=' || n, ',' ORDER BY status) FROM (SELECT status, count(*) n FROM vq.outbox GROUP BY 1) s"; }
before="$(counts)"
n_failed="$(q "SELECT count(*) FROM vq.outbox WHERE status = 'FAILED'")"
n_pending="$(q "SELECT count(*) FROM vq.outbox WHERE status = 'PENDING'")"
((n_failed >= 8)) || fail "expected at least 8 FAILED rows before retention, found $n_failed ($before)"
set_config vq.retention_finished 1
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.outbox WHERE status = 'PUBLISHED')" 10 "PUBLISHED rows to be removed (before: $before)"
assert_eq "$n_failed" "$(q "SELECT count(*) FROM vq.outbox WHERE status = 'FAILED'")" "FAILED rows after retention"
assert_eq "$n_pending" "$(q "SELECT count(*) FROM vq.outbox WHERE status = 'PENDING'")" "PENDING rows after retention"
# a row published now is removed about a second after its publication
r_id="$(q "SELECT vq_outbox_publish('rel_plain', '{\"case\": \"retention\"}')")"
wait_status "$r_id" PUBLISHED 5
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.outbox WHERE id = $r_id)" 5 "the new PUBLISHED row to be removed"
reset_config vq.retention_finished
log "outbox rows before retention: $before; after: $(counts)"
# FAILED rows go after vq.retention_outbox_failed (7 days by default)
set_config vq.retention_outbox_failed 1
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.outbox WHERE status = 'FAILED')" 10 \
    "FAILED rows to be removed with vq.retention_outbox_failed = 1 s"
assert_eq "$n_pending" "$(q "SELECT count(*) FROM vq.outbox WHERE status = 'PENDING'")" "PENDING rows after the FAILED ones went"
reset_config vq.retention_outbox_failed

# ---- 7. a publisher that no longer exists --------------------------------------------------
log "7. rows whose publishing role was dropped before the relay saw them: FAILED permanent, no job"
GONE="vq_or_gone_$$"
q "CREATE ROLE $GONE" >/dev/null
q "GRANT INSERT ON rel_dest_call TO PUBLIC" >/dev/null   # (so that only the role check can stop the call)
q "SELECT vq_register_destination('rel.dest', 'rel_dest(text, jsonb, jsonb, jsonb)')" >/dev/null
qs >/dev/null <<SQL
BEGIN;
SET LOCAL ROLE $GONE;
SELECT vq_outbox_publish('rel_plain', '{"case": "gone-job"}');
SELECT vq_outbox_publish_to('rel.dest', 'dest-gone', '{"case": "gone-dest", "result": "SUCCESS"}');
RESET ROLE;
-- (dropped from another database: in this one DROP ROLE is refused while the role has PENDING rows)
\\! psql -XAtq -v ON_ERROR_STOP=1 -d postgres -c 'DROP ROLE $GONE'
COMMIT;
SQL
wait_for "SELECT count(*) = 2 AND bool_and(attempts >= 1 OR status <> 'PENDING') FROM vq.outbox
           WHERE payload ->> 'case' IN ('gone-job', 'gone-dest')" 5 "the relay to handle the rows of the dropped role"
assert_eq "FAILED,FAILED" "$(q "SELECT string_agg(status, ',') FROM vq.outbox WHERE payload ->> 'case' IN ('gone-job', 'gone-dest')
                                  AND last_error LIKE 'permanent: %'")" \
    "rows of a dropped publisher: FAILED 'permanent: ...' (found: $(outcome gone-job) / $(outcome gone-dest))"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'case' = 'gone-job'")" \
    "jobs enqueued on behalf of a role that no longer exists"
assert_eq 0 "$(q "SELECT count(*) FROM rel_dest_call WHERE payload ->> 'case' = 'gone-dest'")" \
    "destination calls run as a role that no longer exists"

log "PASS: outbox relay"

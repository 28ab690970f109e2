#!/usr/bin/env bash
# executor_caches.sh: what an executor caches follows the catalog and never dies under it.
#   1. handler functions: ALTER FUNCTION ... STRICT / CALLED ON NULL INPUT, OWNER TO and
#      SECURITY DEFINER / INVOKER take effect from the next job on (one executor, so the job
#      runs in the process that cached the function before the change).
#   2. the configuration cache: a handler that enqueues a job (which rebuilds the cache after
#      a configuration change committed while it ran) and then fails is retried after the
#      backoff of its queue as it was at the claim or as it is now, never after a backoff read
#      from freed memory; the executor goes on serving.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

APP="vq_ec_app_$$"
OWNER="vq_ec_owner_$$"
OTHER_QUEUE="ec_other_$$"

cleanup() {
    set +e
    cleanup_configs
    drop_roles "$APP" "$OWNER"
}
trap cleanup EXIT

# enqueue_as_app CALL: SELECT CALL as the application role; prints the execution id.
enqueue_as_app() { q_as "$APP" "SELECT $1"; }
# seen TAG: "who|payload was null" recorded by the handler for TAG (empty if it never ran)
seen() { q "SELECT string_agg(who || '|' || is_null, ',') FROM ec_seen WHERE tag = '$1'"; }
wait_done() { # EXECUTION_ID WHAT
    wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$1'" 10 \
        "$2 COMPLETED (job: $(q "SELECT state || '|' || coalesce(last_error, '') FROM vq.job WHERE execution_id = '$1'"))"
}

log "setup: one executor; roles $APP, $OWNER; handler ec_record"
set_config vq.executors_per_database 1
qs >/dev/null <<SQL
CREATE ROLE "$APP";
CREATE ROLE "$OWNER";
CREATE TABLE ec_seen (tag text, is_null boolean, who text);
GRANT INSERT ON ec_seen TO "$APP", "$OWNER";
CREATE FUNCTION public.ec_record(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.ec_seen VALUES (coalesce(p ->> 'tag', 'null-payload'), p IS NULL, current_user);
END \$\$;
GRANT EXECUTE ON FUNCTION public.ec_record(jsonb) TO "$APP";
SELECT vq_create_queue('ec_q', sleep_delay_ms => 200);
SELECT vq_register_handler('ec_record', 'public.ec_record(jsonb)', queue => 'ec_q');
SQL

# ---- 1. the handler function cache follows ALTER FUNCTION ---------------------------------
log "1. a first job caches the function (called on NULL input, invoker's rights)"
id="$(enqueue_as_app "vq_enqueue('ec_record', '{\"tag\": \"warm\"}')")"
wait_done "$id" "warm-up job"
assert_eq "$APP|false" "$(seen warm)" "warm-up job ran as the enqueuer"
id="$(enqueue_as_app "vq_enqueue('ec_record', NULL)")"
wait_done "$id" "NULL-payload job before STRICT"
assert_eq "$APP|true" "$(seen null-payload)" "a non-strict handler is called for a NULL payload"

log "1. ALTER FUNCTION ... STRICT: the next NULL payload is not passed to it"
q "ALTER FUNCTION public.ec_record(jsonb) STRICT"
id="$(enqueue_as_app "vq_enqueue('ec_record', NULL)")"
wait_done "$id" "NULL-payload job after STRICT"
assert_eq "$APP|true" "$(seen null-payload)" "a STRICT handler is not called for a NULL payload (one call recorded, from before)"

log "1. ALTER FUNCTION ... CALLED ON NULL INPUT: called again"
q "ALTER FUNCTION public.ec_record(jsonb) CALLED ON NULL INPUT"
id="$(enqueue_as_app "vq_enqueue('ec_record', NULL)")"
wait_done "$id" "NULL-payload job after CALLED ON NULL INPUT"
assert_eq "$APP|true,$APP|true" "$(seen null-payload)" "called for a NULL payload again"

log "1. ALTER FUNCTION ... OWNER TO, SECURITY DEFINER: runs with the owner's rights"
q "ALTER FUNCTION public.ec_record(jsonb) OWNER TO \"$OWNER\""
q "ALTER FUNCTION public.ec_record(jsonb) SECURITY DEFINER"
id="$(enqueue_as_app "vq_enqueue('ec_record', '{\"tag\": \"definer\"}')")"
wait_done "$id" "job after SECURITY DEFINER"
assert_eq "$OWNER|false" "$(seen definer)" "a SECURITY DEFINER handler runs as its owner"

log "1. ALTER FUNCTION ... SECURITY INVOKER: the enqueuer again"
q "ALTER FUNCTION public.ec_record(jsonb) SECURITY INVOKER"
id="$(enqueue_as_app "vq_enqueue('ec_record', '{\"tag\": \"invoker\"}')")"
wait_done "$id" "job after SECURITY INVOKER"
assert_eq "$APP|false" "$(seen invoker)" "a SECURITY INVOKER handler runs as the enqueuer"

# ---- 2. the configuration cache outlives a rebuild while a handler runs ---------------------
log "2. a handler enqueues (rebuilding the configuration cache) and fails after a concurrent change"
qs >/dev/null <<SQL
SELECT vq_create_queue('ec_retry', sleep_delay_ms => 200, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => 1500);
CREATE FUNCTION public.ec_enqueue_then_fail(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM pg_sleep((p ->> 'sleep')::float8);
    PERFORM vq_enqueue('ec_record', jsonb_build_object('tag', 'child-' || (p ->> 'n')));
    RAISE EXCEPTION 'planned failure %', p ->> 'n';
END \$\$;
SELECT vq_register_handler('ec_enqueue_then_fail', 'public.ec_enqueue_then_fail(jsonb)',
                           queue => 'ec_retry', max_attempts => 2);
SQL
for n in 1 2 3; do
    id="$(q "SELECT vq_enqueue('ec_enqueue_then_fail', '{\"sleep\": 1.0, \"n\": $n}')")"
    wait_for "SELECT state = 'RUNNING' FROM vq.job WHERE execution_id = '$id'" 10 "job $n RUNNING"
    # while it sleeps: a new queue (reorders the cache) and a new backoff for its own queue
    qs >/dev/null <<SQL
SELECT vq_create_queue('${OTHER_QUEUE}_$n', sleep_delay_ms => 700, backoff_strategy => 'EXPONENTIAL');
SELECT vq_alter_queue('ec_retry', backoff_base_delay_ms => $((1500 + n * 1000)));
SQL
    wait_for "SELECT attempt_number = 1 FROM vq.job WHERE execution_id = '$id'" 10 "job $n retried"
    delay="$(q "SELECT round(extract(epoch FROM j.scheduled_at - t.at) * 1000)
                  FROM vq.job j JOIN vq.job_transition t USING (execution_id)
                 WHERE j.execution_id = '$id' AND t.kind = 'FAILED'")"
    old=$((1500 + (n - 1) * 1000)) new=$((1500 + n * 1000))
    if ! ((delay >= old - 50 && delay <= old + 50)) && ! ((delay >= new - 50 && delay <= new + 50)); then
        fail "job $n: retry scheduled ${delay} ms after the failure; expected the queue's backoff, ${old} (at the claim) or ${new} (now)"
    fi
    assert_eq "0" "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'tag' = 'child-$n'")" \
        "job $n: the job its handler enqueued was rolled back with its failure"
done

log "2. the executor still serves: a new job completes"
id="$(enqueue_as_app "vq_enqueue('ec_record', '{\"tag\": \"after\"}')")"
wait_done "$id" "job after the cache rebuilds"
log "PASS"

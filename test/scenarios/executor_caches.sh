#!/usr/bin/env bash
# executor_caches.sh: what an executor caches follows the catalog and never dies under it.
#   1. handler functions: ALTER FUNCTION ... STRICT / CALLED ON NULL INPUT, OWNER TO and
#      SECURITY DEFINER / INVOKER take effect from the next job on (one executor, so the job
#      runs in the process that cached the function before the change).
#   2. the configuration cache: a handler that enqueues a job (which rebuilds the cache after
#      a configuration change committed while it ran) and then fails is retried after the
#      backoff of its queue as it was at the claim or as it is now, never after a backoff read
#      from freed memory; the executor goes on serving.
#   3. callback functions (an interceptor's on_complete, a transition listener), cached by the
#      executor at a first job, follow ALTER FUNCTION from the next job on, with no change to
#      any vq table: SET search_path (a callback that could not find its table finds it),
#      STRICT (an on_complete is not called with a NULL error; a listener's arguments are never
#      NULL, so it still is), a SECURITY DEFINER callback given a new owner (OWNER TO) runs as
#      the new owner, and so does a SECURITY INVOKER one made SECURITY DEFINER and given a new
#      owner (a callback runs as its function's owner either way: SECURITY DEFINER alone
#      changes nothing it can see, the owner does).
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

APP="vq_ec_app_$$"
OWNER="vq_ec_owner_$$"
OWNER2="vq_ec_owner2_$$"
OTHER_QUEUE="ec_other_$$"

cleanup() {
    set +e
    q "SELECT vq_unregister_interceptor(name) FROM vq.interceptor;
       SELECT vq_unregister_transition_listener(name) FROM vq.transition_listener" >/dev/null 2>&1
    cleanup_configs
    drop_roles "$APP" "$OWNER" "$OWNER2"
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

# ---- 3. callback functions follow ALTER FUNCTION ---------------------------------------
log "3. callbacks: per change, an interceptor's on_complete and a listener, owned by $OWNER"
one_executor    # (both jobs run in the process that cached the functions at the first)
# each records (callback, job_id, whether error was NULL, current_user) in ec_cb_seen, which
# the 'path' ones name without a schema and without SET search_path (their path is then
# pg_catalog, pg_temp: they fail until ALTER FUNCTION ... SET search_path)
{
    echo "CREATE ROLE \"$OWNER2\";"
    echo "CREATE TABLE public.ec_cb_seen (cb text, job_id text, error_null boolean, cur text);"
    echo "GRANT INSERT ON public.ec_cb_seen TO \"$OWNER\", \"$OWNER2\";"
    for change in path strict definer todefiner; do
        case "$change" in
            path) attrs="" ;;
            strict) attrs="CALLED ON NULL INPUT SET search_path = public" ;;
            definer) attrs="SECURITY DEFINER SET search_path = public" ;;
            todefiner) attrs="SECURITY INVOKER SET search_path = public" ;;
        esac
        cat <<SQL
CREATE FUNCTION public.ec_complete_$change(c vq.job_context, outcome text, error text) RETURNS void
LANGUAGE plpgsql $attrs AS \$\$
BEGIN INSERT INTO ec_cb_seen VALUES ('interceptor-$change', c.job_id, error IS NULL, current_user); END \$\$;
CREATE FUNCTION public.ec_listen_$change(t vq.job_transition, j vq.job) RETURNS void
LANGUAGE plpgsql $attrs AS \$\$
BEGIN INSERT INTO ec_cb_seen VALUES ('listener-$change', j.job_id, t.error IS NULL, current_user); END \$\$;
ALTER FUNCTION public.ec_complete_$change(vq.job_context, text, text) OWNER TO "$OWNER";
ALTER FUNCTION public.ec_listen_$change(vq.job_transition, vq.job) OWNER TO "$OWNER";
SELECT vq_register_interceptor('ec-$change', on_complete => 'public.ec_complete_$change(vq.job_context, text, text)');
SELECT vq_register_transition_listener('ec-$change', 'public.ec_listen_$change(vq.job_transition, vq.job)',
                                       kinds => '{COMPLETED}', handlers => '{ec_record}');
SQL
    done
} | qs >/dev/null
# cb_seen CALLBACK JOB_ID: "error was NULL|current_user" of what CALLBACK recorded for JOB_ID
cb_seen() { q "SELECT string_agg(error_null || '|' || cur, ',') FROM ec_cb_seen WHERE cb = '$1' AND job_id = '$2'"; }
# cb_failed WHAT JOB_ID: the job log line of callback WHAT failing for the job with JOB_ID
cb_failed() {
    q "SELECT string_agg(l.message, ',') FROM vq.job_log l JOIN vq.job j USING (execution_id)
        WHERE j.job_id = '$2' AND l.level = 'ERROR' AND l.message LIKE '$1%'"
}
id="$(enqueue_as_app "vq_enqueue('ec_record', '{\"tag\": \"cb-1\"}', job_id => 'cb-1')")"
wait_done "$id" "the first job with callbacks"
for what in 'interceptor "ec-path" (on_complete)' 'transition listener "ec-path" (COMPLETED)'; do
    assert_eq "$what failed: relation \"ec_cb_seen\" does not exist" "$(cb_failed "$what" cb-1)" \
        "the first job: $what without a search_path"
done
for cb in interceptor-strict listener-strict; do
    assert_eq "true|$OWNER" "$(cb_seen "$cb" cb-1)" "the first job: $cb (called on NULL input)"
done
for cb in interceptor-definer listener-definer; do
    assert_eq "true|$OWNER" "$(cb_seen "$cb" cb-1)" "the first job: $cb (SECURITY DEFINER, owned by $OWNER)"
done
for cb in interceptor-todefiner listener-todefiner; do
    assert_eq "true|$OWNER" "$(cb_seen "$cb" cb-1)" "the first job: $cb (SECURITY INVOKER, owned by $OWNER)"
done

log "3. ALTER FUNCTION ... SET search_path, ... STRICT, ... OWNER TO, ... SECURITY DEFINER; then a second job"
qs >/dev/null <<SQL
ALTER FUNCTION public.ec_complete_path(vq.job_context, text, text) SET search_path = public;
ALTER FUNCTION public.ec_listen_path(vq.job_transition, vq.job) SET search_path = public;
ALTER FUNCTION public.ec_complete_strict(vq.job_context, text, text) STRICT;
ALTER FUNCTION public.ec_listen_strict(vq.job_transition, vq.job) STRICT;
ALTER FUNCTION public.ec_complete_definer(vq.job_context, text, text) OWNER TO "$OWNER2";
ALTER FUNCTION public.ec_listen_definer(vq.job_transition, vq.job) OWNER TO "$OWNER2";
ALTER FUNCTION public.ec_complete_todefiner(vq.job_context, text, text) SECURITY DEFINER;
ALTER FUNCTION public.ec_listen_todefiner(vq.job_transition, vq.job) SECURITY DEFINER;
ALTER FUNCTION public.ec_complete_todefiner(vq.job_context, text, text) OWNER TO "$OWNER2";
ALTER FUNCTION public.ec_listen_todefiner(vq.job_transition, vq.job) OWNER TO "$OWNER2";
SQL
id="$(enqueue_as_app "vq_enqueue('ec_record', '{\"tag\": \"cb-2\"}', job_id => 'cb-2')")"
wait_done "$id" "the second job with callbacks"
for cb in interceptor-path listener-path; do
    [[ "$(cb_seen "$cb" cb-2)" == "true|$OWNER" ]] ||
        fail_later "after SET search_path: $cb wrote [$(cb_seen "$cb" cb-2)], expected [true|$OWNER]; job log: [$(cb_failed "${cb%%-*}" cb-2)]"
done
[[ -z "$(cb_seen interceptor-strict cb-2)" ]] ||
    fail_later "after STRICT: the on_complete was called with a NULL error: [$(cb_seen interceptor-strict cb-2)]"
[[ "$(cb_seen listener-strict cb-2)" == "true|$OWNER" ]] ||
    fail_later "after STRICT: the listener (never given a NULL) wrote [$(cb_seen listener-strict cb-2)], expected [true|$OWNER]"
for cb in interceptor-definer listener-definer; do
    [[ "$(cb_seen "$cb" cb-2)" == "true|$OWNER2" ]] ||
        fail_later "after OWNER TO: the SECURITY DEFINER $cb ran as [$(cb_seen "$cb" cb-2)], expected [true|$OWNER2]"
done
for cb in interceptor-todefiner listener-todefiner; do
    [[ "$(cb_seen "$cb" cb-2)" == "true|$OWNER2" ]] ||
        fail_later "after SECURITY DEFINER and OWNER TO: $cb ran as [$(cb_seen "$cb" cb-2)], expected [true|$OWNER2]"
done
fail_summary
log "PASS"

#!/usr/bin/env bash
# callback_isolation.sh: an administrator's callback never runs where a tenant's objects can
# reach it. A non-superuser tenant plants, in its own session, a TEMP table named like the
# table the callbacks write, with a trigger that makes the tenant superuser (and records who
# ran it); the callbacks are superuser-owned: a transition listener and an interceptor's
# on_complete, each once with SET search_path = public and once without SET.
#   1. the tenant cancels its ENQUEUED job (vq_cancel) in that session;
#   2. the tenant takes its NOTIFY job (vq_take_jobs) and replies vq_complete in that session;
#   3. the same with vq_fail;
#   4. a tenant's handler plants the table in the executor's session and calls vq_cancel
#      from inside its user code.
# Each time: the tenant does not become superuser and the trap never fires; the callbacks ran
# exactly once, from an executor: those with SET wrote the real table, those without failed
# there ("relation does not exist": their path is pg_catalog, pg_temp) and say so in the job's
# log; no queued callback event is left.
#   5. queued events run exactly once across a crash: an executor killed (kill -9) while it
#      runs a queued listener leaves the event queued, and it runs again after the restart
#      (the killed run's write rolled back with it).
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

TENANT="vq_ci_tenant_$$"
cleanup() {
    set +e
    q "SELECT vq_unregister_interceptor(name) FROM vq.interceptor;
       SELECT vq_unregister_transition_listener(name) FROM vq.transition_listener" >/dev/null 2>&1
    drop_roles "$TENANT"
}
trap cleanup EXIT

log "setup: tenant $TENANT, queue ci, handlers, superuser-owned callbacks"
qs >/dev/null <<SQL
CREATE ROLE "$TENANT" LOGIN;
CREATE SCHEMA ci_tenant AUTHORIZATION "$TENANT";
SELECT vq_create_queue('ci', sleep_delay_ms => 100, max_concurrent_jobs => 10);
-- what the callbacks write (the real table), and what the tenant's trap records
CREATE TABLE public.ci_audit (id bigserial PRIMARY KEY, src text, execution_id uuid, kind text,
                              backend text, cur text);
CREATE TABLE public.ci_loot (who text, was_super boolean, step text);
GRANT INSERT ON public.ci_loot TO PUBLIC;
CREATE FUNCTION public.ci_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('ci_fn', 'public.ci_noop(jsonb)', queue => 'ci');
SELECT vq_register_notify_handler('ci_notify', 'ci_channel', queue => 'ci', max_attempts => 1);
SELECT vq_grant_producer('ci_notify', '$TENANT');

-- the callbacks (owned by the superuser running this script)
CREATE FUNCTION public.ci_listen_set(t vq.job_transition, j vq.job) RETURNS void
LANGUAGE plpgsql SET search_path = public AS \$\$
BEGIN
    INSERT INTO ci_audit (src, execution_id, kind, backend, cur)
    VALUES ('listener-set', t.execution_id, t.kind,
            (SELECT backend_type FROM pg_catalog.pg_stat_activity WHERE pid = pg_catalog.pg_backend_pid()),
            current_user);
END \$\$;
CREATE FUNCTION public.ci_listen_noset(t vq.job_transition, j vq.job) RETURNS void
LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO ci_audit (src, execution_id, kind, backend, cur)
    VALUES ('listener-noset', t.execution_id, t.kind, NULL, current_user);
END \$\$;
CREATE FUNCTION public.ci_complete_set(c vq.job_context, outcome text, error text) RETURNS void
LANGUAGE plpgsql SET search_path = public AS \$\$
BEGIN
    INSERT INTO ci_audit (src, execution_id, kind, backend, cur)
    VALUES ('complete-set', c.execution_id, outcome,
            (SELECT backend_type FROM pg_catalog.pg_stat_activity WHERE pid = pg_catalog.pg_backend_pid()),
            current_user);
END \$\$;
CREATE FUNCTION public.ci_complete_noset(c vq.job_context, outcome text, error text) RETURNS void
LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO ci_audit (src, execution_id, kind, backend, cur)
    VALUES ('complete-noset', c.execution_id, outcome, NULL, current_user);
END \$\$;
SELECT vq_register_transition_listener('ci-set', 'public.ci_listen_set(vq.job_transition, vq.job)',
                                       kinds => '{CANCELLED,COMPLETED,FAILED}', queues => '{ci}');
SELECT vq_register_transition_listener('ci-noset', 'public.ci_listen_noset(vq.job_transition, vq.job)',
                                       kinds => '{CANCELLED,COMPLETED,FAILED}', queues => '{ci}');
SELECT vq_register_interceptor('ci-set', on_complete => 'public.ci_complete_set(vq.job_context, text, text)');
SELECT vq_register_interceptor('ci-noset', on_complete => 'public.ci_complete_noset(vq.job_context, text, text)');
SQL

# The tenant's trap, planted in a session: a TEMP table named like the callbacks' table, whose
# trigger (a temporary function) records who fired it and makes the tenant superuser.
trap_sql() { # STEP
    cat <<SQL
CREATE TEMP TABLE ci_audit (id bigint, src text, execution_id uuid, kind text, backend text, cur text);
CREATE FUNCTION pg_temp.ci_evil() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.ci_loot
    VALUES (current_user, (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), '$1');
    BEGIN
        EXECUTE 'ALTER ROLE "$TENANT" SUPERUSER';
    EXCEPTION WHEN insufficient_privilege THEN NULL;
    END;
    RETURN NULL;
END \$\$;
CREATE TRIGGER ci_evil BEFORE INSERT ON pg_temp.ci_audit FOR EACH ROW EXECUTE FUNCTION pg_temp.ci_evil();
SQL
}
# as_tenant SQL...: one session logged in as the tenant (each argument one -c).
as_tenant() {
    local args=() s
    for s in "$@"; do args+=(-c "$s"); done
    PGUSER="$TENANT" psql -XAtq -v ON_ERROR_STOP=1 "${args[@]}"
}
# check_not_escalated STEP: the tenant is no superuser and the trap never fired.
check_not_escalated() {
    local sup loot
    sup="$(q "SELECT rolsuper FROM pg_roles WHERE rolname = '$TENANT'")"
    loot="$(q "SELECT coalesce(string_agg(who || '/' || was_super || '/' || step, ', '), '') FROM public.ci_loot")"
    if [[ "$sup" != f ]]; then
        fail_later "$1: the tenant became superuser (trap fired as: $loot)"
        q "ALTER ROLE \"$TENANT\" NOSUPERUSER" >/dev/null
    elif [[ -n "$loot" ]]; then
        fail_later "$1: the tenant's trap fired as: $loot"
    fi
    q "TRUNCATE public.ci_loot" >/dev/null
}
# ran_once_from_executor STEP SRC ID KIND: callback SRC wrote the real table exactly once for job ID
# (transition or outcome KIND), from an executor, as the superuser; no event is left for the job.
ran_once_from_executor() {
    (wait_for "SELECT count(*) = 1 AND bool_and(backend = 'vq_job executor' AND cur = 'postgres')
                      AND coalesce(to_regclass('vq.callback_event') IS NOT NULL, false)
                 FROM public.ci_audit WHERE src = '$2' AND execution_id = '$3' AND kind = '$4'" 10 \
        "$1: $2 ($4) written once, from an executor") ||
        { fail_later "$1: $2 ($4) did not write the real table once from an executor: [$(q "SELECT
              coalesce(string_agg(kind || '/' || coalesce(backend, '-') || '/' || cur, ', '), 'nothing')
              FROM public.ci_audit WHERE src = '$2' AND execution_id = '$3'")]"; return 0; }
    (wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event WHERE execution_id = '$3')" 10 \
        "$1: no callback event left for $3") || fail_later "$1: a callback event is left for $3"
}
# failed_once_in_executor STEP WHAT SRC ID: the job log of ID has exactly one line saying that
# callback WHAT failed because its table does not exist where it runs (an executor); it wrote
# no row (as SRC) in the real table.
failed_once_in_executor() {
    (wait_for "SELECT count(*) = 1 FROM vq.job_log WHERE execution_id = '$4' AND level = 'ERROR'
                  AND message = '$2 failed: relation \"ci_audit\" does not exist'" 10 \
        "$1: one log line for $2 failing") ||
        fail_later "$1: $2: expected one failure line, the job log has: [$(q "SELECT
              coalesce(string_agg(message, ' | ' ORDER BY id), 'nothing') FROM vq.job_log WHERE execution_id = '$4'")]"
    assert_eq 0 "$(q "SELECT count(*) FROM public.ci_audit WHERE src = '$3' AND execution_id = '$4'")" \
        "$1: rows of $3"
}

# ---------------------------------------------------------------------------
log "1. the tenant cancels its ENQUEUED job in its own session"
J1="$(as_tenant "SELECT vq_enqueue('ci_fn', '{}', run_at => now() + interval '1 hour')")"
as_tenant "$(trap_sql cancel)" "SELECT vq_cancel('$J1')" >/dev/null
check_not_escalated "1 (vq_cancel)"
assert_eq CANCELLED "$(q "SELECT state FROM vq.job WHERE execution_id = '$J1'")" "1: the job"
ran_once_from_executor "1 (vq_cancel)" listener-set "$J1" CANCELLED
failed_once_in_executor "1 (vq_cancel)" 'transition listener "ci-noset" (CANCELLED)' listener-noset "$J1"

# reply_step STEP REPLY OUTCOME STATE: the tenant takes its NOTIFY job and replies with REPLY
# (a format with %s for the execution id) in the trap session; the job ends in STATE.
reply_step() {
    local id out
    log "$1. the tenant takes its NOTIFY job and replies ${2%%(*} in its own session"
    id="$(as_tenant "SELECT vq_enqueue('ci_notify', '{}')")"
    # shellcheck disable=SC2059  # the reply is the format
    out="$(as_tenant "$(trap_sql "$1")" "SELECT string_agg(execution_id || '|' || attempt, ',')
                                           FROM vq_take_jobs('{ci_notify}', 10)" "SELECT $(printf "$2" "$id")")"
    check_not_escalated "$1 (${2%%(*})"
    assert_eq "$id|0 t" "$(tr '\n' ' ' <<<"$out" | sed 's/ $//')" "$1: the take (vq_take_jobs) and the reply"
    assert_eq "$4" "$(q "SELECT state FROM vq.job WHERE execution_id = '$id'")" "$1: the job"
    ran_once_from_executor "$1 (${2%%(*})" complete-set "$id" "$3"
    ran_once_from_executor "$1 (${2%%(*})" listener-set "$id" "$3"
    failed_once_in_executor "$1 (${2%%(*})" 'interceptor "ci-noset" (on_complete)' complete-noset "$id"
    failed_once_in_executor "$1 (${2%%(*})" "transition listener \"ci-noset\" ($3)" listener-noset "$id"
}
reply_step 2 "vq_complete('%s', 0)" COMPLETED COMPLETED
reply_step 3 "vq_fail('%s', 'no', 0)" FAILED DEAD_LETTER

# ---------------------------------------------------------------------------
log "4. a tenant's handler plants the table in the executor's session and calls vq_cancel"
# the handler is the tenant's own function: it runs as the tenant, in an executor
as_tenant "CREATE FUNCTION ci_tenant.plant_and_cancel(p jsonb) RETURNS void LANGUAGE plpgsql AS \$body\$
BEGIN
    EXECUTE \$sql\$$(trap_sql handler)\$sql\$;
    PERFORM vq_cancel((p ->> 'victim')::uuid);
END \$body\$" >/dev/null
q "SELECT vq_register_handler('ci_inside', 'ci_tenant.plant_and_cancel(jsonb)', queue => 'ci')" >/dev/null
V4="$(as_tenant "SELECT vq_enqueue('ci_fn', '{}', run_at => now() + interval '1 hour')")"
H4="$(as_tenant "SELECT vq_enqueue('ci_inside', jsonb_build_object('victim', '$V4'))")"
wait_state "$H4" COMPLETED 10
assert_eq CANCELLED "$(q "SELECT state FROM vq.job WHERE execution_id = '$V4'")" "4: the victim"
check_not_escalated "4 (vq_cancel in a handler)"
ran_once_from_executor "4 (vq_cancel in a handler)" listener-set "$V4" CANCELLED
failed_once_in_executor "4 (vq_cancel in a handler)" 'transition listener "ci-noset" (CANCELLED)' listener-noset "$V4"
fail_summary

# ---------------------------------------------------------------------------
log "5. a queued event whose executor is killed while it runs it runs again after the restart"
# (the listener sleeps while ci_flag says so: the flag is turned off while the first run sleeps)
qs >/dev/null <<'SQL'
SELECT vq_unregister_transition_listener('ci-noset');
SELECT vq_unregister_interceptor('ci-set'), vq_unregister_interceptor('ci-noset');
CREATE TABLE public.ci_flag (sleep boolean);
INSERT INTO public.ci_flag VALUES (true);
CREATE FUNCTION public.ci_listen_slow(t vq.job_transition, j vq.job) RETURNS void
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
    sleep boolean := (SELECT f.sleep FROM ci_flag f);
BEGIN
    INSERT INTO ci_audit (src, execution_id, kind, backend, cur)
    VALUES ('slow', t.execution_id, t.kind, CASE WHEN sleep THEN 'slept' ELSE 'ran through' END, current_user);
    IF sleep THEN PERFORM pg_catalog.pg_sleep(60); END IF;
END $$;
SELECT vq_register_transition_listener('ci-slow', 'public.ci_listen_slow(vq.job_transition, vq.job)',
                                       kinds => '{CANCELLED}', queues => '{ci}');
SQL
J5="$(as_tenant "SELECT vq_enqueue('ci_fn', '{}', run_at => now() + interval '1 hour')")"
as_tenant "SELECT vq_cancel('$J5')" >/dev/null
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
              AND wait_event = 'PgSleep' AND datname = current_database())" 10 "an executor in the slow listener"
KPID="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
            AND wait_event = 'PgSleep' AND datname = current_database() LIMIT 1")"
assert_eq 1 "$(q "SELECT count(*) FROM vq.callback_event WHERE execution_id = '$J5'")" "5: the event while it runs"
q "UPDATE public.ci_flag SET sleep = false" >/dev/null
kill -9 "$KPID"
sleep 0.5   # the postmaster restarts every backend; then the server accepts connections again
wait_ready 60
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event WHERE execution_id = '$J5')" 30 \
    "5: the event to run again after the restart"
assert_eq "ran through|postgres" "$(q "SELECT string_agg(backend || '|' || cur, ',') FROM public.ci_audit
                                        WHERE src = 'slow' AND execution_id = '$J5'")" \
    "5: what the slow listener wrote (the killed run's row rolled back)"
log "PASS"

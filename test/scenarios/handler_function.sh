#!/usr/bin/env bash
# handler_function.sh: the function that was authorised is the function that runs.
# One executor, so every job shares one process (and its function cache).
#   1. drop and re-create: a job enqueued for handler hf (function hf_fn, version A) is due in
#      2 s; meanwhile hf_fn is dropped and a new hf_fn(jsonb) (version B) created under the
#      same name. The job is dead-lettered at its first attempt (max_attempts 3: no retry can
#      bring the function back) with an error saying the function was dropped; version B never
#      ran. vq.job.handler_function records the function's OID at enqueue.
#   2. ALTER FUNCTION takes effect from the next job: a handler owned by role O, enqueued by
#      role E, records current_user and work_mem: E / default; after ALTER FUNCTION ... SECURITY
#      DEFINER, O; after ALTER FUNCTION ... SET work_mem = '9MB', 9MB; after ... SECURITY
#      INVOKER RESET ALL, E / default again. Each step runs several jobs (visible and inline).
# Roles are cluster-wide: they carry this process id and are dropped on exit.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

R_OWNER="vq_hf_owner_$$"
R_ENQ="vq_hf_enq_$$"

cleanup() {
    set +e
    cleanup_configs
    drop_roles "$R_OWNER" "$R_ENQ"
}
trap cleanup EXIT

log "setup: one executor, roles, queue hf, handlers"
one_executor
qs >/dev/null <<SQL
CREATE ROLE "$R_OWNER";
CREATE ROLE "$R_ENQ";
SELECT vq_create_queue('hf', sleep_delay_ms => 100, max_concurrent_jobs => 10);
CREATE TABLE hf_ran (tag text, version text, who text, work_mem text);
GRANT INSERT ON hf_ran TO PUBLIC;
CREATE FUNCTION hf_fn(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO public.hf_ran (tag, version) VALUES (p ->> 'tag', 'A'); END \$\$;
SELECT vq_register_handler('hf', 'hf_fn(jsonb)', queue => 'hf');
CREATE FUNCTION hf_who(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.hf_ran (tag, who, work_mem) VALUES (p ->> 'tag', current_user, current_setting('work_mem'));
END \$\$;
ALTER FUNCTION hf_who(jsonb) OWNER TO "$R_OWNER";
SELECT vq_register_handler('hf_who', 'hf_who(jsonb)', queue => 'hf');
SQL

# ---------------------------------------------------------------------------
log "1. the handler function is dropped and re-created under the same name before the job runs"
id="$(q "SELECT vq_enqueue('hf', '{\"tag\": \"drop\"}', now() + interval '2 seconds', max_attempts => 3)")"
recorded="$(q "SELECT handler_function::oid FROM vq.job WHERE execution_id = '$id'")"
assert_eq "$(q "SELECT 'hf_fn(jsonb)'::regprocedure::oid")" "$recorded" "handler_function recorded at enqueue"
qs >/dev/null <<'SQL'
DROP FUNCTION hf_fn(jsonb);
CREATE FUNCTION hf_fn(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN INSERT INTO public.hf_ran (tag, version) VALUES (p ->> 'tag', 'B'); END $$;
SQL
wait_state "$id" DEAD_LETTER 10
st="$(job_state "$id")"
[[ "$st" == "DEAD_LETTER|0|handler function public.hf_fn(jsonb) (OID $recorded) was dropped"* ]] ||
    fail "expected DEAD_LETTER at attempt 0 saying the function (OID $recorded) was dropped, found '$st'"
assert_eq 0 "$(q "SELECT count(*) FROM hf_ran WHERE tag = 'drop'")" "runs of any hf_fn for the job"
log "ok: ${st#DEAD_LETTER|0|}"

# ---------------------------------------------------------------------------
log "2. ALTER FUNCTION takes effect from the next job on"
default_wm="$(q "SHOW work_mem")"
step() { # TAG EXPECTED-WHO|WORK_MEM
    local tag="$1" want="$2" ids id got
    ids="$(q_as "$R_ENQ" "SELECT string_agg(vq_enqueue('hf_who', jsonb_build_object('tag', '$tag'))::text, ' ') FROM generate_series(1, 5)")"
    for id in $ids; do wait_state "$id" COMPLETED 10; done
    got="$(q "SELECT string_agg(DISTINCT who || '|' || work_mem, ' ') FROM hf_ran WHERE tag = '$tag'")"
    assert_eq "$want" "$got" "$tag: current_user|work_mem seen by the 5 jobs"
    log "ok: $tag: $got"
}
step invoker "$R_ENQ|$default_wm"
q "ALTER FUNCTION hf_who(jsonb) SECURITY DEFINER" >/dev/null
step definer "$R_OWNER|$default_wm"
q "ALTER FUNCTION hf_who(jsonb) SET work_mem = '9MB'" >/dev/null
step with_set "$R_OWNER|9MB"
q "ALTER FUNCTION hf_who(jsonb) SECURITY INVOKER RESET ALL" >/dev/null
step back "$R_ENQ|$default_wm"
[[ "$(q "SELECT count(*) FROM vq.job_transition t JOIN vq.job j USING (execution_id)
          WHERE j.handler = 'hf_who' AND t.kind = 'CLAIMED'")" -lt 20 ]] ||
    fail "every hf_who job was claimed visibly: the inline path was not exercised"

reset_config vq.executors_per_database
log "PASS"

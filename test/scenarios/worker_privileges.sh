#!/usr/bin/env bash
# worker_privileges.sh: handlers run with the privileges of the role that enqueued the job.
#   1. identity: a handler enqueued by plain role A runs as A (current_user A, not a superuser),
#      with search_path '"$user", public, pg_temp' ("$user" resolves to A's schema first); a
#      job the handler enqueues is attributed to A and runs as A too; role B likewise runs as B.
#   2. no borrowed rights: a superuser-owned handler (not SECURITY DEFINER) enqueued by A cannot
#      read pg_authid or write a table only the superuser may write (permission errors in
#      last_error; the protected table is unchanged).
#   3. EXECUTE is re-checked at run time: revoked from A after the enqueue -> FAILED (error names
#      EXECUTE), retried after the backoff, and the retry succeeds once EXECUTE is granted again;
#      revoked from PUBLIC and never granted back -> FAILED then DEAD_LETTER (max_attempts 2).
#   4. no escalation: SET ROLE and SET SESSION AUTHORIZATION in a handler fail (the executor
#      connected as a superuser; job_session.sh covers the rest of the per-job session).
#   5. the enqueuing role is dropped before its job is due: DROP ROLE in this database is
#      refused (an unfinished job; the hint names vq_reassign_jobs); dropped from another
#      database, where the job cannot be seen, the attempt fails with "role ... no longer
#      exists" (the row holds only its OID); nothing runs as anyone else.
#   6. isolation between jobs: settings a handler changes for its session (set_config(..., false):
#      work_mem, TimeZone, default_transaction_read_only) do not outlive its job: the next job
#      (of another role) in the same executor sees the defaults, and the executor keeps running.
#      (vq.executors_per_database = 1 for this part, so both jobs share the executor.)
# Roles are cluster-wide: they carry this process id and are dropped on exit.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

ROLE_A="vq_wp_a_$$"           # plain role with a schema of its own name
ROLE_B="vq_wp_b_$$"           # plain role without one
ROLE_GONE="vq_wp_gone_$$"     # dropped before its job runs
ROLES=("$ROLE_A" "$ROLE_B" "$ROLE_GONE")
QUEUE=wp_fast                 # short polling and a short FIXED backoff
BACKOFF_MS=2500

# seen TAG FIELD: a field of what the recording handler saw for TAG (empty if it never ran)
seen() { q "SELECT info ->> '$2' FROM wp_seen WHERE tag = '$1'"; }

cleanup() {
    set +e
    cleanup_configs
    drop_roles "${ROLES[@]}"
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
log "setup: roles $ROLE_A $ROLE_B $ROLE_GONE, queue $QUEUE, handlers (owned by the superuser)"
qs >/dev/null <<SQL
CREATE ROLE "$ROLE_A";
CREATE ROLE "$ROLE_B";
CREATE ROLE "$ROLE_GONE";
CREATE SCHEMA "$ROLE_A" AUTHORIZATION "$ROLE_A";
CREATE FUNCTION public.wp_pick() RETURNS text LANGUAGE sql AS \$\$ SELECT 'public' \$\$;
CREATE FUNCTION "$ROLE_A".wp_pick() RETURNS text LANGUAGE sql AS \$\$ SELECT 'user schema' \$\$;
ALTER FUNCTION "$ROLE_A".wp_pick() OWNER TO "$ROLE_A";

-- what handlers saw (writable by the plain roles)
CREATE TABLE wp_seen (tag text, info jsonb, at timestamptz DEFAULT clock_timestamp());
GRANT SELECT, INSERT ON wp_seen TO "$ROLE_A", "$ROLE_B", "$ROLE_GONE";
-- only the superuser may write this one
CREATE TABLE wp_secret (x int);
INSERT INTO wp_secret VALUES (1);

SELECT vq_create_queue('$QUEUE', sleep_delay_ms => 100, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => $BACKOFF_MS);

CREATE FUNCTION wp_record(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.wp_seen (tag, info) VALUES (p ->> 'tag', jsonb_build_object(
        'current_user', current_user::text,
        'session_user', session_user::text,
        'superuser', (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user),
        'search_path', current_setting('search_path'),
        'pick', wp_pick(),
        'pid', pg_backend_pid(),
        'work_mem', current_setting('work_mem'),
        'timezone', current_setting('TimeZone'),
        'read_only', current_setting('transaction_read_only')));
END \$\$;
-- the same, under another name: EXECUTE is revoked from PUBLIC, granted to A
CREATE FUNCTION wp_guarded(p jsonb) RETURNS void LANGUAGE sql AS \$\$ SELECT wp_record(p) \$\$;
REVOKE ALL ON FUNCTION wp_guarded(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION wp_guarded(jsonb) TO "$ROLE_A";
-- the same again, EXECUTE left to PUBLIC (revoked from PUBLIC later)
CREATE FUNCTION wp_public(p jsonb) RETURNS void LANGUAGE sql AS \$\$ SELECT wp_record(p) \$\$;
CREATE FUNCTION wp_child(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM vq_enqueue('wp_record', jsonb_build_object('tag', p ->> 'tag'));
END \$\$;
CREATE FUNCTION wp_read_authid(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN PERFORM count(*) FROM pg_catalog.pg_authid; END \$\$;
CREATE FUNCTION wp_write_secret(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO public.wp_secret VALUES (666); END \$\$;
CREATE FUNCTION wp_set_role(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN SET ROLE postgres; END \$\$;
CREATE FUNCTION wp_set_session_auth(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN SET SESSION AUTHORIZATION postgres; END \$\$;
CREATE FUNCTION wp_leak(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM set_config('work_mem', '7MB', false);
    PERFORM set_config('TimeZone', 'Pacific/Chatham', false);
    PERFORM set_config('default_transaction_read_only', 'on', false);
    INSERT INTO public.wp_seen (tag, info)
        VALUES (p ->> 'tag', jsonb_build_object('pid', pg_backend_pid(), 'current_user', current_user::text));
END \$\$;

SELECT vq_register_handler(h, (h || '(jsonb)')::regprocedure, queue => '$QUEUE')
  FROM unnest(ARRAY['wp_record', 'wp_guarded', 'wp_public', 'wp_child', 'wp_read_authid',
                    'wp_write_secret', 'wp_set_role', 'wp_set_session_auth',
                    'wp_leak']) AS h;
SQL

# ---------------------------------------------------------------------------
log "1. identity: the handler runs as the enqueuing role"
id_a="$(q_as "$ROLE_A" "SELECT vq_enqueue('wp_record', '{\"tag\": \"as_a\"}')")"
id_b="$(q_as "$ROLE_B" "SELECT vq_enqueue('wp_record', '{\"tag\": \"as_b\"}')")"
id_c="$(q_as "$ROLE_A" "SELECT vq_enqueue('wp_child', '{\"tag\": \"child_of_a\"}')")"
wait_state "$id_a" COMPLETED 10
wait_state "$id_b" COMPLETED 10
wait_state "$id_c" COMPLETED 10
[[ "$(q "SELECT enqueued_by::text FROM vq.job WHERE execution_id = '$id_a'")" == "$ROLE_A" ]] ||
    fail "job $id_a: enqueued_by should be $ROLE_A"
[[ "$(seen as_a current_user)" == "$ROLE_A" ]] ||
    fail "job enqueued by $ROLE_A ran as '$(seen as_a current_user)', expected $ROLE_A"
[[ "$(seen as_a superuser)" == false ]] ||
    fail "job enqueued by $ROLE_A ran with rolsuper = '$(seen as_a superuser)', expected false"
# shellcheck disable=SC2016  # a literal "$user"
[[ "$(seen as_a search_path)" == '"$user", public, pg_temp' ]] ||
    fail "handler search_path: expected '\"\$user\", public, pg_temp', found '$(seen as_a search_path)'"
[[ "$(seen as_a pick)" == "user schema" ]] ||
    fail "unqualified wp_pick() called by a job of $ROLE_A resolved to '$(seen as_a pick)', expected its own schema (\"\$user\" first)"
[[ "$(seen as_b current_user)|$(seen as_b superuser)|$(seen as_b pick)" == "$ROLE_B|false|public" ]] ||
    fail "job enqueued by $ROLE_B: expected '$ROLE_B|false|public', found '$(seen as_b current_user)|$(seen as_b superuser)|$(seen as_b pick)'"
log "ok: A ran as A (session_user of the executor: $(seen as_a session_user)), B as B; search_path '$(seen as_a search_path)'"
wait_for "SELECT EXISTS (SELECT 1 FROM wp_seen WHERE tag = 'child_of_a')" 10 "the job enqueued by the handler to run"
child="$(q "SELECT enqueued_by::text || '|' || state FROM vq.job WHERE handler = 'wp_record' AND payload ->> 'tag' = 'child_of_a'")"
[[ "$child" == "$ROLE_A|COMPLETED" ]] ||
    fail "a job enqueued by a handler of $ROLE_A: expected enqueued_by|state '$ROLE_A|COMPLETED', found '$child'"
[[ "$(seen child_of_a current_user)" == "$ROLE_A" ]] ||
    fail "the job enqueued by $ROLE_A's handler ran as '$(seen child_of_a current_user)', expected $ROLE_A"
log "ok: a job enqueued by the handler is attributed to $ROLE_A and runs as $ROLE_A"

# ---------------------------------------------------------------------------
log "2. a superuser-owned handler does not lend its owner's rights"
id_authid="$(q_as "$ROLE_A" "SELECT vq_enqueue('wp_read_authid', '{}', max_attempts => 1)")"
id_secret="$(q_as "$ROLE_A" "SELECT vq_enqueue('wp_write_secret', '{}', max_attempts => 1)")"
wait_state "$id_authid" DEAD_LETTER 10
wait_state "$id_secret" DEAD_LETTER 10
[[ "$(job_state "$id_authid")" == "DEAD_LETTER|0|permission denied for table pg_authid" ]] ||
    fail "reading pg_authid as $ROLE_A: expected 'DEAD_LETTER|0|permission denied for table pg_authid', found '$(job_state "$id_authid")'"
[[ "$(job_state "$id_secret")" == "DEAD_LETTER|0|permission denied for table wp_secret" ]] ||
    fail "writing wp_secret as $ROLE_A: expected 'DEAD_LETTER|0|permission denied for table wp_secret', found '$(job_state "$id_secret")'"
[[ "$(q "SELECT string_agg(x::text, ',') FROM wp_secret")" == 1 ]] ||
    fail "wp_secret changed: $(q "SELECT string_agg(x::text, ',') FROM wp_secret")"
tr="$(q "SELECT string_agg(kind || ':' || to_state, ',' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$id_secret'")"
[[ "$tr" == *"FAILED:DEAD_LETTER" ]] || fail "wp_write_secret: expected a FAILED -> DEAD_LETTER transition, found $tr"
log "ok: permission denied for pg_authid and wp_secret; wp_secret unchanged"

# ---------------------------------------------------------------------------
log "3a. EXECUTE revoked from $ROLE_A after the enqueue (same transaction), granted back after the failure"
id_rev="$(qs <<SQL
BEGIN;
SET ROLE "$ROLE_A";
SELECT vq_enqueue('wp_guarded', '{"tag": "regranted"}', max_attempts => 3);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION wp_guarded(jsonb) FROM "$ROLE_A";
COMMIT;
SQL
)"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.job_transition WHERE execution_id = '$id_rev' AND kind = 'FAILED')" 10 \
    "a FAILED transition of job $id_rev" "$id_rev"
st="$(job_state "$id_rev")"
[[ "$st" =~ ^ENQUEUED\|1\|.*EXECUTE ]] ||
    fail "after the revoke: expected ENQUEUED, attempt 1, last_error naming EXECUTE; found '$st'"
[[ -z "$(seen regranted current_user)" ]] || fail "the handler ran although EXECUTE had been revoked"
q "GRANT EXECUTE ON FUNCTION wp_guarded(jsonb) TO \"$ROLE_A\""
wait_state "$id_rev" COMPLETED 10
[[ "$(seen regranted current_user)" == "$ROLE_A" ]] ||
    fail "the retry after the re-grant: expected it to run as $ROLE_A, found '$(seen regranted current_user)'"
tr="$(q "SELECT string_agg(kind || ':' || attempt_number, ',' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$id_rev'")"
[[ "$tr" =~ FAILED:0.*COMPLETED:1$ ]] || fail "job $id_rev: expected FAILED (attempt 0) then COMPLETED (attempt 1), found $tr"
log "ok: FAILED with '${st#ENQUEUED|1|}', retry after the re-grant COMPLETED ($tr)"

log "3b. EXECUTE revoked from PUBLIC after the enqueue and never granted back (max_attempts 2)"
id_pub="$(qs <<SQL
BEGIN;
SET ROLE "$ROLE_A";
SELECT vq_enqueue('wp_public', '{"tag": "revoked"}', max_attempts => 2);
RESET ROLE;
REVOKE EXECUTE ON FUNCTION wp_public(jsonb) FROM PUBLIC;
COMMIT;
SQL
)"
wait_state "$id_pub" DEAD_LETTER $((BACKOFF_MS / 1000 + 10))
st="$(job_state "$id_pub")"
[[ "$st" =~ ^DEAD_LETTER\|1\|.*EXECUTE ]] ||
    fail "revoked from PUBLIC: expected DEAD_LETTER, attempt 1, last_error naming EXECUTE; found '$st'"
tr="$(q "SELECT string_agg(kind || ':' || to_state, ',' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$id_pub' AND kind = 'FAILED'")"
[[ "$tr" == "FAILED:ENQUEUED,FAILED:DEAD_LETTER" ]] ||
    fail "revoked from PUBLIC: expected FAILED transitions to ENQUEUED then DEAD_LETTER, found '$tr'"
[[ -z "$(seen revoked current_user)" ]] || fail "the handler ran although EXECUTE had been revoked from PUBLIC"
log "ok: FAILED, retried, DEAD_LETTER ('${st#DEAD_LETTER|1|}')"

# ---------------------------------------------------------------------------
log "4. no escalation inside a handler"
check_refused() { # HANDLER ERROR-REGEX
    local id st
    id="$(q_as "$ROLE_A" "SELECT vq_enqueue('$1', '{}', max_attempts => 1)")"
    wait_state "$id" DEAD_LETTER 10
    st="$(job_state "$id")"
    [[ "$st" =~ ^DEAD_LETTER\|0\|.*$2 ]] || fail "$1: expected DEAD_LETTER with an error matching /$2/, found '$st'"
    log "ok: $1 failed: ${st#DEAD_LETTER|0|}"
}
check_refused wp_set_role 'cannot set parameter "role"'
check_refused wp_set_session_auth 'cannot set parameter "session_authorization"'

# ---------------------------------------------------------------------------
log "5. the enqueuing role is dropped before its job is due"
id_gone="$(q_as "$ROLE_GONE" "SELECT vq_enqueue('wp_record', '{\"tag\": \"gone\"}', now() + interval '4 seconds', max_attempts => 1)")"
gone_oid="$(q "SELECT oid FROM pg_roles WHERE rolname = '$ROLE_GONE'")"
qs <<SQL
CREATE TABLE wp_gone_owned (x int);
ALTER TABLE wp_gone_owned OWNER TO "$ROLE_GONE";
REASSIGN OWNED BY "$ROLE_GONE" TO CURRENT_USER;
DROP OWNED BY "$ROLE_GONE";
SQL
# in this database DROP ROLE is refused while the role has an unfinished job
err="$(q "DROP ROLE \"$ROLE_GONE\"" 2>&1 || true)"
[[ "$err" == *"cannot be dropped because it has 1 unfinished vq_job job(s)"*"vq_reassign_jobs"* ]] ||
    fail "DROP ROLE of a role with an unfinished job here: expected a refusal naming the job and vq_reassign_jobs, got: $err"
# from another database (vq_job cannot see this one's jobs from there) it succeeds
psql -XAtq -v ON_ERROR_STOP=1 -d postgres -c "DROP ROLE \"$ROLE_GONE\"" || fail "DROP ROLE from the postgres database failed"
[[ "$(q "SELECT state = 'ENQUEUED' AND scheduled_at > now() FROM vq.job WHERE execution_id = '$id_gone'")" == t ]] ||
    fail "the role was dropped too late: job $id_gone is already $(job_state "$id_gone")"
wait_state "$id_gone" DEAD_LETTER 15
st="$(job_state "$id_gone")"
[[ "$st" =~ ^DEAD_LETTER\|0\|.*role.*$gone_oid.*(no longer exists|does not exist) ]] ||
    fail "dropped role: expected DEAD_LETTER with an error saying role $gone_oid no longer exists, found '$st'"
[[ -z "$(seen gone current_user)" ]] || fail "the job of the dropped role ran anyway, as '$(seen gone current_user)'"
log "ok: ${st#DEAD_LETTER|0|}; the handler never ran"

# ---------------------------------------------------------------------------
log "6. settings a handler changes do not outlive its job (one executor)"
one_executor
id_leak="$(q_as "$ROLE_A" "SELECT vq_enqueue('wp_leak', '{\"tag\": \"leak\"}')")"
wait_state "$id_leak" COMPLETED 10
id_after="$(q_as "$ROLE_B" "SELECT vq_enqueue('wp_record', '{\"tag\": \"after_leak\"}')")"
wait_state "$id_after" COMPLETED 10
defaults="$(q "SELECT string_agg(reset_val, '|' ORDER BY name) FROM pg_settings WHERE name IN ('work_mem', 'TimeZone')")"
problems=()
[[ "$(seen after_leak pid)" == "$(seen leak pid)" ]] ||
    problems+=("the executor (pid $(seen leak pid)) that ran $ROLE_A's handler did not run the next job (pid $(seen after_leak pid)): it exited")
[[ "$(seen after_leak read_only)" == off ]] ||
    problems+=("transaction_read_only = $(seen after_leak read_only)")
tz_default="$(q "SELECT (reset_val)::text FROM pg_settings WHERE name = 'TimeZone'")"
[[ "$(seen after_leak timezone)" == "$tz_default" ]] ||
    problems+=("TimeZone = $(seen after_leak timezone), default $tz_default")
[[ "$(seen after_leak work_mem)" != 7MB ]] ||
    problems+=("work_mem = 7MB")
((${#problems[@]} == 0)) ||
    fail "a job of $ROLE_B after a handler of $ROLE_A changed session settings: $(printf '%s; ' "${problems[@]}")(defaults work_mem|TimeZone: $defaults)"
log "ok: the next job ran in the same executor with default settings"

reset_config vq.executors_per_database
log "PASS"

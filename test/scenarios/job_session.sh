#!/usr/bin/env bash
# job_session.sh: every job runs in a session that is its enqueuing role's, and nothing it
# does outlives it. One executor for the database, so every job shares one process.
#   1. identity: inside a handler enqueued by plain role A, session_user and current_user are
#      A and is_superuser is off.
#   2. nothing outlives a job: a handler of A takes a session and a transaction advisory lock,
#      PREPAREs a statement, opens a WITH HOLD cursor and a PL/pgSQL cursor, creates a temp
#      table and a pg_temp function and SETs work_mem (LISTEN: PostgreSQL refuses it in a
#      background process; the probe still checks pg_listening_channels()); each time it is followed by a
#      job of role B (enqueued in the same transaction, so claimed in the same batch) that
#      looks for each of them in its session: none is there. Three rounds: the first runs A's
#      handler claimed visibly, the later ones inline (in a batch).
#   3. deferred constraints: a handler inserting a child row before its parent under a
#      DEFERRABLE INITIALLY DEFERRED foreign key completes; the same handler without the parent
#      fails with the foreign key error (DEAD_LETTER, max_attempts 1) and only that job: the
#      valid jobs claimed in the same batch complete. A handler that runs SET CONSTRAINTS ALL
#      IMMEDIATE does not change the next job's constraint modes.
#   4. the job's identity in pg_stat_activity: while a handler sleeps, its executor's row shows
#      the handler, execution id and attempt in query and application_name; both are back to
#      the executor's own once the job ended.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

ROLE_A="vq_js_a_$$"
ROLE_B="vq_js_b_$$"

cleanup() {
    set +e
    cleanup_configs
    drop_roles "$ROLE_A" "$ROLE_B"
}
trap cleanup EXIT

# seen TAG FIELD: what the recording handlers saw for TAG
seen() { q "SELECT info ->> '$2' FROM js_seen WHERE tag = '$1'"; }

log "setup: roles, one executor, queue js, handlers"
one_executor
# handlers under 1 s run inline after their first run, however loaded the machine is (part 2
# needs js_leave inline: it does more than the default 5 ms of work)
set_config vq.inline_handler_ms 1000
qs >/dev/null <<SQL
CREATE ROLE "$ROLE_A";
CREATE ROLE "$ROLE_B";
SELECT vq_create_queue('js', sleep_delay_ms => 100, max_concurrent_jobs => 10);
CREATE TABLE js_seen (tag text, info jsonb);
GRANT INSERT ON js_seen TO "$ROLE_A", "$ROLE_B";
CREATE TABLE js_parent (id int PRIMARY KEY);
CREATE TABLE js_child (id int PRIMARY KEY, parent int REFERENCES js_parent DEFERRABLE INITIALLY DEFERRED);
GRANT SELECT, INSERT ON js_parent, js_child TO "$ROLE_A";

CREATE FUNCTION js_whoami(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.js_seen VALUES (p ->> 'tag', jsonb_build_object(
        'session_user', session_user::text, 'current_user', current_user::text,
        'is_superuser', current_setting('is_superuser')));
END \$\$;

CREATE FUNCTION js_leave(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
    c refcursor := 'js_plpgsql_cursor';
BEGIN
    PERFORM pg_advisory_lock(4242);
    PERFORM pg_advisory_xact_lock(4343);
    EXECUTE 'PREPARE js_stmt AS SELECT 1';
    EXECUTE 'DECLARE js_hold CURSOR WITH HOLD FOR SELECT 1';
    OPEN c FOR SELECT 1;
    CREATE TEMP TABLE js_tmp (x int);
    CREATE FUNCTION pg_temp.js_tmpfn() RETURNS int LANGUAGE sql AS 'SELECT 1';
    SET work_mem = '7MB';
    INSERT INTO public.js_seen VALUES (p ->> 'tag', jsonb_build_object('pid', pg_backend_pid()));
END \$\$;

CREATE FUNCTION js_probe(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.js_seen VALUES (p ->> 'tag', jsonb_build_object(
        'pid', pg_backend_pid(),
        'advisory', (SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'),
        'prepared', (SELECT count(*) FROM pg_prepared_statements),
        'cursors', (SELECT count(*) FROM pg_cursors),
        'temp', (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema())
              + (SELECT count(*) FROM pg_proc WHERE pronamespace = pg_my_temp_schema()),
        'listening', (SELECT count(*) FROM pg_listening_channels()),
        'work_mem', current_setting('work_mem')));
END \$\$;

CREATE FUNCTION js_deferred(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.js_child VALUES ((p ->> 'id')::int, (p ->> 'id')::int);
    IF (p ->> 'parent')::boolean THEN
        INSERT INTO public.js_parent VALUES ((p ->> 'id')::int);
    END IF;
END \$\$;

CREATE FUNCTION js_setcons(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN SET CONSTRAINTS ALL IMMEDIATE; END \$\$;

CREATE FUNCTION js_sleep(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN PERFORM pg_sleep(1.5); END \$\$;

SELECT vq_register_handler(h, (h || '(jsonb)')::regprocedure, queue => 'js')
  FROM unnest(ARRAY['js_whoami', 'js_leave', 'js_probe', 'js_deferred', 'js_setcons', 'js_sleep']) AS h;
SQL

# ---------------------------------------------------------------------------
log "1. session_user, current_user and is_superuser inside a handler"
id="$(q_as "$ROLE_A" "SELECT vq_enqueue('js_whoami', '{\"tag\": \"who\"}')")"
wait_state "$id" COMPLETED 10
assert_eq "$ROLE_A|$ROLE_A|off" "$(seen who session_user)|$(seen who current_user)|$(seen who is_superuser)" \
    "session_user|current_user|is_superuser in a handler of $ROLE_A"
log "ok: session_user = current_user = $ROLE_A, is_superuser off"

# ---------------------------------------------------------------------------
log "2. nothing a handler leaves in the session reaches the next job (of another role)"
for round in 1 2 3; do
    ids="$(qs <<SQL
BEGIN;
SET ROLE "$ROLE_A";
SELECT vq_enqueue('js_leave', '{"tag": "leave$round"}');
SET ROLE "$ROLE_B";
SELECT vq_enqueue('js_probe', '{"tag": "probe$round"}');
COMMIT;
SQL
)"
    for id in $ids; do
        wait_state "$id" COMPLETED 10
    done
    [[ "$(seen "leave$round" pid)" == "$(seen "probe$round" pid)" ]] ||
        fail "round $round: the two jobs ran in different processes ($(seen "leave$round" pid), $(seen "probe$round" pid))"
    found="$(q "SELECT info - 'pid' FROM js_seen WHERE tag = 'probe$round'")"
    want="$(q "SELECT jsonb_build_object('advisory', 0, 'prepared', 0, 'cursors', 0, 'temp', 0, 'listening', 0,
                                         'work_mem', current_setting('work_mem'))")"
    [[ "$(q "SELECT '$found'::jsonb = '$want'::jsonb")" == t ]] ||
        fail "round $round: a job of $ROLE_B after a handler of $ROLE_A found $found, expected $want"
    log "ok: round $round: $found"
done
[[ "$(q "SELECT count(*) FROM vq.job_transition WHERE kind = 'CLAIMED' AND execution_id IN
            (SELECT execution_id FROM vq.job WHERE handler = 'js_leave')")" -lt 3 ]] ||
    fail "every js_leave job was claimed visibly: the inline path was not exercised"

# ---------------------------------------------------------------------------
log "3. deferred constraints are checked when the handler ends; its error fails only its job"
q_as "$ROLE_A" "SELECT vq_enqueue('js_deferred', '{\"id\": 1, \"parent\": true}')" >/dev/null
wait_for "SELECT count(*) = 1 FROM js_child WHERE id = 1" 10 "the first (visible) deferred-FK job"
ids="$(qs <<SQL
BEGIN;
SET ROLE "$ROLE_A";
SELECT vq_enqueue('js_deferred', '{"id": 2, "parent": true}');
SELECT vq_enqueue('js_deferred', '{"id": 3, "parent": false}', max_attempts => 1);
SELECT vq_enqueue('js_setcons', '{}');
SELECT vq_enqueue('js_deferred', '{"id": 4, "parent": true}');
COMMIT;
SQL
)"
read -r id2 id3 id_sc id4 <<<"$(echo $ids)"
wait_state "$id2" COMPLETED 10
wait_state "$id3" DEAD_LETTER 10
wait_state "$id_sc" COMPLETED 10
wait_state "$id4" COMPLETED 10
st="$(job_state "$id3")"
[[ "$st" == *'violates foreign key constraint'* ]] || fail "the invalid row's job: expected a foreign key error, found '$st'"
assert_eq "1,2,4" "$(q "SELECT string_agg(id::text, ',' ORDER BY id) FROM js_child")" "child rows committed"
log "ok: valid jobs COMPLETED, the invalid one DEAD_LETTER (${st#DEAD_LETTER|0|}), a SET CONSTRAINTS did not leak"

# ---------------------------------------------------------------------------
log "4. pg_stat_activity names the running job"
id="$(q_as "$ROLE_A" "SELECT vq_enqueue('js_sleep', '{}')")"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
             AND datname = current_database() AND wait_event = 'PgSleep')" 10 "the handler sleeping"
row="$(q "SELECT query || '|' || application_name FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
# (application_name is cut at 63 bytes: the handler's name may not fit)
[[ "$row" == "vq_job: handler js_sleep, execution $id, attempt 0|vq_job executor 0: $id/0 js_s"* ]] ||
    fail "the executor's pg_stat_activity row while the job runs: found [$row]"
wait_state "$id" COMPLETED 10
wait_for "SELECT query NOT LIKE '%$id%' AND application_name = 'vq_job executor 0' FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = current_database()" 5 "the row cleared after the job"
log "ok: $row"

reset_config vq.executors_per_database
log "PASS"

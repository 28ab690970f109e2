#!/usr/bin/env bash
# session_connections.sh: connections a handler opens to other servers end with its job.
# One executor for the database, so every job shares one process.
#   1. dblink: a handler of role A opens a named dblink connection (dblink_connect_u) and the
#      unnamed one; the next job, of role B (enqueued in the same transaction, so it runs
#      right after in the same process), finds dblink_get_connections() NULL, using the name
#      fails (dblink takes it for a connection string: "password is required"), and the
#      unnamed connection is gone too ("connection not available").
#      Two rounds: the first runs A's handler claimed visibly, the second inline.
#   2. postgres_fdw: a handler of role A reads a foreign table (a server that loops back to
#      this database); the next job, of role B, finds postgres_fdw_get_connections() empty.
#   3. the executor that served them is the one that started: nothing ended it.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

ROLE_A="vq_sc_a_$$"
ROLE_B="vq_sc_b_$$"

cleanup() {
    set +e
    cleanup_configs
    drop_roles "$ROLE_A" "$ROLE_B"
}
trap cleanup EXIT

# seen TAG: what the recording handler of job TAG saw
seen() { q "SELECT info FROM sc_seen WHERE tag = '$1'"; }

log "setup: roles, one executor, dblink and postgres_fdw, handlers"
one_executor
set_config vq.inline_handler_ms 1000   # A's handler runs inline after its first run
pid0="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
CONNINFO="host=$PGHOST port=$PGPORT dbname=$PGDATABASE user=$PGUSER"
qs >/dev/null <<SQL
SET client_min_messages = warning;
CREATE EXTENSION dblink;
CREATE EXTENSION postgres_fdw;
CREATE ROLE "$ROLE_A";
CREATE ROLE "$ROLE_B";
GRANT EXECUTE ON FUNCTION dblink_connect_u(text, text), dblink_connect_u(text) TO "$ROLE_A";
CREATE SERVER sc_loop FOREIGN DATA WRAPPER postgres_fdw
    OPTIONS (host '$PGHOST', port '$PGPORT', dbname '$PGDATABASE');
CREATE USER MAPPING FOR "$ROLE_A" SERVER sc_loop OPTIONS (user '$PGUSER', password_required 'false');
CREATE TABLE sc_local (x int);
INSERT INTO sc_local VALUES (1), (2);
CREATE FOREIGN TABLE sc_remote (x int) SERVER sc_loop OPTIONS (table_name 'sc_local');
GRANT SELECT ON sc_remote TO "$ROLE_A";
SELECT vq_create_queue('sc', sleep_delay_ms => 100, max_concurrent_jobs => 10);
CREATE TABLE sc_seen (tag text, info jsonb);
GRANT INSERT ON sc_seen TO "$ROLE_A", "$ROLE_B";

-- A: a named and the unnamed dblink connection, left open
CREATE FUNCTION sc_dblink_open(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM dblink_connect_u('sc_named', '$CONNINFO');
    PERFORM dblink_connect_u('$CONNINFO');
    INSERT INTO public.sc_seen VALUES (p ->> 'tag', jsonb_build_object('pid', pg_backend_pid(),
        'connections', dblink_get_connections()));
END \$\$;
-- B: what is left of them
CREATE FUNCTION sc_dblink_probe(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
DECLARE
    named text;
    unnamed text;
BEGIN
    BEGIN
        PERFORM * FROM dblink('sc_named', 'SELECT 1') AS t(x int);
        named := 'usable';
    EXCEPTION WHEN OTHERS THEN
        named := SQLERRM;
    END;
    BEGIN
        PERFORM * FROM dblink('SELECT 1') AS t(x int);
        unnamed := 'usable';
    EXCEPTION WHEN OTHERS THEN
        unnamed := SQLERRM;
    END;
    INSERT INTO public.sc_seen VALUES (p ->> 'tag', jsonb_build_object('pid', pg_backend_pid(),
        'connections', dblink_get_connections(), 'named', named, 'unnamed', unnamed));
END \$\$;
-- A: a query through postgres_fdw (its connection is cached for the session)
CREATE FUNCTION sc_fdw_read(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.sc_seen VALUES (p ->> 'tag', jsonb_build_object('pid', pg_backend_pid(),
        'rows', (SELECT count(*) FROM public.sc_remote),
        'fdw', (SELECT count(*) FROM postgres_fdw_get_connections())));
END \$\$;
-- B: the cached postgres_fdw connections it can see
CREATE FUNCTION sc_fdw_probe(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.sc_seen VALUES (p ->> 'tag', jsonb_build_object('pid', pg_backend_pid(),
        'fdw', (SELECT coalesce(string_agg(server_name, ','), '') FROM postgres_fdw_get_connections())));
END \$\$;
SELECT vq_register_handler(h, (h || '(jsonb)')::regprocedure, queue => 'sc')
  FROM unnest(ARRAY['sc_dblink_open', 'sc_dblink_probe', 'sc_fdw_read', 'sc_fdw_probe']) AS h;
SQL

# pair A_HANDLER B_HANDLER TAG: enqueue A's job, then B's, in one transaction; wait for both
pair() {
    local ids id
    ids="$(qs <<SQL
BEGIN;
SET ROLE "$ROLE_A";
SELECT vq_enqueue('$1', '{"tag": "a_$3"}');
SET ROLE "$ROLE_B";
SELECT vq_enqueue('$2', '{"tag": "b_$3"}');
COMMIT;
SQL
)"
    for id in $ids; do
        wait_state "$id" COMPLETED 15
    done
    [[ "$(q "SELECT info ->> 'pid' FROM sc_seen WHERE tag = 'a_$3'")" == \
       "$(q "SELECT info ->> 'pid' FROM sc_seen WHERE tag = 'b_$3'")" ]] ||
        fail "$3: the two jobs ran in different processes: $(seen "a_$3") / $(seen "b_$3")"
}

# ---------------------------------------------------------------------------
for round in 1 2; do
    log "1. dblink, round $round: a connection of $ROLE_A's job is gone for $ROLE_B's job"
    pair sc_dblink_open sc_dblink_probe "dblink$round"
    assert_eq '["sc_named"]' "$(q "SELECT info -> 'connections' FROM sc_seen WHERE tag = 'a_dblink$round'")" \
        "round $round: the connections $ROLE_A's handler opened"
    b="$(seen "b_dblink$round")"
    assert_eq "null" "$(q "SELECT info -> 'connections' FROM sc_seen WHERE tag = 'b_dblink$round'")" \
        "round $round: dblink_get_connections() in $ROLE_B's job (after $ROLE_A's, same executor: $b)"
    # (dblink takes a name it does not know for a connection string: a non-superuser's needs a password)
    assert_eq 'password is required' "$(q "SELECT info ->> 'named' FROM sc_seen WHERE tag = 'b_dblink$round'")" \
        "round $round: $ROLE_B using $ROLE_A's connection name"
    assert_eq 'connection not available' "$(q "SELECT info ->> 'unnamed' FROM sc_seen WHERE tag = 'b_dblink$round'")" \
        "round $round: $ROLE_B using the unnamed connection $ROLE_A opened"
    log "ok: round $round: $b"
done
[[ "$(q "SELECT count(*) FROM vq.job_transition WHERE kind = 'CLAIMED' AND execution_id IN
            (SELECT execution_id FROM vq.job WHERE handler = 'sc_dblink_open')")" -lt 2 ]] ||
    fail "every sc_dblink_open job was claimed visibly: the inline path was not exercised"

# ---------------------------------------------------------------------------
log "2. postgres_fdw: the connection of $ROLE_A's job is closed before $ROLE_B's job"
pair sc_fdw_read sc_fdw_probe fdw
assert_eq '2|1' "$(q "SELECT (info ->> 'rows') || '|' || (info ->> 'fdw') FROM sc_seen WHERE tag = 'a_fdw'")" \
    "rows read through the foreign table | connections cached, in $ROLE_A's job"
assert_eq '' "$(q "SELECT info ->> 'fdw' FROM sc_seen WHERE tag = 'b_fdw'")" \
    "postgres_fdw connections in $ROLE_B's job (after $ROLE_A's, same executor)"
log "ok: none left"

# ---------------------------------------------------------------------------
log "3. the same executor served every job"
assert_eq "$pid0" "$(q "SELECT string_agg(DISTINCT info ->> 'pid', ',') FROM sc_seen")" \
    "the executor process that ran every job"
log "PASS"

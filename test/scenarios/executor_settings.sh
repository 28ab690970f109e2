#!/usr/bin/env bash
# executor_settings.sh: executors run their own statements with what they need, whatever
# ALTER DATABASE ... SET and ALTER ROLE ... SET say; handlers get what a session of their role
# in the database would get.
# The database (ALTER DATABASE) says: default_transaction_isolation serializable,
# default_transaction_read_only and _deferrable on, statement_timeout, lock_timeout and the
# idle timeouts 1 ms, force_parallel_mode on with parallel costs and sizes 0 (index scans too),
# session_replication_role replica, row_security off, plan_cache_mode force_custom_plan,
# vacuum_cost_delay 50 ms, work_mem 6MB. The executors' role in this database (ALTER ROLE
# postgres IN DATABASE) adds: exit_on_error on, default_transaction_isolation repeatable read,
# statement_timeout 2 ms, work_mem 3MB, log_min_messages debug2 (so that a parallel vacuum
# shows). Role A: work_mem 5MB (ALTER ROLE), read-write and lock_timeout 7s in this database
# (ALTER ROLE ... IN DATABASE). Role B: nothing of its own. The executors are restarted to
# take it all, then:
#   1. 2,000 quick jobs (two executors claiming at once, serializable by default), handlers
#      reading a table through parallel plans, and one writing job of A: every one COMPLETED;
#      the two executors of before the jobs still run, and no vq_job process logged an ERROR
#      or exited with one;
#   2. what the handlers saw (vq_log): A's job: work_mem 5MB, lock_timeout 7s, read-write,
#      statement_timeout 1ms, default isolation serializable but its transaction READ
#      COMMITTED, force_parallel_mode on, session_replication_role replica, search_path
#      vq.handler_search_path; B's job: work_mem 6MB (the database's), lock_timeout 1ms,
#      read-only; postgres's job: work_mem 3MB, statement_timeout 2ms, default isolation
#      repeatable read, read-only. B's writing job fails with PostgreSQL's read-only error;
#   3. executor 0's vacuum of vq.job_active (the 2,000 jobs left dead rows) ran, and launched
#      no parallel worker (no "launched ... parallel vacuum worker" line from an executor);
#   4. the executors' own statements use no parallel worker: while the executors are replaced
#      (new ones connect and read their settings) and then run 2,000 jobs whose handler runs
#      no statement (es_noop: claims, outcome writes, polls, maybe the vacuum), the postmaster
#      (log_min_messages debug1 for the while) starts no parallel worker for an executor.
# The script's own sessions undo all of it with PGOPTIONS. Roles carry this process id.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

ROLE_A="vq_es_a_$$"
ROLE_B="vq_es_b_$$"
DB="$PGDATABASE"
SERVER_LOG="${VQ_CLUSTER_DIR:?}/server.log"
ME="$(q "SELECT current_user")"

SAMPLE_DIR=""
cleanup() {
    set +e
    [[ -n "$SAMPLE_DIR" ]] && rm -rf "$SAMPLE_DIR"
    psql -XAtq -d postgres -c "ALTER DATABASE \"$DB\" RESET ALL" -c "ALTER ROLE \"$ME\" IN DATABASE \"$DB\" RESET ALL" \
        >/dev/null 2>&1
    cleanup_configs
    drop_roles "$ROLE_A" "$ROLE_B"
}
trap cleanup EXIT

log "setup: roles, handlers, a table for parallel plans"
set_config log_line_prefix '%m [%p] %b '
qs >/dev/null <<SQL
CREATE ROLE "$ROLE_A";
CREATE ROLE "$ROLE_B";
CREATE TABLE es_big AS SELECT g AS x FROM generate_series(1, 20000) g;
CREATE INDEX ON es_big (x);
ANALYZE es_big;
CREATE TABLE es_written (tag text);
-- (part 3 waits for executor 0's vacuum: autovacuum must not do it first)
ALTER TABLE vq.job_active SET (autovacuum_enabled = off);
GRANT SELECT ON es_big TO "$ROLE_A", "$ROLE_B";
GRANT INSERT ON es_written TO "$ROLE_A", "$ROLE_B";
CREATE FUNCTION es_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION es_show(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    PERFORM vq_log('INFO', 'seen', jsonb_build_object(
        'rows', (SELECT count(*) FROM public.es_big WHERE x > 10),
        'work_mem', current_setting('work_mem'),
        'lock_timeout', current_setting('lock_timeout'),
        'statement_timeout', current_setting('statement_timeout'),
        'read_only', current_setting('transaction_read_only'),
        'default_isolation', current_setting('default_transaction_isolation'),
        'isolation', current_setting('transaction_isolation'),
        'force_parallel_mode', current_setting('force_parallel_mode'),
        'session_replication_role', current_setting('session_replication_role'),
        'search_path', current_setting('search_path')));
END \$\$;
CREATE FUNCTION es_write(p jsonb) RETURNS void LANGUAGE sql AS \$\$ INSERT INTO public.es_written VALUES (p ->> 'tag') \$\$;
SELECT vq_create_queue('es', sleep_delay_ms => 100, max_concurrent_jobs => 50);
SELECT vq_register_handler(h, (h || '(jsonb)')::regprocedure, queue => 'es', max_attempts => 1)
  FROM unnest(ARRAY['es_noop', 'es_show', 'es_write']) AS h;
SQL

log "setup: the database's, the executors' role's and the roles' defaults"
qs >/dev/null <<SQL
ALTER DATABASE "$DB" SET default_transaction_isolation = 'serializable';
ALTER DATABASE "$DB" SET default_transaction_read_only = on;
ALTER DATABASE "$DB" SET default_transaction_deferrable = on;
ALTER DATABASE "$DB" SET statement_timeout = '1ms';
ALTER DATABASE "$DB" SET lock_timeout = '1ms';
ALTER DATABASE "$DB" SET idle_in_transaction_session_timeout = '1ms';
ALTER DATABASE "$DB" SET idle_session_timeout = '1ms';
ALTER DATABASE "$DB" SET force_parallel_mode = on;
ALTER DATABASE "$DB" SET parallel_setup_cost = 0;
ALTER DATABASE "$DB" SET parallel_tuple_cost = 0;
ALTER DATABASE "$DB" SET min_parallel_table_scan_size = 0;
ALTER DATABASE "$DB" SET min_parallel_index_scan_size = 0;
ALTER DATABASE "$DB" SET session_replication_role = replica;
ALTER DATABASE "$DB" SET row_security = off;
ALTER DATABASE "$DB" SET plan_cache_mode = force_custom_plan;
ALTER DATABASE "$DB" SET vacuum_cost_delay = 50;
ALTER DATABASE "$DB" SET work_mem = '6MB';
ALTER ROLE "$ME" IN DATABASE "$DB" SET exit_on_error = on;
ALTER ROLE "$ME" IN DATABASE "$DB" SET default_transaction_isolation = 'repeatable read';
ALTER ROLE "$ME" IN DATABASE "$DB" SET statement_timeout = '2ms';
ALTER ROLE "$ME" IN DATABASE "$DB" SET work_mem = '3MB';
ALTER ROLE "$ME" IN DATABASE "$DB" SET log_min_messages = debug2;
ALTER ROLE "$ROLE_A" SET work_mem = '5MB';
ALTER ROLE "$ROLE_A" IN DATABASE "$DB" SET default_transaction_read_only = off;
ALTER ROLE "$ROLE_A" IN DATABASE "$DB" SET lock_timeout = '7s';
SQL
# this script's own sessions (role $ME in $DB) undo it all
export PGOPTIONS="-c default_transaction_isolation=read\\ committed -c default_transaction_read_only=off
 -c default_transaction_deferrable=off -c statement_timeout=0 -c lock_timeout=0
 -c idle_in_transaction_session_timeout=0 -c idle_session_timeout=0 -c force_parallel_mode=off
 -c session_replication_role=origin -c row_security=on -c plan_cache_mode=auto -c exit_on_error=off
 -c log_min_messages=warning -c vacuum_cost_delay=0"
export PGOPTIONS="${PGOPTIONS//$'\n'/}"

log "restart the executors so that they connect with those defaults"
executors="SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
            WHERE backend_type = 'vq_job executor' AND datname = '$DB'"
wait_for "SELECT count(*) = 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '$DB'" 10 \
    "two executors"
old="$(q "$executors")"
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '$DB'" >/dev/null
wait_for "SELECT count(*) = 2 AND bool_and(pid <> ALL ('{$old}'::int[])) FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = '$DB'" 20 "two new executors"
before="$(q "$executors")"
log_start=$(($(stat -c %s "$SERVER_LOG") + 1))
vacuums="$(q "SELECT vacuum_count FROM pg_stat_all_tables WHERE relid = 'vq.job_active'::regclass")"

log "1. jobs: quick ones, handlers reading through parallel plans, writing ones"
qs >/dev/null <<SQL
SELECT vq_enqueue_many('es_noop', array_fill('{}'::jsonb, ARRAY[2000]), queue => 'es');
SET ROLE "$ROLE_A";
SELECT vq_enqueue('es_show', '{"tag": "a"}');
SELECT vq_enqueue('es_write', '{"tag": "a"}');
SET ROLE "$ROLE_B";
SELECT vq_enqueue('es_show', '{"tag": "b"}');
SELECT vq_enqueue('es_write', '{"tag": "b"}');
RESET ROLE;
SELECT vq_enqueue('es_show', '{"tag": "postgres"}');
SQL
wait_for "SELECT count(*) = 0 FROM vq.job WHERE state IN ('ENQUEUED', 'RUNNING')" 60 "every job to end"
assert_eq "COMPLETED:2004,DEAD_LETTER:1" \
    "$(q "SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM (SELECT state, count(*) AS n FROM vq.job GROUP BY state) s")" \
    "the jobs' states"
assert_eq "es_write" "$(q "SELECT handler FROM vq.job WHERE state = 'DEAD_LETTER'")" "the job that failed"
# (more may have started on demand, for the handlers met the first time)
assert_eq "2" "$(q "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                     AND datname = '$DB' AND pid = ANY ('{$before}'::int[])")" \
    "executors $before still running after the jobs (now: $(q "$executors"))"
assert_eq "a" "$(q "SELECT string_agg(tag, ',') FROM es_written")" "rows the writing handlers wrote"

# seen TAG: "field=value,..." of what es_show saw in the job tagged TAG
seen() {
    q "SELECT string_agg(key || '=' || value, ',' ORDER BY key) FROM vq.job_log l, vq.job j,
              jsonb_each_text(l.fields) WHERE j.execution_id = l.execution_id AND j.handler = 'es_show'
          AND j.payload ->> 'tag' = '$1' AND key <> 'search_path'"
}
log "2. what the handlers saw"
hsp="$(q "SELECT current_setting('vq.handler_search_path') || ', pg_temp'")"
assert_eq "default_isolation=serializable,force_parallel_mode=on,isolation=read committed,lock_timeout=7s,read_only=off,rows=19990,session_replication_role=replica,statement_timeout=1ms,work_mem=5MB" \
    "$(seen a)" "what $ROLE_A's handler saw"
assert_eq "default_isolation=serializable,force_parallel_mode=on,isolation=read committed,lock_timeout=1ms,read_only=on,rows=19990,session_replication_role=replica,statement_timeout=1ms,work_mem=6MB" \
    "$(seen b)" "what $ROLE_B's handler saw"
assert_eq "default_isolation=repeatable read,force_parallel_mode=on,isolation=read committed,lock_timeout=1ms,read_only=on,rows=19990,session_replication_role=replica,statement_timeout=2ms,work_mem=3MB" \
    "$(seen postgres)" "what $ME's handler saw"
assert_eq "$hsp" "$(q "SELECT DISTINCT fields ->> 'search_path' FROM vq.job_log WHERE fields ? 'search_path'")" \
    "the handlers' search_path"
err="$(q "SELECT last_error FROM vq.job WHERE state = 'DEAD_LETTER'")"
[[ "$err" == *"read-only transaction"* ]] || fail "$ROLE_B's writing job: expected the read-only error, found [$err]"
log "ok: roles' settings as a session of theirs would have them; $ROLE_B's write: $err"

log "3. executor 0's vacuum of vq.job_active, without parallel workers"
wait_for "SELECT vacuum_count > $vacuums FROM pg_stat_all_tables WHERE relid = 'vq.job_active'::regclass" 40 \
    "executor 0 to vacuum vq.job_active"
new_log="$(tail -c +"$log_start" "$SERVER_LOG")"
parallel="$(grep -E 'vq_job executor .*launched [0-9]+ parallel vacuum worker' <<<"$new_log" || true)"
[[ -z "$parallel" ]] || fail "an executor's vacuum launched parallel workers: $(head -1 <<<"$parallel")"
errors="$(grep -E 'vq_job (executor|launcher|saver) (ERROR|FATAL): |background worker "vq_job [a-z]+" \(PID [0-9]+\) exited with exit code [1-9]' \
          <<<"$new_log" || true)"
[[ -z "$errors" ]] || fail "vq_job workers logged errors: $(head -3 <<<"$errors")"

log "4. the executors' own statements, from their start, with no parallel worker"
# The postmaster logs every background worker it starts at DEBUG1, a parallel one as "parallel
# worker for PID <leader>". (The setting is checked from another database: this script's
# sessions here say warning, and the executors' role here debug2.)
in_postgres() { PGDATABASE=postgres PGOPTIONS="${PGOPTIONS/-c log_min_messages=warning/}" "$@"; }
in_postgres set_config log_min_messages debug1
SAMPLE_DIR="$(mktemp -d /tmp/vq_sc_es.XXXXXX)"
# (samples until the es_noop jobs it saw have ended, 60 s at most; prints samples|seconds|executor pids)
cat >"$SAMPLE_DIR/sample.sql" <<'SQL'
CREATE FUNCTION pg_temp.es_sample(max_secs float8) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    started timestamptz := clock_timestamp();
    samples int := 0;
    pids int[] := '{}';
    jobs_seen boolean := false;
    jobs_left boolean;
BEGIN
    LOOP
        PERFORM pg_stat_clear_snapshot();
        SELECT array_agg(DISTINCT p) INTO pids FROM (
            SELECT unnest(pids) AS p
            UNION SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                                                     AND datname = current_database()) x;
        samples := samples + 1;
        jobs_left := EXISTS (SELECT 1 FROM vq.job_active WHERE handler = 'es_noop');
        jobs_seen := jobs_seen OR jobs_left;
        EXIT WHEN (jobs_seen AND NOT jobs_left) OR clock_timestamp() > started + max_secs * interval '1 s';
        PERFORM pg_sleep(0.005);
    END LOOP;
    RETURN samples || '|' || round(extract(epoch FROM clock_timestamp() - started)::numeric, 1) || '|'
        || array_to_string(pids, ' ');
END $$;
SELECT pg_temp.es_sample(60);
SQL
log_start=$(($(stat -c %s "$SERVER_LOG") + 1))
PGAPPNAME=es_sampler psql -XAtq -v ON_ERROR_STOP=1 -f "$SAMPLE_DIR/sample.sql" >"$SAMPLE_DIR/sample.out" 2>&1 &
sampler=$!
wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'es_sampler' AND state = 'active')" 10 \
    "the sampling session to run"
old="$(q "$executors")"
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '$DB'" >/dev/null
q "SELECT vq_enqueue_many('es_noop', array_fill('{}'::jsonb, ARRAY[2000]), queue => 'es')" >/dev/null
wait_for "SELECT count(*) >= 2 AND bool_and(pid <> ALL ('{$old}'::int[])) FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = '$DB'" 20 "new executors"
wait "$sampler" || fail "the sampling session failed: $(cat "$SAMPLE_DIR/sample.out")"
IFS='|' read -r samples secs pids <"$SAMPLE_DIR/sample.out"
in_postgres reset_config log_min_messages
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_active WHERE handler = 'es_noop'")" "es_noop jobs left when the sampling ended"
log "executors seen in $samples samples over $secs s: $pids"
[[ -n "$pids" ]] || fail "no executor seen"
new_log="$(tail -c +"$log_start" "$SERVER_LOG")"
grep -q 'starting background worker process' <<<"$new_log" ||
    fail "the postmaster logged no background worker start at DEBUG1: the check below would see nothing"
leaders="$(grep -oE 'starting background worker process "parallel worker for PID [0-9]+"' <<<"$new_log" |
           grep -oE '[0-9]+"$' | tr -d '"' | sort -u || true)"
parallel=()
for p in $pids; do
    grep -qx "$p" <<<"$leaders" && parallel+=("$p")
done
((${#parallel[@]} == 0)) || fail "parallel workers started for executors ${parallel[*]} (own statements only: es_noop runs none)"
log "PASS"

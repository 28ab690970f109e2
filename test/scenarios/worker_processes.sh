#!/usr/bin/env bash
# worker_processes.sh: the process model of the background workers.
#   1. pg_stat_activity shows one 'vq_job launcher' and, for this database,
#      vq.executors_per_database executors named 'vq_job executor N' connected to it.
#   2. CREATE EXTENSION in a new database: its executors appear within 2 s and run a job;
#      DROP EXTENSION: they are gone within 2 s; CREATE EXTENSION again: back within 2 s.
#   3. Database-level statements are never blocked by vq_job (no WITH (FORCE) anywhere):
#      CREATE DATABASE copy TEMPLATE <served db> succeeds, the copy gets executors of its own
#      and the source's come back; ALTER DATABASE copy RENAME succeeds and executors come back
#      for the renamed database and run a job; DROP DATABASE while a 3 s handler runs there
#      returns within 10 s and leaves no executor for it.
#   4. vq.executors_per_database 2 -> 3 -> 1 -> default (ALTER SYSTEM + reload): the pool follows.
#   5. vq.databases naming another database: this database's executors exit and a due job
#      stays ENQUEUED; reset: they come back and run it.
#   6. SIGKILL of an executor (the postmaster restarts every backend): executors come back by
#      themselves; the job that was RUNNING in the killed executor is ABANDONED (error naming
#      the executor) and re-run, COMPLETED within 5 s of the server accepting connections again;
#      a job enqueued afterwards runs.
#   7. no executor exited with an error meanwhile (server log: "exited with exit code 1").
# "Come back promptly" bounds (RESUME_SECS) are checked softly: a miss is reported, the script
# goes on (waiting up to HARD_SECS) and exits non-zero at the end.
# Changed settings are reset and the extra databases dropped on exit.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

DB="$PGDATABASE"
NEWDB="${DB}_new"            # CREATE/DROP EXTENSION, then the template of COPYDB
COPYDB="${DB}_copy"          # CREATE DATABASE ... TEMPLATE NEWDB
RENAMED="${DB}_renamed"      # COPYDB after ALTER DATABASE ... RENAME
EXT_SECS=2                   # executors follow CREATE/DROP EXTENSION within this
RESUME_SECS=5                # executors come back after a database-level statement within this
HARD_SECS=20                 # ... and certainly within this (else the script stops)
DROPDB_SECS=10               # DROP DATABASE with a 3 s job running returns within this
RESCUE_SECS=5                # orphaned job re-run after a crash restart within this
TIMINGS=()

secs() { awk -v ms="$1" 'BEGIN { printf "%.2f", ms / 1000 }'; }
timing() { TIMINGS+=("$1: $(secs "$2") s"); log "timing: $1: $(secs "$2") s"; }

# a wait_for that times out also shows every executor
wait_report() { echo "executors now: $(all_executors)"; }
VQ_WAIT_REPORT=wait_report

# wait_timed SQL SECS WHAT: wait_for, setting WAITED_MS to the time it took.
wait_timed() {
    local start
    start="$(now_ms)"
    wait_for "$@"
    WAITED_MS=$(($(now_ms) - start))
}
# wait_bound SQL BOUND WHAT: like wait_timed, but taking longer than BOUND seconds
# (and at most HARD_SECS) is a soft failure (fail_later).
wait_bound() {
    local sql="$1" bound="$2" what="$3"
    wait_timed "$sql" "$HARD_SECS" "$what"
    if ((WAITED_MS > bound * 1000)); then
        fail_later "$what took $(secs "$WAITED_MS") s, expected at most ${bound} s"
    fi
}

# The executors that always run are those numbered below vq.executors_per_database; more may
# start on demand (numbered from there on) and exit after idling: the counts below ignore them.
ALWAYS="substring(split_part(application_name, ':', 1) from 'vq_job executor ([0-9]+)')::int
        < current_setting('vq.executors_per_database')::int"
# executors DBNAME: "N:names" of the executors that always run connected to DBNAME
executors() {
    q "SELECT count(*) || ':' || coalesce(string_agg(application_name, ',' ORDER BY application_name), '')
         FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '$1' AND $ALWAYS" -d postgres
}
# all_executors: "datname:application_name pid" of every executor
all_executors() {
    q "SELECT coalesce(string_agg(coalesce(datname, '?') || ':' || application_name || ' ' || pid, ', ' ORDER BY datname, application_name), 'none')
         FROM pg_stat_activity WHERE backend_type = 'vq_job executor'" -d postgres 2>&1 || true
}
# n_executors_is DBNAME N: SQL that is true when DBNAME has exactly N executors that always run
# (N = 0: no executor at all)
n_executors_is() {
    if (($2 == 0)); then
        echo "SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = '$1'"
    else
        echo "SELECT count(*) FILTER (WHERE $ALWAYS) = $2 FROM pg_stat_activity
               WHERE backend_type = 'vq_job executor' AND datname = '$1'"
    fi
}
# expected_names N: 'vq_job executor 0,...,vq_job executor N-1'
expected_names() {
    local i out=""
    for ((i = 0; i < $1; i++)); do out+="${out:+,}vq_job executor $i"; done
    echo "$1:$out"
}

cleanup() {
    set +e
    cleanup_configs
    for d in "$NEWDB" "$COPYDB" "$RENAMED"; do
        PGOPTIONS='-c client_min_messages=warning' psql -XAtq -d postgres \
            -c "DROP DATABASE IF EXISTS \"$d\" WITH (FORCE)" >/dev/null 2>&1
    done
}
trap cleanup EXIT
SERVER_LOG="${VQ_CLUSTER_DIR:?}/server.log"
LOG_START=$(($(stat -c %s "$SERVER_LOG" 2>/dev/null || echo 0) + 1))

# handlers DBNAME: a recording handler (wp_record) and a 3-second one (wp_sleep3) in DBNAME
handlers() {
    qs -d "$1" <<'SQL'
SET client_min_messages = warning;
CREATE TABLE IF NOT EXISTS wp_ran (tag text, attempt int, pid int, at timestamptz DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION wp_record(p jsonb) RETURNS void LANGUAGE sql AS
    $$ INSERT INTO public.wp_ran (tag, pid) VALUES (p ->> 'tag', pg_backend_pid()) $$;
CREATE OR REPLACE FUNCTION wp_sleep3(p jsonb) RETURNS void LANGUAGE sql AS $$ SELECT pg_sleep(3) $$;
SELECT vq_register_handler('wp_record', 'wp_record(jsonb)')
 WHERE NOT EXISTS (SELECT 1 FROM vq.handler WHERE name = 'wp_record');
SELECT vq_register_handler('wp_sleep3', 'wp_sleep3(jsonb)')
 WHERE NOT EXISTS (SELECT 1 FROM vq.handler WHERE name = 'wp_sleep3');
SQL
}
# run_job DBNAME TAG SECS WHAT: enqueue wp_record in DBNAME and wait until it completed
run_job() {
    local id
    id="$(q "SELECT vq_enqueue('wp_record', jsonb_build_object('tag', '$2'))" -d "$1")"
    PGDATABASE="$1" wait_timed "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" "$3" "$4"
}

# ---------------------------------------------------------------------------
log "1. the launcher and this database's executors in pg_stat_activity"
pool="$(q "SELECT current_setting('vq.executors_per_database')")"
[[ "$pool" == 2 ]] || fail "vq.executors_per_database should be at its default 2 here, found $pool"
launcher="$(q "SELECT count(*) || '|' || string_agg(application_name || '|' || coalesce(datname, '<none>'), ',')
                 FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'")"
[[ "$launcher" == "1|vq_job launcher|<none>" ]] ||
    fail "expected one launcher (application_name 'vq_job launcher', no database), found '$launcher'"
wait_for "$(n_executors_is "$DB" 2)" 5 "2 executors for $DB"
[[ "$(executors "$DB")" == "$(expected_names 2)" ]] ||
    fail "executors of $DB: expected '$(expected_names 2)', found '$(executors "$DB")'"
log "ok: launcher; executors of $DB: $(executors "$DB")"

# ---------------------------------------------------------------------------
log "2. CREATE / DROP / CREATE EXTENSION in a new database $NEWDB"
q "CREATE DATABASE \"$NEWDB\"" -d postgres
q "CREATE EXTENSION vq_job" -d "$NEWDB"
wait_bound "$(n_executors_is "$NEWDB" 2)" "$EXT_SECS" "executors of $NEWDB after CREATE EXTENSION"
timing "CREATE EXTENSION -> 2 executors" "$WAITED_MS"
[[ "$(executors "$NEWDB")" == "$(expected_names 2)" ]] ||
    fail "executors of $NEWDB: expected '$(expected_names 2)', found '$(executors "$NEWDB")'"
handlers "$NEWDB"
run_job "$NEWDB" first 5 "a job in $NEWDB to complete"
timing "job in the new database: enqueue -> COMPLETED" "$WAITED_MS"
q "DROP EXTENSION vq_job" -d "$NEWDB"
wait_bound "$(n_executors_is "$NEWDB" 0)" "$EXT_SECS" "executors of $NEWDB to exit after DROP EXTENSION"
timing "DROP EXTENSION -> no executor" "$WAITED_MS"
q "CREATE EXTENSION vq_job" -d "$NEWDB"
wait_bound "$(n_executors_is "$NEWDB" 2)" "$EXT_SECS" "executors of $NEWDB after CREATE EXTENSION again"
timing "CREATE EXTENSION again -> 2 executors" "$WAITED_MS"
log "ok: executors follow the extension"

# ---------------------------------------------------------------------------
log "3a. CREATE DATABASE $COPYDB TEMPLATE $NEWDB (whose executors are running)"
handlers "$NEWDB"
start="$(now_ms)"
q "CREATE DATABASE \"$COPYDB\" TEMPLATE \"$NEWDB\"" -d postgres
timing "CREATE DATABASE ... TEMPLATE (served source)" $(($(now_ms) - start))
# A new database is noticed at the launcher's next scan of pg_database (every 10 s at most).
wait_bound "$(n_executors_is "$COPYDB" 2)" 12 "executors of the copy $COPYDB"
timing "copy: CREATE DATABASE -> 2 executors" "$WAITED_MS"
wait_bound "$(n_executors_is "$NEWDB" 2)" "$RESUME_SECS" "executors of the template $NEWDB to come back after CREATE DATABASE ... TEMPLATE"
timing "template source: CREATE DATABASE -> its executors back" "$WAITED_MS"
run_job "$NEWDB" after_copy 5 "a job in the template $NEWDB after the copy"

log "3b. ALTER DATABASE $COPYDB RENAME TO $RENAMED"
start="$(now_ms)"
q "ALTER DATABASE \"$COPYDB\" RENAME TO \"$RENAMED\"" -d postgres
timing "ALTER DATABASE ... RENAME (served database)" $(($(now_ms) - start))
wait_bound "$(n_executors_is "$RENAMED" 2)" "$RESUME_SECS" "executors to come back for the renamed database $RENAMED"
timing "rename -> 2 executors for the new name" "$WAITED_MS"
[[ "$(executors "$COPYDB")" == "0:" ]] || fail "executors still listed under the old name $COPYDB: $(executors "$COPYDB")"
[[ "$(executors "$RENAMED")" == "$(expected_names 2)" ]] ||
    fail "executors of $RENAMED: expected '$(expected_names 2)', found '$(executors "$RENAMED")'"
run_job "$RENAMED" renamed 5 "a job in the renamed database $RENAMED"
log "ok: template copy and rename; executors serve $NEWDB and $RENAMED"

log "3c. DROP DATABASE $RENAMED while a 3 s handler runs there"
id="$(q "SELECT vq_enqueue('wp_sleep3')" -d "$RENAMED")"
PGDATABASE="$RENAMED" wait_for "SELECT state = 'RUNNING' FROM vq.job WHERE execution_id = '$id'" 5 \
    "the 3 s job to be RUNNING in $RENAMED"
oid="$(q "SELECT oid FROM pg_database WHERE datname = '$RENAMED'" -d postgres)"
start="$(now_ms)"
q "DROP DATABASE \"$RENAMED\"" -d postgres
took=$(($(now_ms) - start))
timing "DROP DATABASE with a 3 s job running" "$took"
((took <= DROPDB_SECS * 1000)) || fail "DROP DATABASE took $(secs "$took") s, expected at most $DROPDB_SECS s"
[[ "$(q "SELECT count(*) FROM pg_stat_activity WHERE datid = $oid" -d postgres)" == 0 ]] ||
    fail "processes still connected to the dropped database (oid $oid)"
# the launcher must not start anything for it again (it restarts executors after 1 s)
end=$(($(now_ms) + 2000))
while (($(now_ms) < end)); do
    n="$(q "SELECT count(*) FROM pg_stat_activity WHERE datid = $oid OR (backend_type = 'vq_job executor' AND datname IS NULL)" -d postgres)"
    [[ "$n" == 0 ]] || fail "an executor appeared for the dropped database (oid $oid)"
    sleep 0.1
done
log "ok: DROP DATABASE returned in $(secs "$took") s; nothing is left for it"

# ---------------------------------------------------------------------------
log "4. vq.executors_per_database 2 -> 3 -> 1 -> default"
set_config vq.executors_per_database 3
wait_bound "$(n_executors_is "$DB" 3)" 3 "3 executors for $DB"
timing "executors_per_database 2 -> 3" "$WAITED_MS"
[[ "$(executors "$DB")" == "$(expected_names 3)" ]] || fail "executors of $DB: expected '$(expected_names 3)', found '$(executors "$DB")'"
set_config vq.executors_per_database 1
wait_bound "$(n_executors_is "$DB" 1)" 3 "1 executor for $DB"
timing "executors_per_database 3 -> 1" "$WAITED_MS"
[[ "$(executors "$DB")" == "$(expected_names 1)" ]] || fail "executors of $DB: expected '$(expected_names 1)', found '$(executors "$DB")'"
reset_config vq.executors_per_database
wait_bound "$(n_executors_is "$DB" 2)" 3 "2 executors for $DB after the reset"
timing "executors_per_database 1 -> default 2" "$WAITED_MS"
log "ok: the pool follows the setting"

# ---------------------------------------------------------------------------
log "5. vq.databases naming another database"
handlers "$DB"
set_config vq.databases postgres
wait_bound "$(n_executors_is "$DB" 0)" 3 "the executors of $DB to exit when vq.databases = 'postgres'"
timing "vq.databases excludes this database -> executors gone" "$WAITED_MS"
id="$(q "SELECT vq_enqueue('wp_record', '{\"tag\": \"unserved\"}')")"
end=$(($(now_ms) + 2000))
while (($(now_ms) < end)); do
    st="$(q "SELECT state || '|' || (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database())
               FROM vq.job WHERE execution_id = '$id'")"
    [[ "$st" == "ENQUEUED|0" ]] || fail "while $DB is not served: expected job ENQUEUED and no executor, found '$st' (state|executors)"
    sleep 0.1
done
reset_config vq.databases
wait_bound "$(n_executors_is "$DB" 2)" 3 "the executors of $DB to come back after vq.databases is reset"
timing "vq.databases reset -> executors back" "$WAITED_MS"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 5 "the job left ENQUEUED to run"
log "ok: not served while excluded; served again after the reset"

# ---------------------------------------------------------------------------
log "6. SIGKILL of an executor running a job"
qs <<'SQL'
CREATE FUNCTION wp_long(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF c.attempt_number = 0 THEN
        PERFORM pg_sleep(60);
    END IF;
    INSERT INTO public.wp_ran (tag, attempt, pid) VALUES ('long', c.attempt_number, pg_backend_pid());
END $$;
SELECT vq_register_handler('wp_long', 'wp_long(jsonb, vq.job_context)');
SQL
id="$(q "SELECT vq_enqueue('wp_long')")"
wait_for "SELECT state = 'RUNNING' AND worker_pid IS NOT NULL FROM vq.job WHERE execution_id = '$id'" 5 \
    "the long job to be RUNNING (claimed visibly)"
victim="$(q "SELECT worker_pid FROM vq.job WHERE execution_id = '$id'")"
[[ "$(q "SELECT backend_type FROM pg_stat_activity WHERE pid = $victim")" == "vq_job executor" ]] ||
    fail "worker_pid $victim of the RUNNING job is not a live vq_job executor"
old_launcher="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'")"
kill -KILL "$victim"
# the postmaster terminates every backend (the old launcher too), then reinitialises
end=$(($(now_ms) + 30000))
while kill -0 "$old_launcher" 2>/dev/null; do
    (($(now_ms) < end)) || fail "the old launcher $old_launcher is still alive 30 s after the SIGKILL of executor $victim"
    sleep 0.02
done
until pg_isready -q -t 1; do
    (($(now_ms) < end)) || fail "the server does not accept connections 30 s after the SIGKILL"
    sleep 0.02
done
ready="$(now_ms)"
log "server accepts connections again"
wait_for "$(n_executors_is "$DB" 2)" 5 "executors of $DB to come back after the crash restart"
timing "crash restart: accepting connections -> 2 executors" $(($(now_ms) - ready))
new_launcher="$(q "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'")"
[[ -n "$new_launcher" && "$new_launcher" != "$old_launcher" ]] ||
    fail "expected a new launcher after the crash restart (old $old_launcher, now '$new_launcher')"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$id'" 15 "the orphaned job to be re-run"
took=$(($(now_ms) - ready))
timing "crash restart: accepting connections -> orphaned job COMPLETED" "$took"
((took <= RESCUE_SECS * 1000)) || fail "the orphaned job completed $(secs "$took") s after the restart, expected at most $RESCUE_SECS s"
tr="$(q "SELECT string_agg(kind || ':' || from_state || '/' || to_state || ':' || attempt_number, ',' ORDER BY id)
           FROM vq.job_transition WHERE execution_id = '$id'")"
[[ "$tr" =~ ^CLAIMED:ENQUEUED/RUNNING:0,ABANDONED:RUNNING/ENQUEUED:0,(CLAIMED:ENQUEUED/RUNNING:1,COMPLETED:RUNNING/COMPLETED:1|COMPLETED:ENQUEUED/COMPLETED:1)$ ]] ||
    fail "transitions of the orphaned job: expected CLAIMED, ABANDONED (attempt 0), then its completion (attempt 1); found $tr"
err="$(q "SELECT error FROM vq.job_transition WHERE execution_id = '$id' AND kind = 'ABANDONED'")"
[[ "$err" == *executor* && "$err" == *"$victim"* ]] ||
    fail "the ABANDONED transition should name the executor $victim, found '$err'"
[[ "$(q "SELECT string_agg(attempt::text, ',') FROM wp_ran WHERE tag = 'long'")" == 1 ]] ||
    fail "the long handler's effect: expected one row from attempt 1, found '$(q "SELECT string_agg(attempt::text, ',') FROM wp_ran WHERE tag = 'long'")'"
run_job "$DB" after_crash 5 "a job enqueued after the crash restart"
timing "job enqueued after the crash: enqueue -> COMPLETED" "$WAITED_MS"
log "ok: ABANDONED ('$err') and re-run; new jobs run"

# ---------------------------------------------------------------------------
log "7. no executor exited with an error during the scenario"
new_log="$(tail -c +"$LOG_START" "$SERVER_LOG" 2>/dev/null || true)"
pids="$(grep -oE 'background worker "vq_job (executor|launcher)" \(PID [0-9]+\) exited with exit code [1-9]' <<<"$new_log" |
        sed -E 's/.*PID ([0-9]+).*/\1/' || true)"
if [[ -n "$pids" ]]; then
    n="$(wc -l <<<"$pids")"
    # their errors (log lines carry "[PID]"), most frequent first
    errors="$(grep -E "\[($(paste -sd '|' <<<"$pids"))\] (ERROR|FATAL): " <<<"$new_log" |
              sed -E 's/^.*(ERROR|FATAL): +//' | sort | uniq -c | sort -rn | head -3 | sed -E 's/^ +//' | paste -sd ';' || true)"
    fail_later "vq_job workers exited with an error $n time(s) during the scenario; their errors (count, message): ${errors:-none logged}"
else
    log "ok: no worker exited with an error"
fi

echo "timings:"
printf '    %s\n' "${TIMINGS[@]}"
fail_summary
log "PASS"

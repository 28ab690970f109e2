#!/usr/bin/env bash
# worker_slots.sh: too few background worker slots starve no database and flood no log.
# In a cluster of its own, with vq.executors_per_database = 2 and max_worker_processes just big
# enough for the static background workers and one executor per database with vq_job (three of
# them; a fourth database has no vq_job), after a restart:
#   1. each of the three databases gets one executor (none gets two while another has none),
#      and a job enqueued in each completes;
#   2. over a measured interval after that (65 s), the server log has at most one vq_job WARNING
#      per cause and started minute (a cause: no background worker slot for an executor, and
#      for a saver); the second "no slot for an executor" WARNING (a minute after the first)
#      says how many failed starts it stands for; none names the database without vq_job,
#      whose probes find no slot either.
# Exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
: "${VQ_REPO_ROOT:=$(cd "$(dirname "$0")/../.." && pwd -P)}"
# shellcheck source=../../scripts/lib.sh
. "$VQ_REPO_ROOT/scripts/lib.sh"

SECOND_DIR="$(mktemp -d /tmp/vq_job.slots.XXXXXX)"
cleanup() {
    set +e
    vq_cluster_destroy "$SECOND_DIR" >/dev/null 2>&1
    rm -rf "$SECOND_DIR" "$SECOND_DIR.start.log"
}
trap cleanup EXIT
DBS=(ws_one ws_two ws_three)
PLAIN=ws_plain

log "a cluster of its own, vq.executors_per_database = 2"
port="$(vq_free_port)"
vq_cluster_start "$SECOND_DIR" "$port" "fsync = off" "vq.executors_per_database = 2" \
    "log_line_prefix = '%m [%p] '" >"$SECOND_DIR.start.log" 2>&1 ||
    { cat "$SECOND_DIR.start.log" >&2; fail "could not start the second cluster"; }
# (vq_cluster_start exported the second cluster's PGHOST, PGPORT, VQ_CLUSTER_*: every helper uses it)
export PGDATABASE=postgres
SERVER_LOG="$VQ_CLUSTER_DIR/server.log"
for d in "${DBS[@]}"; do
    createdb "$d"
    qs -d "$d" >/dev/null <<'SQL'
CREATE EXTENSION vq_job;
CREATE TABLE ws_ran (pid int);
CREATE FUNCTION ws_record(p jsonb) RETURNS void LANGUAGE sql AS $$ INSERT INTO public.ws_ran VALUES (pg_backend_pid()) $$;
SELECT vq_register_handler('ws_record', 'ws_record(jsonb)');
SQL
done
createdb "$PLAIN"
# the background workers that always run (vq_job's launcher, the logical replication launcher)
static="$(q "SELECT count(*) FROM pg_stat_activity
              WHERE backend_type IN ('vq_job launcher', 'logical replication launcher')")"
slots=$((static + ${#DBS[@]}))
log "max_worker_processes = $slots: $static static background workers and one executor for each of ${#DBS[@]} databases"
q "ALTER SYSTEM SET max_worker_processes = $slots" >/dev/null
vq_pg_ctl -l "$SERVER_LOG" -w -t 60 -m fast restart >/dev/null || fail "the restart failed"
wait_ready 30
assert_eq "$slots" "$(q "SHOW max_worker_processes")" "max_worker_processes after the restart"
log_start=$(($(stat -c %s "$SERVER_LOG") + 1))

log "1. every database with vq_job gets its executor, and its job completes"
ids=()
for d in "${DBS[@]}"; do
    ids+=("$(q "SELECT vq_enqueue('ws_record', '{}')" -d "$d")")
done
for i in "${!DBS[@]}"; do
    PGDATABASE="${DBS[$i]}" wait_state "${ids[$i]}" COMPLETED 60
done
per_db="$(q "SELECT string_agg(datname || ':' || n, ',' ORDER BY datname) FROM (
               SELECT datname, count(*) AS n FROM pg_stat_activity
                WHERE backend_type = 'vq_job executor' GROUP BY datname) e")"
assert_eq "ws_one:1,ws_three:1,ws_two:1" "$per_db" "executors per database"
log "ok: $per_db"

log "2. the warnings over a measured interval"
t0="$(now_ms)"
wait_for "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint >= $((t0 + 65000))" 80 "the end of the interval"
elapsed_s=$((($(now_ms) - t0) / 1000))
# everything since the restart: the start-up's and the interval's
warnings="$(tail -c +"$log_start" "$SERVER_LOG" | grep -E '\] WARNING: ' || true)"
n="$(grep -c . <<<"$warnings" || true)"
minutes=$(((elapsed_s + 59) / 60 + 1))   # the interval's started minutes, and the start-up's
causes=2
bound=$((causes * minutes))
log "$n WARNING line(s) in about $elapsed_s s after the start-up (bound $bound: $causes causes x $minutes minutes)"
[[ -z "$warnings" ]] || sed 's/^/    /' <<<"$warnings" | cut -c1-220 | head -5
((n <= bound)) || fail "$n WARNING lines since the restart, expected at most $bound; first: $(head -3 <<<"$warnings")"
# the second "no slot" WARNING stands for the failed starts since the first (one a second)
details="$(tail -c +"$log_start" "$SERVER_LOG" | grep -A1 -E '\] WARNING: +vq_job: could not start executor' |
           grep -oE 'DETAIL: +[0-9]+ more executor start' || true)"
[[ -n "$details" ]] || fail "no WARNING about a missing slot said how many failed starts it stood for: $warnings"
log "ok: $(head -1 <<<"$details")"
if grep -q "$PLAIN" <<<"$warnings"; then
    fail "a WARNING names $PLAIN, which has no vq_job: $(grep "$PLAIN" <<<"$warnings" | head -1)"
fi
log "PASS"

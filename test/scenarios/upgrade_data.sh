#!/usr/bin/env bash
# upgrade_data.sh: a DBA's upgrade from the last frozen version (0.1.0) to the installed one, with
# data in the database and the old library running first: nothing is lost and everything runs.
#   1. the release tree of the old version (the freeze commit that committed its install script,
#      or its parent when that commit also moved the Makefile on) is built and installed into a
#      private copy of the server's PostgreSQL tree, with the frozen install script; a cluster of
#      this scenario's own (own port, socket and data directory) runs that old library, and
#      CREATE EXTENSION vq_job creates the old version;
#   2. filled with the old library running: queues (vq_create_queue, vq_configure), a paused
#      queue, contract overrides, function and NOTIFY handlers, consumer, producer and queue
#      grants, a role that is no superuser enqueuing and publishing, an interceptor and a
#      transition listener; jobs COMPLETED (with job logs and a job_id window), DEAD_LETTER
#      (max_attempts 1 and 2), CANCELLED, ENQUEUED due (behind a slow job in a queue of capacity
#      1, and in the paused queue), ENQUEUED delayed (due about 20 s later, after the update),
#      RUNNING (a slow handler), NOTIFY jobs announced and taken with vq_pull (no reply), announced
#      and not taken, and delayed; outbox rows PUBLISHED (a job, a NOTIFY), FAILED (PERMANENT),
#      PENDING retrying (RETRYABLE) and PENDING delayed (a job, a destination type);
#   3. pg_ctl stop -m fast; the same data directory started with the new binaries ($VQ_PG_BIN):
#      the executors of the database log the WARNING naming both versions, and no job or outbox
#      row moves for 2 s after it (a due job stays ENQUEUED); a second database created at the
#      new version has executors running jobs meanwhile, and goes on running a stream of jobs
#      while ALTER EXTENSION vq_job UPDATE runs in the first;
#   4. the update: every row of every table of the extension (jobs, history, logs, windows,
#      outbox, configuration, grants, callbacks; compared on the old version's columns) is there
#      unchanged in the updating transaction, and no sequence went back; the only rows it may
#      change are those of the NOTIFY jobs in flight (a version may withdraw the announced ones, or
#      lease the taken ones), with their new transitions, and what it did to them is printed;
#      after it:
#      - the due and interrupted jobs complete; the delayed ones complete, none before its
#        run_at; the paused queue is still paused (its jobs wait) until resumed, then they run;
#      - the pending outbox rows are delivered (none before its scheduled_at), the others stay;
#      - the dead letters are redriven (vq_redrive) and complete;
#      - the NOTIFY jobs are completed by a consumer with vq_complete (the reply in flight of the
#        job taken before the upgrade) and vq_pull + vq_complete, each once;
#      - new enqueues work; the override and the windows still hold; the role that enqueues can
#        still enqueue its handlers (EXECUTE, producer and queue grants) and not another's; a
#        role with no consumer grant reads no payload; the interceptor and the listener are
#        called for transitions after the update;
#      - in the end every job that existed is COMPLETED but the CANCELLED one, each function
#        job's effect exactly once; a table of states before and after is printed.
# Skipped (with a message) when the repository has no git history to build the old version from.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "${VQ_REPO_ROOT:?}/scripts/lib.sh"

ROOT="$VQ_REPO_ROOT"
OLD_VERSION="${VQ_UPGRADE_FROM:-0.1.0}"
FROZEN="sql/vq_job--$OLD_VERSION.sql"
DELAY_S=20           # the delayed jobs are due this long after the fill ends (after the update)

T=""                 # private PostgreSQL tree, source tree, cluster
DATA="" SOCK="" LOG_OLD="" LOG_NEW="" LOAD_PID=""
cleanup() {
    local rc=$?
    set +e
    if [[ -n "$LOAD_PID" ]]; then
        kill "$LOAD_PID" 2>/dev/null
        wait "$LOAD_PID" 2>/dev/null
    fi
    if [[ -n "$DATA" && -f "$DATA/postmaster.pid" ]]; then
        vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$DATA" -m immediate -w -t 30 stop >/dev/null 2>&1
    fi
    if ((rc != 0)); then
        for f in "$LOG_OLD" "$LOG_NEW"; do
            [[ -n "$f" && -s "$f" ]] && { echo "----- last lines of $f -----" >&2; tail -n 30 "$f" >&2; }
        done
    fi
    [[ -n "$T" && "$T" == /tmp/vq_upgrade_data.* ]] && rm -rf "$T"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# wait_log FILE REGEX SECS WHAT: poll FILE until a line matches REGEX (grep -E).
wait_log() {
    local deadline=$(($(date +%s%N) + $3 * 1000000000))
    until grep -qE -- "$2" "$1" 2>/dev/null; do
        (($(date +%s%N) < deadline)) || fail "timed out after $3 s waiting for $4 (no line matching /$2/ in $1)"
        sleep "$VQ_WAIT_POLL_SECS"
    done
}
# err_as ROLE SQLSTATE SQL: run SQL as ROLE, which must fail with SQLSTATE; print the error.
err_as() {
    local out
    if out="$(psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "SET ROLE \"$1\"" -c "$3" 2>&1)"; then
        fail "as $1, expected an error from: $3 (it returned [$out])"
    fi
    out="$(printf '%s\n' "$out" | grep -m 1 '^ERROR' || true)"
    [[ "$out" == "ERROR:  $2: "* ]] || fail "as $1, expected SQLSTATE $2 from: $3 (got [$out])"
    printf '%s\n' "$out"
}
# id_of TAG: the execution_id of the job whose payload has that tag.
id_of() { q "SELECT execution_id FROM vq.job WHERE payload->>'tag' = '$1'"; }
ms_since() { echo $(($(now_ms) - $1)); }

# ---- 1. the old version, built into a private PostgreSQL tree ------------------------------
if ! command -v git >/dev/null || ! git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
    log "SKIP: $ROOT is not a git checkout: no history to build vq_job $OLD_VERSION from"
    exit 0
fi
FREEZE="$(git -C "$ROOT" log --format=%H -1 -- "$FROZEN")"
[[ -n "$FREEZE" ]] || fail "no commit has $FROZEN: is the history complete (not a shallow clone)?"
RELEASE=""
for c in "$FREEZE" "$FREEZE^"; do
    if git -C "$ROOT" show "$c:Makefile" 2>/dev/null | grep -qE "^EXTVERSION *= *${OLD_VERSION//./\\.} *\$"; then
        RELEASE="$(git -C "$ROOT" rev-parse "$c")"
        break
    fi
done
[[ -n "$RELEASE" ]] || fail "neither $FREEZE (which committed $FROZEN) nor its parent builds version $OLD_VERSION (is the history complete?)"
log "1. vq_job $OLD_VERSION: frozen by ${FREEZE:0:10}, built from ${RELEASE:0:10} ($(git -C "$ROOT" log -1 --format=%s "$RELEASE"))"

PG_CONFIG_NEW="$VQ_PG_BIN/pg_config"
MAJOR="$("$PG_CONFIG_NEW" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')"
BINDIR="$("$PG_CONFIG_NEW" --bindir)"
LAYOUT="/usr/lib/postgresql/$MAJOR/bin"
[[ "$BINDIR" == *"$LAYOUT" ]] || fail "expected a Debian layout (bin directory */usr/lib/postgresql/$MAJOR/bin), got $BINDIR"
PGROOT="${BINDIR%"$LAYOUT"}"
T="$(mktemp -d /tmp/vq_upgrade_data.XXXXXX)"
chmod 755 "$T"
t0="$(now_ms)"
mkdir -p "$T/usr/lib/postgresql" "$T/usr/share/postgresql" "$T/usr/include" "$T/src"
cp -a "$PGROOT/usr/lib/postgresql/$MAJOR" "$T/usr/lib/postgresql/"
cp -a "$PGROOT/usr/share/postgresql/$MAJOR" "$T/usr/share/postgresql/"
ln -s "$(readlink -f "$PGROOT/usr/include/postgresql")" "$T/usr/include/postgresql"
OLD_BIN="$T/usr/lib/postgresql/$MAJOR/bin"
OLD_PG_CONFIG="$OLD_BIN/pg_config"
OLD_EXTDIR="$("$OLD_PG_CONFIG" --sharedir)/extension"
OLD_LIBDIR="$("$OLD_PG_CONFIG" --pkglibdir)"
[[ "$OLD_EXTDIR" == "$T"/* && "$OLD_LIBDIR" == "$T"/* ]] ||
    fail "the copied pg_config does not report paths in $T ($OLD_EXTDIR, $OLD_LIBDIR)"
# Only the old version in the copy: nothing of the installed vq_job.
rm -rf "$OLD_EXTDIR"/vq_job.control "$OLD_EXTDIR"/vq_job--*.sql "$OLD_LIBDIR/vq_job.so" \
       "$OLD_LIBDIR/bitcode/vq_job" "$OLD_LIBDIR/bitcode/vq_job.index.bc" "$OLD_BIN/vq_consumer"
git -C "$ROOT" archive "$RELEASE" | tar -x -C "$T/src"
if ! { make -C "$T/src" -s -j"$(nproc 2>/dev/null || echo 2)" PG_CONFIG="$OLD_PG_CONFIG" &&
       make -C "$T/src" -s PG_CONFIG="$OLD_PG_CONFIG" install; } >"$T/build.log" 2>&1; then
    tail -n 30 "$T/build.log" >&2
    fail "building vq_job $OLD_VERSION (${RELEASE:0:10}) failed"
fi
git -C "$ROOT" show "$FREEZE:$FROZEN" >"$T/frozen.sql"
if cmp -s "$T/frozen.sql" "$OLD_EXTDIR/vq_job--$OLD_VERSION.sql"; then
    same="the same as the release tree builds"
else
    same="NOT the same as the release tree builds: the frozen one is used"
fi
cp "$T/frozen.sql" "$OLD_EXTDIR/vq_job--$OLD_VERSION.sql"
assert_eq "$OLD_VERSION" "$(sed -nE "s/^default_version *= *'([^']*)'.*/\1/p" "$OLD_EXTDIR/vq_job.control")" \
    "default_version of the old tree's control file"
log "built and installed in $(ms_since "$t0") ms into $T (install script: $FROZEN, $same)"

# The cluster: initdb and start with the old binaries, as the postgres user.
mkdir -p "$T/pg/data" "$T/pg/sock"
chown -R postgres:postgres "$T/pg"
chmod 700 "$T/pg/data"
DATA="$T/pg/data" SOCK="$T/pg/sock" LOG_OLD="$T/pg/old.log" LOG_NEW="$T/pg/new.log"
PORT="$(vq_free_port)"
vq_as_pg "$OLD_BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$T/initdb.log" 2>&1 ||
    { cat "$T/initdb.log" >&2; fail "initdb failed"; }
cat >>"$DATA/postgresql.conf" <<EOF
shared_preload_libraries = 'vq_job'
port = $PORT
listen_addresses = ''
unix_socket_directories = '$SOCK'
max_connections = 50
max_worker_processes = 16
fsync = off
log_min_messages = warning
vq.shutdown_grace_ms = 500
vq.execution_timeout_ms = 60000
EOF
start_server() { # BIN LOG
    vq_as_pg "$1/pg_ctl" -D "$DATA" -l "$2" -w -t 60 start >/dev/null ||
        { tail -n 30 "$2" >&2; fail "the server did not start with $1"; }
}
start_server "$OLD_BIN" "$LOG_OLD"
export PGHOST="$SOCK" PGPORT="$PORT" PGUSER=postgres PGDATABASE=upg
createdb -T template0 upg
q "CREATE EXTENSION vq_job" >/dev/null
assert_eq "$OLD_VERSION" "$(q "SELECT extversion FROM pg_extension WHERE extname = 'vq_job'")" "version created"
log "cluster on port $PORT with the old library: database upg at $OLD_VERSION"

EXECUTORS="SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
             AND backend_type = 'vq_job executor'"
wait_for "SELECT ($EXECUTORS) > 0" 20 "executors of the old library in upg"

# ---- 2. fill it with the old library running --------------------------------------------------
log "2. filling: roles, queues, handlers, grants, callbacks"
qs >/dev/null <<'SQL'
CREATE ROLE upg_app LOGIN;      -- enqueues and publishes (no superuser)
CREATE ROLE upg_worker LOGIN;   -- consumes n_ext (consumer grant)
CREATE ROLE upg_nobody LOGIN;   -- no grant at all
-- what the handlers did: one row per run that committed
CREATE TABLE public.upg_runs (execution_id uuid, tag text, attempt int, ext_version text,
                              ran_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE public.upg_ctl (name text PRIMARY KEY, val boolean NOT NULL);
INSERT INTO public.upg_ctl VALUES ('fail', true), ('slow_gate', false), ('dest_retry', true);
-- what the interceptor and the listener saw
CREATE TABLE public.upg_cb (kind text, execution_id uuid, attempt int, detail text, ext_version text,
                            at timestamptz NOT NULL DEFAULT clock_timestamp());
GRANT SELECT, INSERT ON public.upg_runs TO PUBLIC;
GRANT SELECT ON public.upg_ctl TO PUBLIC;
CREATE FUNCTION public.upg_version() RETURNS text LANGUAGE sql STABLE
    AS $$ SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'vq_job' $$;

CREATE FUNCTION public.h_ok(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'h_ok ran', jsonb_build_object('tag', payload->>'tag'));
    INSERT INTO public.upg_runs (execution_id, tag, attempt, ext_version)
    VALUES (ctx.execution_id, payload->>'tag', ctx.attempt_number, public.upg_version());
END $$;
CREATE FUNCTION public.h_fail(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('WARN', 'h_fail called', jsonb_build_object('attempt', ctx.attempt_number));
    IF (SELECT val FROM public.upg_ctl WHERE name = 'fail') THEN
        RAISE EXCEPTION 'h_fail: failing on purpose (%)', payload->>'tag';
    END IF;
    INSERT INTO public.upg_runs (execution_id, tag, attempt, ext_version)
    VALUES (ctx.execution_id, payload->>'tag', ctx.attempt_number, public.upg_version());
END $$;
-- waits until the gate opens (a new snapshot per statement: it sees the gate change)
CREATE FUNCTION public.h_slow(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'h_slow waiting for its gate');
    WHILE NOT (SELECT val FROM public.upg_ctl WHERE name = 'slow_gate') LOOP
        PERFORM pg_sleep(0.05);
    END LOOP;
    INSERT INTO public.upg_runs (execution_id, tag, attempt, ext_version)
    VALUES (ctx.execution_id, payload->>'tag', ctx.attempt_number, public.upg_version());
END $$;
CREATE FUNCTION public.h_secret(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.upg_runs (execution_id, tag) VALUES (ctx.execution_id, 'secret') $$;
-- a destination type: delivered as the publishing role; 'permanent' fails for good,
-- 'retry' is retried while upg_ctl.dest_retry is on
CREATE FUNCTION public.upg_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE plpgsql AS $$
BEGIN
    IF destination = 'permanent' THEN
        RETURN ROW('PERMANENT', 'refused on purpose')::vq.publish_result;
    ELSIF destination = 'retry' AND (SELECT val FROM public.upg_ctl WHERE name = 'dest_retry') THEN
        RETURN ROW('RETRYABLE', 'not yet')::vq.publish_result;
    END IF;
    INSERT INTO public.upg_runs (tag, ext_version) VALUES (payload->>'tag', public.upg_version());
    RETURN ROW('SUCCESS', NULL)::vq.publish_result;
END $$;
REVOKE EXECUTE ON FUNCTION public.h_ok(jsonb, vq.job_context), public.h_fail(jsonb, vq.job_context),
    public.h_slow(jsonb, vq.job_context), public.h_secret(jsonb, vq.job_context) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.h_ok(jsonb, vq.job_context) TO upg_app;

CREATE FUNCTION public.upg_on_dispatch(ctx vq.job_context) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.upg_cb (kind, execution_id, attempt, detail, ext_version)
    VALUES ('dispatch', ctx.execution_id, ctx.attempt_number, ctx.handler, public.upg_version()) $$;
CREATE FUNCTION public.upg_on_complete(ctx vq.job_context, outcome text, error text) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.upg_cb (kind, execution_id, attempt, detail, ext_version)
    VALUES ('complete', ctx.execution_id, ctx.attempt_number, outcome, public.upg_version()) $$;
CREATE FUNCTION public.upg_listener(t vq.job_transition, j vq.job) RETURNS void LANGUAGE sql AS $$
    INSERT INTO public.upg_cb (kind, execution_id, attempt, detail, ext_version)
    VALUES ('transition', t.execution_id, t.attempt_number,
            t.kind || ':' || t.from_state || '>' || t.to_state, public.upg_version()) $$;

SELECT vq_create_queue('upq', sleep_delay_ms => 200, backoff_strategy => 'FIXED', backoff_base_delay_ms => 200);
SELECT vq_create_queue('upq_slow', sleep_delay_ms => 200, max_concurrent_jobs => 1);
SELECT vq_create_queue('upq_ext', sleep_delay_ms => 200);
SELECT vq_create_queue('upq_paused', sleep_delay_ms => 200);
SELECT vq_pause_queue('upq_paused');
SELECT vq_configure('{"queues": {"upq_cfg": {"sleepDelayMs": 300, "maxConcurrentJobs": 3, "backoffStrategy": "EXPONENTIAL"},
                                 "upq_hi": {"sleepDelayMs": 200, "maxConcurrentJobs": 2}},
                      "contracts": {"h_over": {"queue": "upq_cfg", "priority": 7, "maxAttempts": 4}}}');
SELECT vq_register_handler('h_ok', 'public.h_ok(jsonb, vq.job_context)', queue => 'upq');
SELECT vq_register_handler('h_over', 'public.h_ok(jsonb, vq.job_context)');
SELECT vq_register_handler('h_behind', 'public.h_ok(jsonb, vq.job_context)', queue => 'upq_slow');
SELECT vq_register_handler('h_paused', 'public.h_ok(jsonb, vq.job_context)', queue => 'upq_paused');
SELECT vq_register_handler('h_fail', 'public.h_fail(jsonb, vq.job_context)', queue => 'upq', max_attempts => 2);
SELECT vq_register_handler('h_slow', 'public.h_slow(jsonb, vq.job_context)', queue => 'upq_slow', max_attempts => 3);
SELECT vq_register_handler('h_secret', 'public.h_secret(jsonb, vq.job_context)', queue => 'upq');
SELECT vq_set_contract_override('h_secret', priority => 3, max_attempts => 5);
SELECT vq_register_notify_handler('n_ext', 'upg_ch', queue => 'upq_ext');
SELECT vq_grant_consumer('n_ext', 'upg_worker');
SELECT vq_grant_producer('n_ext', 'upg_app');
SELECT vq_grant_queue('upq_hi', 'upg_app');
SELECT vq_register_destination('upg.dest', 'public.upg_dest(text, jsonb, jsonb, jsonb)');
SELECT vq_register_interceptor('upg_icpt', 'public.upg_on_dispatch(vq.job_context)',
                               'public.upg_on_complete(vq.job_context, text, text)');
SELECT vq_register_transition_listener('upg_listen', 'public.upg_listener(vq.job_transition, vq.job)');
SQL

log "jobs COMPLETED (logs, a window, an override, one of upg_app), PUBLISHED outbox rows"
q "SELECT vq_context_set('upg', '{\"tenant\": \"t1\"}');
   SELECT vq_enqueue('h_ok', '{\"tag\": \"done-1\"}');
   SELECT vq_enqueue('h_ok', '{\"tag\": \"done-win\"}', job_id => 'win-done', unique_for => '1 hour');
   SELECT vq_enqueue('h_over', '{\"tag\": \"done-over\"}');
   SELECT vq_outbox_publish('h_ok', '{\"tag\": \"ob-published\"}');
   SELECT vq_outbox_publish_to('NOTIFY', 'upg_outbox_ch', '{\"tag\": \"ob-notify\"}');
   SELECT vq_outbox_publish_to('upg.dest', 'permanent', '{\"tag\": \"ob-failed\"}')" >/dev/null
q_as upg_app "SELECT vq_enqueue('h_ok', '{\"tag\": \"done-app\"}')" >/dev/null
wait_for "SELECT count(*) = 5 FROM vq.job WHERE state = 'COMPLETED'
            AND payload->>'tag' IN ('done-1', 'done-win', 'done-over', 'ob-published', 'done-app')" 30 \
    "the five first jobs COMPLETED"
wait_for "SELECT count(*) FILTER (WHERE status = 'PUBLISHED') = 2 AND count(*) FILTER (WHERE status = 'FAILED') = 1
            FROM vq.outbox" 30 "two outbox rows PUBLISHED, one FAILED"
assert_eq "upq_cfg|7|4" "$(q "SELECT queue || '|' || priority || '|' || max_attempts FROM vq.job
                               WHERE payload->>'tag' = 'done-over'")" "h_over's job under its contract override"

log "DEAD_LETTER (max_attempts 1 and 2), CANCELLED"
q "SELECT vq_enqueue('h_fail', '{\"tag\": \"dead-1\"}', max_attempts => 1);
   SELECT vq_enqueue('h_fail', '{\"tag\": \"dead-2\"}')" >/dev/null
id="$(q "SELECT vq_enqueue('h_ok', '{\"tag\": \"cancelled\"}', run_at => now() + interval '1 hour')")"
assert_eq CANCELLED "$(q "SELECT vq_cancel('$id')")" "vq_cancel of a future job"
wait_for "SELECT count(*) = 2 FROM vq.job WHERE state = 'DEAD_LETTER'" 30 "two dead letters"
assert_eq "dead-1:0,dead-2:1" "$(q "SELECT string_agg(payload->>'tag' || ':' || attempt_number, ',' ORDER BY payload->>'tag')
                                      FROM vq.job WHERE state = 'DEAD_LETTER'")" "the dead letters' attempts"

log "ENQUEUED in the paused queue; NOTIFY jobs announced and taken (vq_pull, no reply), announced only"
q "SELECT vq_enqueue('h_paused', '{\"tag\": \"paused-1\"}'); SELECT vq_enqueue('h_paused', '{\"tag\": \"paused-2\"}')" >/dev/null
q_as upg_app "SELECT vq_enqueue('n_ext', '{\"tag\": \"ext-taken\"}')" >/dev/null
TAKEN="$(id_of ext-taken)"
wait_state "$TAKEN" RUNNING 30
pulled="$(q_as upg_worker "SELECT execution_id || '|' || attempt FROM vq_pull('n_ext', 1)")"
assert_eq "$TAKEN|0" "$pulled" "what upg_worker's vq_pull took"
TAKEN_ATTEMPT="${pulled#*|}"
q "SELECT vq_enqueue('n_ext', '{\"tag\": \"ext-announced\"}')" >/dev/null
ANNOUNCED="$(id_of ext-announced)"
wait_state "$ANNOUNCED" RUNNING 30
assert_sql "SELECT consumer_claimed_at IS NULL FROM vq.job WHERE execution_id = '$ANNOUNCED'" "the announced job untaken"
assert_sql "SELECT consumer_claimed_at IS NOT NULL FROM vq.job WHERE execution_id = '$TAKEN'" "the pulled job taken"

log "RUNNING (a slow handler) with two due jobs ENQUEUED behind it (queue capacity 1)"
q "SELECT vq_enqueue('h_slow', '{\"tag\": \"slow\"}')" >/dev/null
SLOW="$(id_of slow)"
wait_state "$SLOW" RUNNING 30
q "SELECT vq_enqueue('h_behind', '{\"tag\": \"behind-1\"}'); SELECT vq_enqueue('h_behind', '{\"tag\": \"behind-2\"}')" >/dev/null

log "a PENDING outbox row being retried (RETRYABLE)"
q "SELECT vq_outbox_publish_to('upg.dest', 'retry', '{\"tag\": \"ob-retry\"}')" >/dev/null
wait_for "SELECT attempts >= 1 AND status = 'PENDING' FROM vq.outbox WHERE payload->>'tag' = 'ob-retry'" 30 \
    "the retried outbox row to have failed once"

log "delayed jobs and outbox rows, due in $DELAY_S s (after the update)"
DUE="$(q "SELECT now() + interval '$DELAY_S seconds'")"
q "SELECT vq_context_set('upg', '{\"tenant\": \"t2\"}');
   SELECT vq_enqueue('h_ok', '{\"tag\": \"delayed-1\"}', run_at => '$DUE');
   SELECT vq_enqueue('h_ok', '{\"tag\": \"delayed-win\"}', run_at => '$DUE', job_id => 'win-delayed', unique_for => '1 hour');
   SELECT vq_outbox_publish('h_ok', '{\"tag\": \"ob-delayed\"}', scheduled_at => '$DUE');
   SELECT vq_outbox_publish_to('upg.dest', 'ok', '{\"tag\": \"ob-delayed-dest\"}', scheduled_at => '$DUE')" >/dev/null
q_as upg_app "SELECT vq_enqueue('h_ok', '{\"tag\": \"delayed-app\"}', run_at => '$DUE', queue => 'upq_hi', priority => 9);
              SELECT vq_enqueue('n_ext', '{\"tag\": \"ext-delayed\"}', run_at => '$DUE');
              SELECT vq_outbox_publish('h_ok', '{\"tag\": \"ob-app-delayed\"}', scheduled_at => '$DUE')" >/dev/null

# What there is before the stop, by tag (kept in tables of the database for the last report).
qs >/dev/null <<'SQL'
CREATE TABLE public.upg_before AS
    SELECT payload->>'tag' AS tag, execution_id, handler, handler_function IS NULL AS external,
           state::text AS state, attempt_number, scheduled_at
      FROM vq.job;
CREATE TABLE public.upg_before_outbox AS
    SELECT payload->>'tag' AS tag, id, destination_type, status, scheduled_at FROM vq.outbox;
SQL
STATES_SQL="SELECT string_agg(s, ', ' ORDER BY s) FROM (SELECT state || ' ' || count(*) AS s FROM vq.job GROUP BY state) x"
OUTBOX_SQL="SELECT string_agg(s, ', ' ORDER BY s) FROM (SELECT status || ' ' || count(*) AS s FROM vq.outbox GROUP BY status) x"
log "before the stop: jobs $(q "$STATES_SQL"); outbox $(q "$OUTBOX_SQL")"
for st in COMPLETED DEAD_LETTER CANCELLED ENQUEUED RUNNING; do
    [[ "$(q "SELECT count(*) FROM vq.job WHERE state = '$st'")" != 0 ]] || fail "no job is $st before the upgrade"
done
for st in PENDING PUBLISHED FAILED; do
    [[ "$(q "SELECT count(*) FROM vq.outbox WHERE status = '$st'")" != 0 ]] || fail "no outbox row is $st before the upgrade"
done

# ---- 3. the new binaries: executors wait for the update ---------------------------------------
log "3. pg_ctl stop -m fast (old library); start the same data directory with $VQ_PG_BIN"
t0="$(now_ms)"
vq_as_pg "$OLD_BIN/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null || fail "pg_ctl stop -m fast failed"
start_server "$VQ_PG_BIN" "$LOG_NEW"
NEW_VERSION="$(q "SELECT default_version FROM pg_available_extensions WHERE name = 'vq_job'")"
log "restarted in $(ms_since "$t0") ms; library $NEW_VERSION, database at $(q "SELECT extversion FROM pg_extension WHERE extname = 'vq_job'")"
[[ "$NEW_VERSION" != "$OLD_VERSION" ]] || fail "the installed vq_job is $OLD_VERSION too: nothing to upgrade to"
wait_log "$LOG_NEW" "extension vq_job is installed at version ${OLD_VERSION//./\\.} in this database, but the loaded library is version ${NEW_VERSION//./\\.}" \
    30 "the executors' WARNING about the version mismatch"
log "WARNING logged: $(grep -m 1 -oE 'WARNING: .*' "$LOG_NEW" | cut -c1-160)..."
SLOW_STATE="$(q "SELECT state || '|' || attempt_number FROM vq.job WHERE execution_id = '$SLOW'")"
assert_eq "ENQUEUED|0" "$SLOW_STATE" "the slow job after the fast stop (INTERRUPTED: back in line, same attempt)"
assert_eq INTERRUPTED "$(q "SELECT kind FROM vq.job_transition_data WHERE execution_id = '$SLOW' ORDER BY id DESC LIMIT 1")" \
    "the slow job's last transition after the fast stop"
for tag in behind-1 behind-2 paused-1; do
    assert_eq ENQUEUED "$(q "SELECT state FROM vq.job WHERE payload->>'tag' = '$tag'")" "due job $tag"
done
MOVES="SELECT (SELECT string_agg(concat_ws(' ', execution_id, state, attempt_number, updated_at), ',' ORDER BY execution_id) FROM vq.job)
              || (SELECT string_agg(concat_ws(' ', id, status, attempts, updated_at), ',' ORDER BY id) FROM vq.outbox)"
assert_stays "$MOVES" 2 "jobs and outbox rows while the versions differ"
assert_eq "ENQUEUED" "$(q "SELECT state FROM vq.job WHERE payload->>'tag' = 'behind-1'")" "due job behind-1 after 2 s"
log "for 2 s after the WARNING nothing moved: the due jobs wait"

# A second database at the new version, its executors running a stream of jobs during the update.
q "CREATE DATABASE upg_side" -d postgres >/dev/null
PGDATABASE=upg_side qs >/dev/null <<'SQL'
CREATE EXTENSION vq_job;
CREATE TABLE side_runs (i int);
CREATE TABLE side_ctl (stop boolean NOT NULL);
INSERT INTO side_ctl VALUES (false);
CREATE FUNCTION h_side(payload jsonb, ctx vq.job_context) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.side_runs VALUES ((payload->>'i')::int) $$;
SELECT vq_create_queue('side', sleep_delay_ms => 200);
SELECT vq_register_handler('h_side', 'h_side(jsonb, vq.job_context)', queue => 'side');
SQL
PGDATABASE=upg_side psql -XAtq -v ON_ERROR_STOP=1 -c "DO \$\$ BEGIN
        FOR i IN 1..2000 LOOP
            EXIT WHEN (SELECT stop FROM side_ctl);
            PERFORM vq_enqueue('h_side', jsonb_build_object('i', i));
            COMMIT;
            PERFORM pg_sleep(0.05);
        END LOOP; END \$\$" >"$T/side.out" 2>&1 &
LOAD_PID=$!
PGDATABASE=upg_side wait_for "SELECT count(*) >= 3 FROM side_runs" 30 "the second database's executors running jobs"

# ---- 4. the update ----------------------------------------------------------------------------
# Every row of every table of the extension, on the old version's columns (a composite column on
# its type's old fields), and the sequences, one line each: the query is written from the catalog
# of the old version.
q "WITH cols AS (
       SELECT c.oid AS relid, a.attnum, a.attname, t.typtype, t.typrelid
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         JOIN pg_type t ON t.oid = a.atttypid
        WHERE n.nspname = 'vq' AND c.relkind IN ('r', 'p') AND NOT c.relispartition)
   SELECT format('SELECT %L || E''\\t'' || jsonb_build_object(%s)::text FROM %s x;', relid::regclass,
                 string_agg(format('%L, %s', attname,
                     CASE WHEN typtype = 'c' THEN
                         format('(SELECT jsonb_object_agg(e.key, e.value) FROM jsonb_each(to_jsonb(x.%I)) e WHERE e.key = ANY (%L::text[]))',
                                attname,
                                (SELECT array_agg(f.attname ORDER BY f.attnum) FROM pg_attribute f
                                  WHERE f.attrelid = typrelid AND f.attnum > 0 AND NOT f.attisdropped))
                     ELSE format('x.%I', attname) END), ', ' ORDER BY attnum), relid::regclass)
     FROM cols GROUP BY relid
   UNION ALL
   SELECT format('SELECT %L || E''\\t'' || last_value FROM %s;', 'sequence ' || c.oid::regclass, c.oid::regclass)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'vq' AND c.relkind = 'S'" >"$T/rows.sql"
rows() { LC_ALL=C sort; }
psql -XAtq -v ON_ERROR_STOP=1 -f "$T/rows.sql" | rows >"$T/rows.before"
log "4. ALTER EXTENSION vq_job UPDATE in upg ($(wc -l <"$T/rows.before") rows of $(grep -c '^SELECT' "$T/rows.sql") tables and sequences), while upg_side's executors run"
UPDATE_START="$(q "SELECT clock_timestamp()")"
t0="$(now_ms)"
{ echo "BEGIN;"; echo "ALTER EXTENSION vq_job UPDATE;"; cat "$T/rows.sql"; echo "COMMIT;"; } |
    psql -XAtq -v ON_ERROR_STOP=1 -f - | rows >"$T/rows.after" || fail "ALTER EXTENSION vq_job UPDATE failed"
UPDATE_AT="$(q "SELECT now()")"
log "updated in $(ms_since "$t0") ms"
assert_eq "$NEW_VERSION" "$(q "SELECT extversion FROM pg_extension WHERE extname = 'vq_job'")" "version after the update"

# What the update may change: the rows of the NOTIFY jobs in flight (a version may withdraw the
# announced ones or lease the taken ones), with new transitions and the callbacks these queue.
# Nothing else, and a sequence may only go up.
INFLIGHT="$(q "SELECT string_agg(execution_id::text, '|') FROM public.upg_before WHERE external AND state = 'RUNNING'")"
LC_ALL=C comm -3 "$T/rows.before" "$T/rows.after" | sed 's/^\t/+ /; t; s/^/- /' >"$T/rows.diff" || true
grep -E "^([-+] vq\.job|\+ vq\.job_transition_data|\+ vq\.callback_event)	\{.*\"execution_id\": \"($INFLIGHT)\"" \
    "$T/rows.diff" >"$T/rows.moved" || true
grep -vxF -f "$T/rows.moved" "$T/rows.diff" | grep -v '^[-+] sequence ' >"$T/rows.bad" || true
if [[ -s "$T/rows.bad" ]]; then
    fail "the update changed, added or removed rows (- before, + after; on the old version's columns):
$(head -n 40 "$T/rows.bad" | cut -c1-400)"
fi
while IFS=$'\t' read -r name value; do
    after="$(grep -m 1 -F "$name"$'\t' "$T/rows.after" | cut -f2)"
    [[ -n "$after" ]] || fail "the update removed $name"
    ((after >= value)) || fail "the update moved $name back from $value to $after"
done < <(grep '^sequence ' "$T/rows.before")
for id in ${INFLIGHT//|/ }; do
    grep -qE "^vq\.job	.*\"execution_id\": \"$id\"" "$T/rows.after" || fail "the update removed the NOTIFY job $id"
done
log "every row is there, unchanged but $(grep -c '' "$T/rows.moved" || true) line(s) of the NOTIFY jobs in flight; these are:"
q "SELECT '   ' || b.tag || ': ' || b.state || ' attempt ' || b.attempt_number || ' -> ' || j.state || ' attempt '
          || j.attempt_number || CASE WHEN j.consumer_claimed_at IS NULL THEN ', untaken' ELSE ', taken' END
          || coalesce('; transitions: ' || (SELECT string_agg(t.kind || ' ' || t.from_state || '>' || t.to_state
                                                             || coalesce(' \"' || t.error || '\"', ''), '; ' ORDER BY t.id)
                                               FROM vq.job_transition_data t
                                              WHERE t.execution_id = j.execution_id AND t.at >= '$UPDATE_START'), '')
     FROM public.upg_before b JOIN vq.job j USING (execution_id)
    WHERE b.external AND b.state = 'RUNNING' ORDER BY 1"

PGDATABASE=upg_side q "UPDATE side_ctl SET stop = true" >/dev/null
wait "$LOAD_PID" || fail "the second database's load failed: $(cat "$T/side.out")"
LOAD_PID=""
SIDE_N="$(PGDATABASE=upg_side q "SELECT count(*) FROM vq.job")"
PGDATABASE=upg_side wait_for "SELECT count(*) = $SIDE_N FROM side_runs" 30 "the $SIDE_N jobs of upg_side to run"
log "upg_side: $SIDE_N jobs enqueued and run, before, during and after the update"

# ---- after the update: everything runs ---------------------------------------------------------
q "UPDATE public.upg_ctl SET val = false WHERE name IN ('fail', 'dest_retry');
   UPDATE public.upg_ctl SET val = true WHERE name = 'slow_gate'" >/dev/null
t0="$(now_ms)"
wait_for "SELECT ($EXECUTORS) > 0" 30 "executors in upg after the update"
log "executors back in upg $(ms_since "$t0") ms after the update"
wait_for "SELECT count(*) = 3 FROM vq.job WHERE state = 'COMPLETED' AND payload->>'tag' IN ('slow', 'behind-1', 'behind-2')" \
    60 "the interrupted slow job and the due jobs behind it to complete"
log "the due jobs completed: slow $(transitions "$SLOW")"

log "NOTIFY jobs: the reply in flight for the one taken before the upgrade, then vq_pull + vq_complete"
replied="$(q_as upg_worker "SELECT vq_complete('$TAKEN', $TAKEN_ATTEMPT)" 2>"$T/reply.err")" ||
    fail "the reply in flight failed: $(cat "$T/reply.err")"
if [[ "$replied" == t ]]; then
    log "vq_complete of the job taken before the upgrade (attempt $TAKEN_ATTEMPT): accepted"
else
    log "vq_complete of the job taken before the upgrade (attempt $TAKEN_ATTEMPT) ignored: $(cat "$T/reply.err")"
fi
assert_eq "" "$(q_as upg_nobody "SELECT vq_job_payload('$ANNOUNCED')")" "vq_job_payload for a role with no consumer grant"
assert_eq '{"tag": "ext-announced"}' "$(q_as upg_worker "SELECT vq_job_payload('$ANNOUNCED')")" \
    "vq_job_payload for the consumer (vq_grant_consumer)"
assert_eq 0 "$(q_as upg_nobody "SELECT count(*) FROM vq_pull('n_ext', 10)")" "jobs vq_pull gives a role with no grant"
q_as upg_app "SELECT vq_enqueue('n_ext', '{\"tag\": \"ext-new\"}')" >/dev/null
EXT_TAGS="'ext-taken', 'ext-announced', 'ext-delayed', 'ext-new'"
: >"$T/pulled"
deadline=$((SECONDS + DELAY_S + 120))
EXT_STATES="SELECT string_agg(payload->>'tag' || ' ' || state || ' attempt ' || attempt_number, ', ' ORDER BY payload->>'tag')
              FROM vq.job WHERE payload->>'tag' IN ($EXT_TAGS)"
until [[ "$(q "SELECT count(*) FROM vq.job WHERE payload->>'tag' IN ($EXT_TAGS) AND state = 'COMPLETED'")" == 4 ]]; do
    ((SECONDS < deadline)) || fail "the NOTIFY jobs did not all complete: $(q "$EXT_STATES"); pulled: $(cat "$T/pulled")"
    [[ "$(q "SELECT count(*) FROM vq.job WHERE payload->>'tag' IN ($EXT_TAGS) AND state IN ('CANCELLED', 'DEAD_LETTER')")" == 0 ]] ||
        fail "NOTIFY jobs ended without being run: $(q "$EXT_STATES"); pulled: $(cat "$T/pulled")"
    while IFS='|' read -r id attempt tag due; do
        [[ -n "$id" ]] || continue
        echo "$tag:$attempt" >>"$T/pulled"
        assert_eq true "$due" "$tag pulled at or after its scheduled_at"
        assert_eq t "$(q_as upg_worker "SELECT vq_complete('$id', $attempt)")" "vq_complete of $tag (attempt $attempt) after vq_pull"
    done < <(q_as upg_worker "SELECT execution_id || '|' || attempt || '|' || (payload->>'tag') || '|' || (clock_timestamp() >= scheduled_at)
                     FROM vq_pull('n_ext', 10)")
    sleep 0.2
done
log "NOTIFY jobs COMPLETED; pulled after the update: $(sort "$T/pulled" | paste -sd ' ')"
dups="$(cut -d: -f1 "$T/pulled" | sort | uniq -d | paste -sd ' ')"
assert_eq "" "$dups" "jobs vq_pull gave twice"

log "dead letters: redriven, then they run"
assert_eq 2 "$(q "SELECT vq_redrive(handler => 'h_fail')")" "jobs vq_redrive re-enqueued"
wait_for "SELECT count(*) = 2 FROM vq.job WHERE payload->>'tag' IN ('dead-1', 'dead-2') AND state = 'COMPLETED'" 30 \
    "the redriven dead letters to complete"

log "a new enqueue, the contract override, the windows"
NEW_ID="$(q "SELECT vq_enqueue('h_ok', '{\"tag\": \"after-new\"}')")"
OVER_ID="$(q "SELECT vq_enqueue('h_over', '{\"tag\": \"after-over\"}')")"
assert_eq "upq_cfg|7|4" "$(q "SELECT queue || '|' || priority || '|' || max_attempts FROM vq.job WHERE execution_id = '$OVER_ID'")" \
    "h_over's new job under the override"
assert_eq "$(id_of done-win)" "$(q "SELECT vq_enqueue('h_ok', '{\"tag\": \"win-again\"}', job_id => 'win-done', unique_for => '1 hour')")" \
    "an enqueue of job_id win-done (its window, from before the upgrade)"
assert_eq "$(id_of delayed-win)" "$(q "SELECT vq_enqueue('h_ok', '{\"tag\": \"win-again-2\"}', job_id => 'win-delayed', unique_for => '1 hour')")" \
    "an enqueue of job_id win-delayed (its job or its window, from before the upgrade)"
wait_state "$NEW_ID" COMPLETED 30
assert_eq 1 "$(q "SELECT count(*) FROM vq.job_log WHERE execution_id = '$NEW_ID' AND message = 'h_ok ran'")" \
    "vq_log lines of the new job"
wait_state "$OVER_ID" COMPLETED 30

log "grants: upg_app enqueues what it may, and only that"
q_as upg_app "SELECT vq_enqueue('h_ok', '{\"tag\": \"after-app\"}', queue => 'upq_hi', priority => 9)" >/dev/null
q_as upg_app "SELECT vq_outbox_publish('h_ok', '{\"tag\": \"after-app-outbox\"}')" >/dev/null
msg="$(err_as upg_app 42501 "SELECT vq_enqueue('h_secret', '{\"tag\": \"x\"}')")"
log "upg_app, another's handler: $msg"
msg="$(err_as upg_app 42501 "SELECT vq_enqueue('h_ok', '{\"tag\": \"x\"}', queue => 'upq_paused')")"
log "upg_app, a queue not granted: $msg"
msg="$(err_as upg_nobody 42501 "SELECT vq_enqueue('n_ext', '{\"tag\": \"x\"}')")"
log "upg_nobody, a NOTIFY handler with no producer grant: $msg"
wait_for "SELECT count(*) = 2 FROM vq.job WHERE payload->>'tag' IN ('after-app', 'after-app-outbox') AND state = 'COMPLETED'
            AND enqueued_by = 'upg_app'::regrole" 30 "upg_app's new jobs to complete as upg_app"

log "the delayed jobs and outbox rows, due at $DUE ($(q "SELECT round(extract(epoch FROM '$DUE'::timestamptz - '$UPDATE_AT'::timestamptz), 1)") s after the update)"
DELAYED_TAGS="'delayed-1', 'delayed-win', 'delayed-app', 'ob-delayed', 'ob-app-delayed'"
wait_for "SELECT count(*) = 5 FROM vq.job WHERE payload->>'tag' IN ($DELAYED_TAGS) AND state = 'COMPLETED'" $((DELAY_S + 60)) \
    "the delayed jobs to complete"
wait_for "SELECT count(*) = 0 FROM vq.outbox WHERE status = 'PENDING'" 60 "every PENDING outbox row delivered"
early="$(q "SELECT string_agg(r.tag || ' ran at ' || r.ran_at, ', ') FROM public.upg_runs r
             WHERE r.tag IN ($DELAYED_TAGS, 'ob-delayed-dest') AND r.ran_at < '$DUE'")"
assert_eq "" "$early" "delayed jobs that ran before their run_at"
early="$(q "SELECT string_agg(tag, ', ') FROM vq.outbox o JOIN public.upg_before_outbox b USING (id)
             WHERE o.published_at < coalesce(b.scheduled_at, '-infinity')")"
assert_eq "" "$early" "outbox rows delivered before their scheduled_at"

log "the paused queue: still paused, its jobs waiting; resumed, they run"
assert_eq t "$(q "SELECT paused FROM vq.queue WHERE name = 'upq_paused'")" "upq_paused paused after the update"
assert_eq "ENQUEUED,ENQUEUED" "$(q "SELECT string_agg(state::text, ',') FROM vq.job WHERE payload->>'tag' IN ('paused-1', 'paused-2')")" \
    "the jobs of the paused queue, once everything else ran"
q "SELECT vq_resume_queue('upq_paused')" >/dev/null
wait_for "SELECT count(*) = 2 FROM vq.job WHERE payload->>'tag' IN ('paused-1', 'paused-2') AND state = 'COMPLETED'" 30 \
    "the resumed queue's jobs to complete"

log "callbacks after the update: the interceptor and the listener"
wait_for "SELECT count(*) FILTER (WHERE kind = 'dispatch') >= 1 AND count(*) FILTER (WHERE kind = 'complete' AND detail = 'COMPLETED') >= 1
                 AND count(*) FILTER (WHERE kind = 'transition' AND detail LIKE 'COMPLETED:%') >= 1
            FROM public.upg_cb WHERE execution_id = '$NEW_ID' AND ext_version = '$NEW_VERSION'" 30 \
    "the interceptor (on_dispatch, on_complete) and the listener called for a job enqueued after the update"
wait_for "SELECT count(*) = 2 FROM public.upg_cb c JOIN public.upg_before b USING (execution_id)
           WHERE b.state = 'DEAD_LETTER' AND c.kind = 'transition' AND c.detail = 'REDRIVEN:DEAD_LETTER>ENQUEUED'" 30 \
    "the listener called for the redrives"
log "callbacks since the update: $(q "SELECT string_agg(kind || ' ' || n, ', ' ORDER BY kind) FROM (SELECT kind, count(*) n FROM public.upg_cb
                                       WHERE ext_version = '$NEW_VERSION' GROUP BY kind) x")"

# ---- the end: every job and outbox row that existed ----------------------------------------------
log "states before the stop and now:"
printf '   %-16s%-16s%s\n' "job" "before" "now"
q "SELECT rpad(b.tag, 16) || rpad(b.state || ' ' || b.attempt_number, 16) || coalesce(j.state || ' ' || j.attempt_number, 'MISSING')
     FROM public.upg_before b LEFT JOIN vq.job j USING (execution_id) ORDER BY b.state, b.tag" | sed 's/^/   /'
printf '   %-16s%-16s%s\n' "outbox row" "before" "now"
q "SELECT rpad(b.tag, 16) || rpad(b.status, 16) || coalesce(o.status || ' (' || o.destination_type || ')', 'MISSING')
     FROM public.upg_before_outbox b LEFT JOIN vq.outbox o USING (id) ORDER BY b.status, b.tag" | sed 's/^/   /'
assert_eq "" "$(q "SELECT string_agg(b.tag || ': ' || coalesce(j.state::text, 'missing'), ', ') FROM public.upg_before b
                    LEFT JOIN vq.job j USING (execution_id)
                   WHERE j.state IS DISTINCT FROM (CASE WHEN b.state = 'CANCELLED' THEN 'CANCELLED' ELSE 'COMPLETED' END)::vq.job_state")" \
    "jobs from before the upgrade that are not COMPLETED (CANCELLED for the cancelled one)"
assert_eq "" "$(q "SELECT string_agg(b.tag || ': ' || coalesce(o.status, 'missing'), ', ') FROM public.upg_before_outbox b
                    LEFT JOIN vq.outbox o USING (id)
                   WHERE o.status IS DISTINCT FROM CASE WHEN b.status = 'FAILED' THEN 'FAILED' ELSE 'PUBLISHED' END")" \
    "outbox rows from before the upgrade not PUBLISHED (FAILED for the failed one)"
assert_eq "" "$(q "SELECT string_agg(coalesce(j.payload->>'tag', r.tag) || ' x' || coalesce(r.n, 0), ', ')
                     FROM (SELECT execution_id, state, payload FROM vq.job WHERE handler_function IS NOT NULL) j
                     FULL JOIN (SELECT execution_id, min(tag) AS tag, count(*) AS n FROM public.upg_runs
                                 WHERE execution_id IS NOT NULL GROUP BY 1) r USING (execution_id)
                    WHERE coalesce(r.n, 0) <> CASE WHEN j.state = 'COMPLETED' THEN 1 ELSE 0 END")" \
    "function jobs whose effect is not there exactly once (once per COMPLETED job, never for another)"
log "jobs now: $(q "$STATES_SQL"); outbox now: $(q "$OUTBOX_SQL")"
log "PASS"

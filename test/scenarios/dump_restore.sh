#!/usr/bin/env bash
# dump_restore.sh: pg_dump / pg_restore round trips into a fresh second cluster, done as README's
# operations guide says (roles first with pg_dumpall --globals-only).
#   The source database holds configuration (queues, the default queue's changed settings and
#   its pause, a contract override, handlers, consumer / producer / queue grants, a destination,
#   an interceptor, a transition listener, an EXECUTE grant on a vq function), jobs in every
#   state (COMPLETED after a FAILED attempt, DEAD_LETTER, CANCELLED, RUNNING: a function job
#   blocked in its handler and a NOTIFY job a worker took (vq_take_jobs, lease of an hour) and
#   has not answered, ENQUEUED: a NOTIFY job no worker took yet, due ones held back by their
#   queue's capacity, due ones in the paused default queue, a delayed one), logs, transitions,
#   outbox rows (PUBLISHED, FAILED, PENDING until later) and a job_id window; nothing moves
#   while it is dumped (the same state before and after both dumps).
#   1. pg_dump -Fc + pg_restore into a database whose executors already run: configuration and
#      the finished history are equal; the restored due jobs run within 3 s of the restore's
#      end; the RUNNING function job is an orphan there (ABANDONED, back to ENQUEUED);
#   2. plain pg_dump | psql into a fresh database, the psql session kept open: while it is, the
#      executors touch nothing (everything, unfinished jobs and sequences included, equals the
#      source); once it ends, the same as in 1;
#   in both: the default queue stays paused (its jobs run once resumed); vq_enqueue and
#   vq_outbox_publish work at once, and new transition, log and outbox ids come after the
#   restored ones; the job_id window holds; the callbacks fire; the consumer grant works (the
#   granted consumer takes the waiting NOTIFY job with vq_take_jobs; the taken one is still
#   held, under its lease, and its reply is accepted); the delayed job and the delayed outbox
#   row run at their time, not before;
#   3. a database owner that is no superuser dumps the database (pg_dump --enable-row-security;
#      without it PostgreSQL refuses, as for any table with row security): its dump has the
#      whole configuration and the jobs, history, logs, outbox rows and windows of the roles it
#      is a member of, and not the others';
#   4. pg_dump --inserts | psql into r_ins, whose executors already run: as in 1; a transition
#      listener registered there before is not called for the restored history;
#   5. pg_restore of the -Fc dump into r_new, a fresh database without the extension: as in 1;
#   6. pg_restore --single-transaction of the -Fc dump into r_one, a fresh database without
#      the extension (CREATE EXTENSION and the rows commit together): as in 1;
#   7. pg_restore -j 2 into r_par, a fresh database, the way docs/operations.md says: pre-data;
#      the data but vq's with -j 2; post-data with -j 2; vq's data (-n vq) in one job: as in 1.
#      (A plain pg_restore -j 2 fails: the archive orders the data of the extension's
#      configuration tables for a restore in one job only, and a handler's row came before its
#      queue's: "violates foreign key constraint "handler_queue_fkey"", three times in three.)
#   A role that may not write vq.job_active gets PostgreSQL's error for a COPY into it, and that
#   holds no executor back. With VQ_KEEP_CLUSTER=1 the second cluster is left running.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "${VQ_REPO_ROOT:?}/scripts/lib.sh"

SRC="$PGDATABASE"
TMPD="$(mktemp -d /tmp/vq_sc_dr.XXXXXX)"
chmod 755 "$TMPD"
R_DIR="" R_PORT="" R_SOCK=""        # the second cluster
LOCK_PID="" LOCK_FD="" PLAIN_PID="" PLAIN_FD=""
ROLES=(dr_app dr_consumer dr_ops dr_dbowner)

on_exit() {
    local rc=$?
    set +e
    [[ -n "$PLAIN_FD" ]] && exec {PLAIN_FD}>&-
    [[ -n "$PLAIN_PID" ]] && kill "$PLAIN_PID" 2>/dev/null
    [[ -n "$LOCK_FD" ]] && exec {LOCK_FD}>&-
    [[ -n "$LOCK_PID" ]] && wait "$LOCK_PID" 2>/dev/null
    if [[ -n "$R_DIR" && "${VQ_KEEP_CLUSTER:-}" == 1 ]]; then
        echo "VQ_KEEP_CLUSTER=1: the second cluster stays in $R_DIR (socket dir $R_SOCK, port $R_PORT)"
    elif [[ -n "$R_DIR" ]]; then
        vq_cluster_destroy "$R_DIR" >/dev/null 2>&1
    fi
    q "ALTER DATABASE \"$SRC\" OWNER TO postgres" >/dev/null 2>&1
    q "SELECT vq_resume_queue('default')" >/dev/null 2>&1
    drop_roles "${ROLES[@]}"
    cleanup_configs
    rm -rf "$TMPD"
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# on2 DB CMD...: run a helper (q, qs, wait_for, assert_sql ...) against database DB of the second cluster.
on2() {
    local db="$1"
    shift
    PGHOST="$R_SOCK" PGPORT="$R_PORT" PGDATABASE="$db" "$@"
}
# check WHAT CMD...: run CMD in a subshell; if it fails, remember WHAT and go on (fail_summary at the end).
check() {
    local what="$1"
    shift
    ("$@") || fail_later "$what"
}

# capture MODE [ROLE]: the state as one sorted line per row, "kind|row as jsonb". MODE full:
# everything; stable: what the executors of a restored database do not change (configuration,
# and the jobs, transitions, logs, outbox rows and rows of the handlers' tables that ended or
# were written before the dump, CUT). With ROLE, read as that role (row security applies).
capture() {
    local jobs="true" trans="true" logs="true" outbox="true" effects="true" seqs="true"
    if [[ "$1" == stable ]]; then
        jobs="j.state IN ('COMPLETED', 'DEAD_LETTER', 'CANCELLED') AND j.finished_at < '$CUT'"
        trans="t.at < '$CUT'" logs="l.logged_at < '$CUT'" effects="e.at < '$CUT'" seqs="false"
        outbox="o.status <> 'PENDING' AND o.updated_at < '$CUT'"
    fi
    psql -XAtq -v ON_ERROR_STOP=1 -c "SET timezone = 'UTC'" ${2:+-c "SET ROLE $2"} -c "
SELECT * FROM (
      SELECT 'queue' AS k, to_jsonb(x) AS r FROM vq.queue x
UNION ALL SELECT 'handler', to_jsonb(x) FROM vq.handler x
UNION ALL SELECT 'override', to_jsonb(x) FROM vq.contract_override x
UNION ALL SELECT 'consumer_grant', to_jsonb(x) FROM vq.consumer_grant x
UNION ALL SELECT 'producer_grant', to_jsonb(x) FROM vq.producer_grant x
UNION ALL SELECT 'queue_grant', to_jsonb(x) FROM vq.queue_grant x
UNION ALL SELECT 'destination', to_jsonb(x) FROM vq.destination x
UNION ALL SELECT 'interceptor', to_jsonb(x) FROM vq.interceptor x
UNION ALL SELECT 'listener', to_jsonb(x) FROM vq.transition_listener x
UNION ALL SELECT 'settings', to_jsonb(x) FROM vq.handler_settings x
UNION ALL SELECT 'target', to_jsonb(x) FROM vq_supported_target_ids() x
UNION ALL SELECT 'acl', to_jsonb(has_function_privilege('dr_ops',
              'vq_create_queue(text, integer, integer, text, integer, integer, integer)', 'EXECUTE'))
UNION ALL SELECT 'window', to_jsonb(x) FROM vq.job_id_window x
UNION ALL SELECT 'job', to_jsonb(j) FROM vq.job j WHERE $jobs
UNION ALL SELECT 'transition', to_jsonb(t) FROM vq.job_transition_data t WHERE $trans
UNION ALL SELECT 'log', to_jsonb(l) FROM vq.job_log l WHERE $logs
UNION ALL SELECT 'outbox', to_jsonb(o) FROM vq.outbox o WHERE $outbox
UNION ALL SELECT 'effect', to_jsonb(e) FROM public.dr_effects e WHERE $effects
UNION ALL SELECT 'seq', to_jsonb(s) FROM (SELECT 'log' AS s, last_value, is_called FROM vq.job_log_id_seq
              UNION ALL SELECT 'transition', last_value, is_called FROM vq.job_transition_data_id_seq
              UNION ALL SELECT 'outbox', last_value, is_called FROM vq.outbox_id_seq) s WHERE $seqs
) c ORDER BY k, r::text"
}
# same_state WHAT EXPECTED ACTUAL: fail_later with the differing lines unless equal.
same_state() {
    if [[ "$2" != "$3" ]]; then
        fail_later "$1 differs (< expected, > found):
$(diff <(printf '%s\n' "$2") <(printf '%s\n' "$3") | grep '^[<>]' | cut -c1-400 | head -n 20)"
    else
        log "$1: equal ($(grep -c . <<<"$2") rows)"
    fi
}
# assert_prompt ID SINCE WHAT: job ID COMPLETED within 15 s of SINCE (epoch s), started within 3 s of it.
assert_prompt() {
    local lag
    wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$1'" \
        "$(awk -v s="$2" -v n="$(now_s)" 'BEGIN { w = s - n; print (w > 0 ? w : 0) + 15 }')" "$3: COMPLETED" "$1"
    lag="$(q "SELECT round(extract(epoch FROM coalesce(started_at, finished_at)) - $2, 3) FROM vq.job
               WHERE execution_id = '$1'")"
    log "$3: started ${lag}s after"
    assert_sql "SELECT $lag < 3" "$3: started within 3 s (took ${lag}s)"
}
job_of() { q "SELECT execution_id FROM vq.job WHERE payload ->> 'tag' = '$1'"; }
# (what a timed-out wait prints about the database it polled: its executors, restore locks, unfinished jobs)
report_db() {
    q "SELECT 'executors: ' || coalesce(string_agg(pid || ' ' || coalesce(wait_event, '-') || ' ' || state, ', '), 'none')
         FROM pg_stat_activity WHERE backend_type = 'vq_job executor' AND datname = current_database()"
    q "SELECT 'restore locks: ' || coalesce(string_agg(pid || ' ' || mode || ' ' || granted, ', '), 'none')
         FROM pg_locks WHERE locktype = 'object' AND classid = 'pg_database'::regclass AND objsubid = 30321"
    q "SELECT 'unfinished: ' || coalesce(string_agg(payload ->> 'tag' || ' ' || queue || ' ' || state || ' ' || scheduled_at, ', '), 'none')
         FROM vq.job WHERE state IN ('ENQUEUED', 'RUNNING')"
}
export VQ_WAIT_REPORT=report_db

# ---- the source database ------------------------------------------------------------------
log "setup: roles, queues, handlers, grants, callbacks in $SRC"
drop_roles "${ROLES[@]}"
qs >/dev/null <<'SQL'
CREATE ROLE dr_app;
CREATE ROLE dr_consumer;
CREATE ROLE dr_ops;
CREATE ROLE dr_dbowner LOGIN;
GRANT dr_app TO dr_dbowner;
CREATE TABLE public.dr_effects (tag text, attempt int, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE public.dr_intercepted (execution_id uuid, outcome text, at timestamptz DEFAULT clock_timestamp());
CREATE TABLE public.dr_heard (execution_id uuid, kind text, at timestamptz DEFAULT clock_timestamp());
GRANT INSERT ON public.dr_effects TO dr_app;
GRANT SELECT ON public.dr_effects, public.dr_intercepted, public.dr_heard TO dr_dbowner;
GRANT INSERT ON public.dr_intercepted TO dr_dbowner;
CREATE FUNCTION public.dr_fn(p jsonb, ctx vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'attempt ' || ctx.attempt_number, jsonb_build_object('tag', p ->> 'tag'));
    IF ctx.attempt_number < coalesce((p ->> 'fail_until')::int, 0) THEN
        RAISE EXCEPTION 'attempt % of % fails', ctx.attempt_number, p ->> 'tag';
    END IF;
    INSERT INTO public.dr_effects (tag, attempt) VALUES (p ->> 'tag', ctx.attempt_number);
END $$;
CREATE FUNCTION public.dr_dead(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'dr_dead always fails'; END $$;
CREATE FUNCTION public.dr_block(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(74242);
    INSERT INTO public.dr_effects (tag, attempt) VALUES (p ->> 'tag', 0);
END $$;
CREATE FUNCTION public.dr_dest(destination text, payload jsonb, headers jsonb, metadata jsonb)
RETURNS vq.publish_result LANGUAGE sql AS $$ SELECT ROW('PERMANENT', 'refused')::vq.publish_result $$;
CREATE FUNCTION public.dr_count(c vq.job_context, outcome text, error text) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.dr_intercepted (execution_id, outcome) VALUES (c.execution_id, outcome) $$;
CREATE FUNCTION public.dr_listen(t vq.job_transition, j vq.job) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.dr_heard (execution_id, kind) VALUES (t.execution_id, t.kind) $$;

SELECT vq_alter_queue('default', sleep_delay_ms => 1500, max_concurrent_jobs => 7, backoff_strategy => 'FIXED');
SELECT vq_create_queue('dr_q', sleep_delay_ms => 700, max_concurrent_jobs => 3, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => 200, instances => 2);
SELECT vq_create_queue('dr_due', sleep_delay_ms => 60000, max_concurrent_jobs => 1, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => 60000);
SELECT vq_create_queue('dr_notify', sleep_delay_ms => 900);
SELECT vq_register_handler('dr_fn', 'public.dr_fn(jsonb, vq.job_context)', queue => 'dr_q');
SELECT vq_register_handler('dr_dead', 'public.dr_dead(jsonb)', queue => 'dr_q', max_attempts => 2);
SELECT vq_register_handler('dr_block', 'public.dr_block(jsonb)', queue => 'dr_due', priority => 5);
SELECT vq_register_notify_handler('dr_notify', 'dr_chan', queue => 'dr_notify');
SELECT vq_set_contract_override('dr_fn', max_attempts => 4);
SELECT vq_grant_consumer('dr_notify', 'dr_consumer');
SELECT vq_grant_producer('dr_notify', 'dr_app');
SELECT vq_grant_queue(q, 'dr_app') FROM unnest(ARRAY['default', 'dr_due']) q;
SELECT vq_register_destination('dr.dest', 'public.dr_dest(text, jsonb, jsonb, jsonb)');
ALTER FUNCTION public.dr_count(vq.job_context, text, text) OWNER TO dr_dbowner;   -- (its dump has this one)
SELECT vq_register_interceptor('dr-count', on_complete => 'public.dr_count(vq.job_context, text, text)');
SELECT vq_register_transition_listener('dr-listen', 'public.dr_listen(vq.job_transition, vq.job)');
GRANT EXECUTE ON FUNCTION vq_create_queue(text, integer, integer, text, integer, integer, integer) TO dr_ops;
SQL

log "history: completed (one after a failed attempt), dead letter, cancelled, window, outbox rows"
qs >/dev/null <<'SQL'
SET ROLE dr_app;
SELECT vq_enqueue('dr_fn', '{"tag": "c1", "fail_until": 1}');
SELECT vq_enqueue('dr_fn', '{"tag": "c2"}');
SELECT vq_enqueue('dr_dead', '{"tag": "dead"}');
SELECT vq_cancel(vq_enqueue('dr_fn', '{"tag": "cancelled"}', run_at => now() + interval '1 hour'));
SELECT vq_enqueue('dr_fn', '{"tag": "windowed"}', job_id => 'dr-key', unique_for => interval '1 day');
SELECT vq_outbox_publish('dr_fn', '{"tag": "o1"}');
SELECT vq_outbox_publish_to('dr.dest', 'nowhere', '{"tag": "o-failed"}');
RESET ROLE;
SELECT vq_enqueue('dr_fn', '{"tag": "pg-own"}');
SQL
wait_for "SELECT count(*) = 5 FROM dr_effects WHERE tag IN ('c1', 'c2', 'windowed', 'o1', 'pg-own')" 20 "the history jobs to run"
wait_for "SELECT state = 'DEAD_LETTER' FROM vq.job WHERE payload ->> 'tag' = 'dead'" 20 "the dead letter"
wait_for "SELECT status = 'FAILED' FROM vq.outbox WHERE payload ->> 'tag' = 'o-failed'" 20 "the failed outbox row"
wait_for "SELECT count(*) = 0 FROM vq.job WHERE state NOT IN ('COMPLETED', 'DEAD_LETTER', 'CANCELLED')" 10 "history settled"

log "unfinished: a function job RUNNING (blocked), NOTIFY jobs taken and waiting, due jobs held by capacity and by a pause"
mkfifo "$TMPD/lock.in"
psql -XAtq <"$TMPD/lock.in" >"$TMPD/lock.out" 2>&1 &
LOCK_PID=$!
exec {LOCK_FD}>"$TMPD/lock.in"
echo "SELECT pg_advisory_lock(74242);" >&"$LOCK_FD"
wait_for "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 74242 AND granted)" 10 "the test holds the advisory lock"
q_as dr_app "SELECT vq_enqueue('dr_block', '{\"tag\": \"blocked\"}')" >/dev/null
BLOCKED="$(job_of blocked)"
wait_for "SELECT state = 'RUNNING' AND worker_pid IS NOT NULL FROM vq.job WHERE execution_id = '$BLOCKED'" 15 \
    "the blocked job RUNNING in an executor" "$BLOCKED"
q_as dr_app "SELECT vq_enqueue('dr_notify', '{\"tag\": \"held\"}')" >/dev/null
HELD="$(job_of held)"
assert_eq "$HELD|0" "$(q_as dr_consumer "SELECT string_agg(execution_id || '|' || attempt, ',')
                                           FROM vq_take_jobs('{dr_notify}', 10, interval '1 hour')")" \
    "the granted consumer takes the held job (vq_take_jobs, a lease of an hour)"
HELD_LEASE="$(q "SELECT extract(epoch FROM lease_until) FROM vq.job WHERE execution_id = '$HELD' AND state = 'RUNNING'")"
q_as dr_app "SELECT vq_enqueue('dr_notify', '{\"tag\": \"waiting\"}')" >/dev/null
WAITING="$(job_of waiting)"
# (the take's CLAIMED transition, recorded for the listener, queued its call: let it run before the dumps)
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.callback_event)" 10 "the queued callbacks to have run"
q_as dr_app "SELECT vq_enqueue('dr_fn', jsonb_build_object('tag', 'due-' || g), queue => 'dr_due') FROM generate_series(1, 3) g" >/dev/null
q "SELECT vq_pause_queue('default')" >/dev/null
q_as dr_app "SELECT vq_enqueue('dr_fn', jsonb_build_object('tag', 'paused-' || p), queue => 'default', priority => p)
               FROM unnest(ARRAY[0, 4]) p" >/dev/null
assert_stays "SELECT string_agg(state::text, ',' ORDER BY payload ->> 'tag') FROM vq.job
               WHERE payload ->> 'tag' LIKE 'due-%' OR payload ->> 'tag' LIKE 'paused-%'" 1 "held due jobs"
LATER_AT="$(q "SELECT clock_timestamp() + interval '70 s'")"
q_as dr_app "SELECT vq_enqueue('dr_fn', '{\"tag\": \"later\"}', run_at => '$LATER_AT')" >/dev/null
q_as dr_app "SELECT vq_outbox_publish('dr_fn', '{\"tag\": \"o-later\"}', scheduled_at => '$LATER_AT')" >/dev/null

log "a COPY into vq.job_active by a role that may not write it: refused, and no restore"
if q_as dr_app "COPY vq.job_active FROM stdin" >/dev/null 2>"$TMPD/copy.err"; then
    fail_later "dr_app could COPY into vq.job_active"
else
    check "COPY by dr_app refused with 42501" grep -q 'permission denied for table job_active' "$TMPD/copy.err"
fi
check "no restore began for dr_app's COPY" bash -c "! grep -q 'a restore into database \"$SRC\" began' '${VQ_CLUSTER_DIR:?}/server.log'"

log "dumps (-Fc, plain, --inserts), the source unchanged across them"
CUT="$(q "SELECT clock_timestamp()")"
before="$(capture full)"
before_dbo="$(capture full dr_dbowner 2>&1)" || fail_later "reading the source as dr_dbowner failed: $before_dbo"
pg_dump -Fc -f "$TMPD/src.fc" "$SRC"
pg_dump -f "$TMPD/src.sql" "$SRC"
pg_dump --inserts -f "$TMPD/src-inserts.sql" "$SRC"
pg_dumpall --globals-only -f "$TMPD/globals.sql"
q "ALTER DATABASE \"$SRC\" OWNER TO dr_dbowner" >/dev/null
if pg_dump -U dr_dbowner -f "$TMPD/dbo-nors.sql" "$SRC" 2>"$TMPD/dbo-nors.err"; then
    fail_later "pg_dump by the database owner without --enable-row-security succeeded (expected PostgreSQL's row security error)"
else
    check "pg_dump without --enable-row-security refuses with PostgreSQL's row security error" \
        grep -q 'row-level security' "$TMPD/dbo-nors.err"
    log "without --enable-row-security: $(grep -m1 -o 'ERROR: .*' "$TMPD/dbo-nors.err")"
fi
pg_dump -U dr_dbowner --enable-row-security -Fc -f "$TMPD/dbo.fc" "$SRC" 2>"$TMPD/dbo.err" ||
    fail_later "pg_dump -U dr_dbowner --enable-row-security failed: $(cat "$TMPD/dbo.err")"
q "ALTER DATABASE \"$SRC\" OWNER TO postgres" >/dev/null
same_state "the source across the dumps" "$before" "$(capture full)"
echo "SELECT pg_advisory_unlock(74242);" >&"$LOCK_FD"
exec {LOCK_FD}>&-
LOCK_FD=""
wait "$LOCK_PID" || true
LOCK_PID=""
max_id() { grep "^$1|" <<<"$before" | sed -E 's/.*"id": ([0-9]+).*/\1/' | sort -n | tail -n 1; }
MAX_TRANSITION="$(max_id transition)" MAX_LOG="$(max_id log)" MAX_OUTBOX="$(max_id outbox)"
WINDOW_JOB="$(job_of windowed)"
log "restored ids end at: transition $MAX_TRANSITION, log $MAX_LOG, outbox $MAX_OUTBOX"

# ---- the second cluster -------------------------------------------------------------------
R_DIR="$(mktemp -d /tmp/vq_job.restore.XXXXXX)"
R_PORT="$(vq_free_port)"
R_SOCK="/tmp/vq_job.sock.$R_PORT"
log "a fresh second cluster on port $R_PORT; roles first (pg_dumpall --globals-only)"
(vq_cluster_start "$R_DIR" "$R_PORT" "fsync = off" "shared_buffers = 32MB") >"$TMPD/cluster2.log" 2>&1 ||
    fail "the second cluster did not start: $(tail -n 20 "$TMPD/cluster2.log")"
# (the role the cluster was created with exists already: that one statement fails)
on2 postgres psql -X -q -f "$TMPD/globals.sql" >/dev/null 2>"$TMPD/globals.err" || true
assert_eq 4 "$(on2 postgres q "SELECT count(*) FROM pg_roles WHERE rolname IN ('dr_app', 'dr_consumer', 'dr_ops', 'dr_dbowner')")" \
    "roles of the source in the second cluster"

# behaviour DB END: what a restored database does once its restore ended (at END, epoch s).
behaviour() {
    local db="$1" end="$2" id
    log "[$db] the due jobs held back by capacity run at once"
    for id in $(on2 "$db" q "SELECT execution_id FROM vq.job WHERE payload ->> 'tag' LIKE 'due-%'"); do
        check "[$db] restored due job $id prompt" on2 "$db" assert_prompt "$id" "$end" "[$db] restored due job"
    done
    log "[$db] the RUNNING function job is an orphan: ABANDONED (an attempt consumed), run again at once"
    check "[$db] orphan rescued" on2 "$db" wait_for "SELECT state = 'COMPLETED' AND attempt_number = 1
        AND (SELECT string_agg(kind, ',' ORDER BY id) FROM vq.job_transition t
              WHERE t.execution_id = j.execution_id AND t.at > '$CUT') LIKE 'ABANDONED,%COMPLETED'
        FROM vq.job j WHERE execution_id = '$BLOCKED'" 15 "[$db] the restored RUNNING job rescued and run again" "$BLOCKED"
    log "[$db] the default queue is still paused; resumed, its jobs run"
    check "[$db] paused default holds its jobs" on2 "$db" assert_stays "SELECT string_agg(state::text, ',') FROM vq.job
        WHERE payload ->> 'tag' LIKE 'paused-%'" 2 "[$db] jobs of the paused default queue"
    check "[$db] paused default's jobs ENQUEUED" on2 "$db" assert_sql "SELECT bool_and(state = 'ENQUEUED') AND count(*) = 2
        FROM vq.job WHERE payload ->> 'tag' LIKE 'paused-%'" "[$db] jobs of the paused default queue ENQUEUED"
    on2 "$db" q "SELECT vq_resume_queue('default')" >/dev/null
    for id in $(on2 "$db" q "SELECT execution_id FROM vq.job WHERE payload ->> 'tag' LIKE 'paused-%'"); do
        check "[$db] resumed job $id" on2 "$db" wait_state "$id" COMPLETED 10
    done
    log "[$db] publish and enqueue at once; new ids after the restored ones"
    check "[$db] publish" on2 "$db" assert_sql "SELECT (SELECT vq_outbox_publish('dr_fn', '{\"tag\": \"new-pub\"}')) > $MAX_OUTBOX" \
        "[$db] vq_outbox_publish returns an id after the restored ones"
    on2 "$db" q_as dr_app "SELECT vq_enqueue('dr_fn', '{\"tag\": \"new-ids\", \"fail_until\": 1}')" >/dev/null
    id="$(on2 "$db" job_of new-ids)"
    check "[$db] new job" on2 "$db" wait_state "$id" COMPLETED 15
    check "[$db] new transition ids" on2 "$db" assert_sql "SELECT min(id) > $MAX_TRANSITION FROM vq.job_transition_data
        WHERE execution_id = '$id'" "[$db] new transition ids after the restored ones"
    check "[$db] new log ids" on2 "$db" assert_sql "SELECT count(*) = 2 AND min(id) > $MAX_LOG FROM vq.job_log
        WHERE execution_id = '$id'" "[$db] new log ids after the restored ones"
    check "[$db] relayed new row" on2 "$db" wait_for "SELECT count(*) = 1 FROM dr_effects WHERE tag = 'new-pub'" 10 "[$db] the new outbox row's job"
    check "[$db] callbacks" on2 "$db" wait_for "SELECT EXISTS (SELECT 1 FROM dr_intercepted WHERE execution_id = '$id' AND outcome = 'COMPLETED')
        AND EXISTS (SELECT 1 FROM dr_heard WHERE execution_id = '$id' AND kind = 'FAILED')" 10 "[$db] interceptor and listener on the new job"
    check "[$db] window" on2 "$db" assert_eq "$WINDOW_JOB" "$(on2 "$db" q_as dr_app "SELECT vq_enqueue('dr_fn', '{\"tag\": \"again\"}',
        job_id => 'dr-key', unique_for => interval '1 day')")" "[$db] the job_id window returns the restored job"
    check "[$db] held job" on2 "$db" assert_eq "RUNNING|0|$HELD_LEASE" "$(on2 "$db" q "SELECT state || '|' || attempt_number
        || '|' || extract(epoch FROM lease_until) FROM vq.job WHERE execution_id = '$HELD'")" \
        "[$db] the taken job, still held under its lease"
    check "[$db] consumer" on2 "$db" assert_eq "$WAITING|waiting|0" "$(on2 "$db" q_as dr_consumer \
        "SELECT string_agg(execution_id || '|' || (payload ->> 'tag') || '|' || attempt, ',')
           FROM vq_take_jobs('{dr_notify}', 10)")" "[$db] the granted consumer takes the waiting job (and only it)"
    check "[$db] consumer replies" on2 "$db" assert_eq "t|t" "$(on2 "$db" q_as dr_consumer \
        "SELECT vq_complete('$WAITING', 0), vq_complete('$HELD', 0)")" "[$db] the consumer's replies"
    check "[$db] consumer reply" on2 "$db" wait_for "SELECT count(*) = 2 FROM vq.job
        WHERE execution_id IN ('$WAITING', '$HELD') AND state = 'COMPLETED'" 5 "[$db] the replied jobs COMPLETED"
}
# later DB END: the delayed job and the delayed outbox row of DB run at their time (restore ended at END).
later() {
    local db="$1" id since
    id="$(on2 "$db" job_of later)"
    since="$(on2 "$db" q "SELECT greatest(extract(epoch FROM scheduled_at), $2) FROM vq.job WHERE execution_id = '$id'")"
    check "[$db] delayed job" on2 "$db" assert_prompt "$id" "$since" "[$db] the delayed job, after its time"
    check "[$db] delayed job not early" on2 "$db" assert_sql "SELECT started_at >= scheduled_at FROM vq.job WHERE execution_id = '$id'" \
        "[$db] the delayed job did not start before its scheduled_at"
    check "[$db] delayed outbox row" on2 "$db" wait_for "SELECT EXISTS (SELECT 1 FROM dr_effects e JOIN vq.outbox o ON o.payload ->> 'tag' = e.tag
        WHERE e.tag = 'o-later' AND o.status = 'PUBLISHED' AND e.at >= o.scheduled_at)" \
        "$(awk -v s="$since" -v n="$(now_s)" 'BEGIN { w = s - n; print (w > 0 ? w : 0) + 15 }')" "[$db] the delayed outbox row, at its time"
}

log "1. pg_restore (-Fc) into r_full, whose executors already run"
on2 postgres q "CREATE DATABASE r_full" >/dev/null
on2 r_full q "CREATE EXTENSION vq_job" >/dev/null
on2 r_full wait_for "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
    AND datname = current_database()" 20 "r_full's executors"
on2 r_full pg_restore -d r_full "$TMPD/src.fc" 2>"$TMPD/r_full.err" ||
    fail_later "pg_restore into r_full reported errors: $(head -c 2000 "$TMPD/r_full.err")"
end_full="$(now_s)"
same_state "[r_full] configuration and finished history" "$(capture stable)" "$(on2 r_full capture stable)"
behaviour r_full "$end_full"

log "2. pg_dump | psql into a fresh database r_plain, the session kept open a while"
on2 postgres q "CREATE DATABASE r_plain" >/dev/null
mkfifo "$TMPD/plain.in"
on2 r_plain psql -X -q -v ON_ERROR_STOP=1 <"$TMPD/plain.in" >"$TMPD/plain.out" 2>&1 &
PLAIN_PID=$!
exec {PLAIN_FD}>"$TMPD/plain.in"
cat "$TMPD/src.sql" >&"$PLAIN_FD"
echo "SELECT 'restored' || '-marker';" >&"$PLAIN_FD"
deadline=$((SECONDS + 60))
until grep -q 'restored-marker' "$TMPD/plain.out"; do
    kill -0 "$PLAIN_PID" 2>/dev/null || fail "psql restoring r_plain ended early: $(tail -c 2000 "$TMPD/plain.out")"
    ((SECONDS < deadline)) || fail "the plain restore did not finish within 60 s"
    sleep 0.05
done
check "[r_plain] the executors wait for the restoring session" on2 r_plain assert_stays \
    "SELECT count(*) FROM vq.job_transition_data" 1 "[r_plain] transitions while the restoring session is open"
same_state "[r_plain] everything while the restoring session is open" "$before" "$(on2 r_plain capture full)"
exec {PLAIN_FD}>&-
PLAIN_FD=""
wait "$PLAIN_PID" || fail_later "psql restoring r_plain failed: $(tail -c 2000 "$TMPD/plain.out")"
PLAIN_PID=""
end_plain="$(now_s)"
check "[r_plain] no errors" bash -c "! grep -q 'ERROR' '$TMPD/plain.out'"
behaviour r_plain "$end_plain"

log "3. the database owner's dump (no superuser, --enable-row-security) into r_dbo (not served)"
on2 postgres q "CREATE DATABASE r_dbo" >/dev/null
on2 postgres q "ALTER DATABASE r_dbo SET vq.serve_database = off" >/dev/null
if [[ -s "$TMPD/dbo.fc" ]]; then
    on2 r_dbo pg_restore -d r_dbo "$TMPD/dbo.fc" 2>"$TMPD/r_dbo.err" ||
        fail_later "pg_restore of the owner's dump reported errors: $(head -c 2000 "$TMPD/r_dbo.err")"
    same_state "[r_dbo] what the database owner may see" "$before_dbo" "$(on2 r_dbo capture full)"
    check "[r_dbo] has dr_app's jobs, not postgres'" on2 r_dbo assert_sql "SELECT count(*) FILTER (WHERE enqueued_by = 'dr_app'::regrole) > 10
        AND count(*) FILTER (WHERE enqueued_by <> 'dr_app'::regrole) = 0 FROM vq.job" "[r_dbo] jobs of dr_app only"
    check "[r_dbo] has the interceptor of its function, not the listener of postgres'" on2 r_dbo assert_eq "dr-count|" \
        "$(on2 r_dbo q "SELECT (SELECT string_agg(name, ',') FROM vq.interceptor) || '|' ||
                        coalesce((SELECT string_agg(name, ',') FROM vq.transition_listener), '')")" "[r_dbo] callbacks"
fi

log "4. pg_dump --inserts | psql into r_ins, whose executors already run, with a transition listener"
on2 postgres q "CREATE DATABASE r_ins" >/dev/null
on2 r_ins qs >/dev/null <<'SQL'
CREATE EXTENSION vq_job;
CREATE TABLE public.pre_heard (execution_id uuid, kind text, at timestamptz);
CREATE FUNCTION public.pre_listen(t vq.job_transition, j vq.job) RETURNS void LANGUAGE sql
    AS $$ INSERT INTO public.pre_heard VALUES (t.execution_id, t.kind, t.at) $$;
SELECT vq_register_transition_listener('pre-listen', 'public.pre_listen(vq.job_transition, vq.job)');
SQL
on2 r_ins psql -X -q -v ON_ERROR_STOP=1 -f "$TMPD/src-inserts.sql" >"$TMPD/r_ins.out" 2>&1 ||
    fail_later "psql restoring r_ins (--inserts) failed: $(tail -c 2000 "$TMPD/r_ins.out")"
end_ins="$(now_s)"
check "[r_ins] restored history calls no listener" on2 r_ins assert_sql \
    "SELECT NOT EXISTS (SELECT 1 FROM public.pre_heard WHERE at < '$CUT')" "[r_ins] no listener call for restored transitions"
on2 r_ins q "SELECT vq_unregister_transition_listener('pre-listen')" >/dev/null
same_state "[r_ins] configuration and finished history" "$(capture stable)" "$(on2 r_ins capture stable)"
behaviour r_ins "$end_ins"

# fc_restore DB [PG_RESTORE_OPTION...]: pg_restore of the -Fc dump into DB, with the options.
fc_restore() {
    local db="$1"
    shift
    on2 "$db" pg_restore "$@" -d "$db" "$TMPD/src.fc" 2>>"$TMPD/$db.err" ||
        fail_later "pg_restore $* into $db reported errors: $(head -c 2000 "$TMPD/$db.err")"
}
# restore_fc DB HOW: the -Fc dump into DB, a fresh database (no extension): HOW one (pg_restore),
# single (--single-transaction) or parallel (docs/operations.md's steps, -j 2 where it says -j);
# then as in 1. Sets END_FC to when the restore ended.
restore_fc() {
    local db="$1" how="$2"
    on2 postgres q "CREATE DATABASE $db" >/dev/null
    case "$how" in
        one) fc_restore "$db" ;;
        single) fc_restore "$db" --single-transaction ;;
        parallel)
            fc_restore "$db" --section=pre-data
            fc_restore "$db" -j 2 --section=data -N vq
            fc_restore "$db" -j 2 --section=post-data
            fc_restore "$db" --section=data -n vq
            ;;
    esac
    END_FC="$(now_s)"
    same_state "[$db] configuration and finished history" "$(capture stable)" "$(on2 "$db" capture stable)"
    behaviour "$db" "$END_FC"
}
log "5. pg_restore (-Fc) into r_new, a fresh database without the extension"
restore_fc r_new one
end_new="$END_FC"
log "6. pg_restore --single-transaction (-Fc) into r_one, a fresh database without the extension"
restore_fc r_one single
end_one="$END_FC"
log "7. pg_restore -j 2 as docs/operations.md says (vq's rows last, in one job) into r_par, a fresh database"
restore_fc r_par parallel
end_par="$END_FC"

log "the delayed job and outbox row run at their time ($LATER_AT)"
later r_full "$end_full"
later r_plain "$end_plain"
later r_ins "$end_ins"
later r_new "$end_new"
later r_one "$end_one"
later r_par "$end_par"
fail_summary
log "ok"

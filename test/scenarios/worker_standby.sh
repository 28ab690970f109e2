#!/usr/bin/env bash
# worker_standby.sh: the workers stay idle on a hot standby and start work after promotion.
#   A streaming replica of the test cluster is made with pg_basebackup -R (own data dir under
#   /tmp, own port and socket dir, shared_preload_libraries inherited).
#    - on the standby, pg_stat_activity shows the 'vq_job launcher' and no 'vq_job executor'
#      for 3 s, while the primary's executors run jobs (due and 1-2 s in the future);
#    - those jobs ran once, on the primary: the standby has the same single effect row per
#      job (written by the primary) and no error from vq_job in its log; on the standby, every
#      vq function a client calls that writes (enqueue, publish, cancel, consumer calls and
#      replies, configuration, registration, grants, redrive, reassign) fails with SQLSTATE
#      25006 (read_only_sql_transaction), "<function> cannot run on a hot standby" and a hint
#      to connect to the primary;
#    - promotion: jobs enqueued on the primary in a queue paused before the base backup are
#      replicated (the primary never runs them); the standby is promoted, the queue is
#      resumed there; its executors appear and run every job once, within a bound; the
#      effects exist on the promoted server only. Timings are printed;
#    - a job the primary was running at promotion time is an orphan there: INTERRUPTED (claimed on the earlier timeline; no attempt consumed) and run
#      again on the promoted server (the old primary, still up, completes its own copy).
#   The primary keeps running throughout; its pg_hba.conf is restored if it was changed.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "${VQ_REPO_ROOT:?}/scripts/lib.sh"

: "${VQ_CLUSTER_DATA:?}" "${VQ_PG_BIN:?}"

SB_DIR=""            # standby home (data dir, socket dir, log)
SB_DATA="" SB_SOCK="" SB_PORT="" SB_LOG=""
HBA="$VQ_CLUSTER_DATA/pg_hba.conf"
HBA_BACKUP=""        # set when we added a replication line to the primary's pg_hba.conf
HELD_QUEUE=sb_held
P_HOST="$PGHOST" P_PORT="$PGPORT"   # the primary (a failure inside `sb ...` exits with the standby's)

on_exit() {
    local rc=$?
    set +e
    export PGHOST="$P_HOST" PGPORT="$P_PORT"
    if [[ -n "$SB_DATA" && -f "$SB_DATA/postmaster.pid" ]]; then
        vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$SB_DATA" -m immediate -w -t 30 stop >/dev/null 2>&1
    fi
    if ((rc != 0)) && [[ -n "$SB_LOG" && -s "$SB_LOG" ]]; then
        echo "----- last lines of the standby's log ($SB_LOG) -----" >&2
        tail -n 30 "$SB_LOG" >&2
    fi
    [[ -n "$SB_DIR" && "$SB_DIR" == /tmp/vq_standby.* ]] && rm -rf "$SB_DIR"
    if [[ -n "$HBA_BACKUP" ]]; then
        cat "$HBA_BACKUP" >"$HBA" && rm -f "$HBA_BACKUP"
        q "SELECT pg_reload_conf()" >/dev/null 2>&1
    fi
    # The jobs held on the primary: cancel them, so nothing is left for its executors.
    q "SELECT count(vq_cancel(execution_id)) FROM vq.job WHERE queue = '$HELD_QUEUE' AND state = 'ENQUEUED'" \
        >/dev/null 2>&1
    q "SELECT vq_resume_queue('$HELD_QUEUE')" >/dev/null 2>&1
    cleanup_configs
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# sb CMD ARGS...: run a helper (q, wait_for, assert_stays ...) against the standby.
sb() { PGHOST="$SB_SOCK" PGPORT="$SB_PORT" "$@"; }

# wait_replayed: the standby has replayed everything the primary has written so far.
wait_replayed() {
    local lsn
    lsn="$(q "SELECT pg_current_wal_lsn()")"
    sb wait_for "SELECT pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn" 10 "standby replay up to $lsn"
}

workers_sql="SELECT count(*) FILTER (WHERE backend_type = 'vq_job launcher') || ' launcher, ' ||
                    count(*) FILTER (WHERE backend_type = 'vq_job executor') || ' executors'
               FROM pg_stat_activity"

# ---- primary: objects --------------------------------------------------------------------
log "setup on the primary: queues, effects table, handler"
wl="$(q "SELECT current_setting('wal_level')")"
[[ "$wl" == replica || "$wl" == logical ]] || fail "the primary needs wal_level replica or logical, found $wl"
PRIMARY_PORT="$(q "SELECT current_setting('port')")"
qs >/dev/null <<SQL
SELECT vq_create_queue('sb_live', sleep_delay_ms => 200);
SELECT vq_create_queue('$HELD_QUEUE', sleep_delay_ms => 200, max_concurrent_jobs => 50);
-- paused before the base backup: the primary never runs these jobs, the standby inherits the pause
SELECT vq_pause_queue('$HELD_QUEUE');
-- one row per execution, naming the server (by port) that ran it
CREATE TABLE effects (execution_id uuid NOT NULL, port int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION h_effect(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    INSERT INTO public.effects (execution_id, port) VALUES (c.execution_id, current_setting('port')::int);
END \$\$;
SELECT vq_register_handler('effect', 'h_effect(jsonb, vq.job_context)', 'sb_live');
-- the first attempt takes 5 s (still RUNNING on the primary when the standby is promoted)
CREATE FUNCTION h_slow(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    IF c.attempt_number = 0 THEN
        PERFORM pg_sleep(5);
    END IF;
    INSERT INTO public.effects (execution_id, port) VALUES (c.execution_id, current_setting('port')::int);
END \$\$;
SELECT vq_register_handler('slow', 'h_slow(jsonb, vq.job_context)', 'sb_live');
SQL
wait_for "SELECT count(*) = 2 FROM pg_stat_activity
           WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 \
    "the primary's 2 executors in $PGDATABASE"

# ---- primary: a replication entry in pg_hba.conf -----------------------------------------
if ! grep -Eq '^[[:space:]]*local[[:space:]]+replication[[:space:]]+all[[:space:]]+trust([[:space:]]|$)' "$HBA"; then
    log "adding 'local replication all trust' to the primary's pg_hba.conf (removed at the end)"
    HBA_BACKUP="$(mktemp /tmp/vq_standby_hba.XXXXXX)"
    cp "$HBA" "$HBA_BACKUP"
    printf 'local replication all trust\n' >>"$HBA"
    q "SELECT pg_reload_conf()" >/dev/null
    wait_for "SELECT count(*) > 0 FROM pg_hba_file_rules WHERE 'replication' = ANY (database) AND type = 'local'" \
        10 "the replication entry in pg_hba_file_rules"
fi

# ---- the standby -------------------------------------------------------------------------
SB_DIR="$(mktemp -d /tmp/vq_standby.XXXXXX)"
chown postgres:postgres "$SB_DIR"
chmod 700 "$SB_DIR"
SB_DATA="$SB_DIR/data" SB_SOCK="$SB_DIR/sock" SB_LOG="$SB_DIR/standby.log"
SB_PORT="$(vq_free_port)"
mkdir "$SB_SOCK"
chown postgres:postgres "$SB_SOCK"
chmod 755 "$SB_DIR" "$SB_SOCK"   # the socket must be reachable by this (root) client
log "pg_basebackup -R into $SB_DATA (standby port $SB_PORT)"
vq_as_pg "$VQ_PG_BIN/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$SB_DATA" \
    -R -X stream -c fast >"$SB_DIR/basebackup.log" 2>&1 ||
    { cat "$SB_DIR/basebackup.log" >&2; fail "pg_basebackup failed"; }
# later lines win: postgresql.auto.conf is read after postgresql.conf
cat >>"$SB_DATA/postgresql.auto.conf" <<CONF
# ---- worker_standby.sh: the standby's own port and socket ----
port = $SB_PORT
unix_socket_directories = '$SB_SOCK'
listen_addresses = ''
hot_standby = on
CONF
[[ -f "$SB_DATA/standby.signal" ]] || fail "pg_basebackup -R wrote no standby.signal"
vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$SB_DATA" -l "$SB_LOG" -w -t 60 start >/dev/null ||
    fail "the standby did not start (see $SB_LOG)"
assert_eq t "$(sb q "SELECT pg_is_in_recovery()")" "the standby is in recovery"
sb wait_for "SELECT status = 'streaming' FROM pg_stat_wal_receiver" 15 "the standby streaming from the primary"
preload_sql="SELECT 'vq_job' = ANY (string_to_array(replace(current_setting('shared_preload_libraries'), ' ', ''), ','))"
[[ "$(sb q "$preload_sql")" == t ]] ||
    fail "the standby does not preload vq_job (shared_preload_libraries = '$(sb q "SHOW shared_preload_libraries")')"
sb wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'" 10 \
    "the vq_job launcher running on the standby"

# ---- idle on the standby while the primary works -----------------------------------------
log "standby idle for 3 s while the primary runs jobs"
ids="$(q "SELECT string_agg(quote_literal(id), ',') FROM (
            SELECT vq_enqueue('effect', '{}') AS id
            UNION ALL SELECT vq_enqueue('effect', '{}', run_at => clock_timestamp() + interval '1 s')
            UNION ALL SELECT vq_enqueue('effect', '{}', run_at => clock_timestamp() + interval '2 s')) s")"
sb assert_stays "$workers_sql" 3 "vq_job workers on the standby (must be the launcher only)"
assert_eq "1 launcher, 0 executors" "$(sb q "$workers_sql")" "vq_job workers on the standby"
wait_for "SELECT count(*) = 3 FROM vq.job WHERE execution_id IN ($ids) AND state = 'COMPLETED'" 10 \
    "the 3 jobs completed on the primary"
wait_replayed
live_check="SELECT count(*) || ' jobs COMPLETED, ' ||
                   (SELECT count(*) FROM effects WHERE execution_id IN ($ids)) || ' effects, ' ||
                   (SELECT count(*) FROM effects WHERE execution_id IN ($ids) AND port = $PRIMARY_PORT) || ' by the primary, ' ||
                   (SELECT count(DISTINCT execution_id) FROM effects WHERE execution_id IN ($ids)) || ' distinct'
              FROM vq.job WHERE execution_id IN ($ids) AND state = 'COMPLETED'"
want="3 jobs COMPLETED, 3 effects, 3 by the primary, 3 distinct"
assert_eq "$want" "$(q "$live_check")" "jobs run by the primary, seen on the primary"
assert_eq "$want" "$(sb q "$live_check")" "jobs run by the primary, seen on the standby"
assert_eq 0 "$(sb q "SELECT count(*) FROM vq.running_jobs")" "vq.running_jobs on the standby"
if grep -E 'vq_job' "$SB_LOG" | grep -Eq 'ERROR|FATAL|PANIC'; then
    grep -E 'vq_job' "$SB_LOG" | grep -E 'ERROR|FATAL|PANIC' | head -n 5 >&2
    fail "the standby's log has vq_job errors"
fi
# the standby is read-only: every vq function a client calls that writes fails cleanly, with
# SQLSTATE 25006 (read_only_sql_transaction) and vq's own message and hint
standby_calls=(
    "vq_enqueue|SELECT vq_enqueue('effect', '{}')"
    "vq_enqueue_in|SELECT vq_enqueue_in('effect', '{}', '1 minute')"
    "vq_enqueue_many|SELECT vq_enqueue_many('effect', ARRAY['{}'::jsonb])"
    "vq_outbox_publish|SELECT vq_outbox_publish('effect', '{}')"
    "vq_outbox_publish_to|SELECT vq_outbox_publish_to('NOTIFY', 'sb_channel', '{}')"
    "vq_cancel|SELECT vq_cancel(gen_random_uuid())"
    "vq_take_jobs|SELECT * FROM vq_take_jobs('{effect}')"
    "vq_take_jobs|SELECT * FROM vq_take_jobs('{effect}', 10, interval '1 minute')"
    "vq_reply_jobs|SELECT * FROM vq_reply_jobs(ARRAY[gen_random_uuid()], '{0}')"
    "vq_reply_jobs|SELECT * FROM vq_reply_jobs(ARRAY[gen_random_uuid()], '{0}', '{fail}', '{x}')"
    "vq_extend_leases|SELECT * FROM vq_extend_leases(ARRAY[gen_random_uuid()], '{0}')"
    "vq_log_jobs|SELECT vq_log_jobs(ARRAY[gen_random_uuid()], '{0}', '{INFO}', '{x}')"
    "vq_progress_jobs|SELECT vq_progress_jobs(ARRAY[gen_random_uuid()], '{0}', '{10}', '{1}', '{0}')"
    "vq_pull|SELECT * FROM vq_pull('effect')"
    "vq_complete|SELECT vq_complete(gen_random_uuid())"
    "vq_fail|SELECT vq_fail(gen_random_uuid(), 'x')"
    "vq_register_handler|SELECT vq_register_handler('sb_x', 'h_effect(jsonb, vq.job_context)')"
    "vq_register_notify_handler|SELECT vq_register_notify_handler('sb_x', 'sb_channel')"
    "vq_register_handlers|SELECT vq_register_handlers('[]')"
    "vq_unregister_handler|SELECT vq_unregister_handler('effect')"
    "vq_create_queue|SELECT vq_create_queue('sb_x')"
    "vq_alter_queue|SELECT vq_alter_queue('sb_live', instances => 2)"
    "vq_drop_queue|SELECT vq_drop_queue('sb_live')"
    "vq_pause_queue|SELECT vq_pause_queue('sb_live')"
    "vq_resume_queue|SELECT vq_resume_queue('$HELD_QUEUE')"
    "vq_set_contract_override|SELECT vq_set_contract_override('effect', max_attempts => 2)"
    "vq_drop_contract_override|SELECT vq_drop_contract_override('effect')"
    "vq_configure|SELECT vq_configure('{}')"
    "vq_grant_consumer|SELECT vq_grant_consumer('effect', 'postgres')"
    "vq_revoke_consumer|SELECT vq_revoke_consumer('effect', 'postgres')"
    "vq_grant_producer|SELECT vq_grant_producer('effect', 'postgres')"
    "vq_revoke_producer|SELECT vq_revoke_producer('effect', 'postgres')"
    "vq_grant_queue|SELECT vq_grant_queue('sb_live', 'postgres')"
    "vq_revoke_queue|SELECT vq_revoke_queue('sb_live', 'postgres')"
    "vq_register_destination|SELECT vq_register_destination('sb.x', 'h_effect(jsonb, vq.job_context)')"
    "vq_unregister_destination|SELECT vq_unregister_destination('sb.x')"
    "vq_register_interceptor|SELECT vq_register_interceptor('sb_x', 'h_effect(jsonb, vq.job_context)')"
    "vq_unregister_interceptor|SELECT vq_unregister_interceptor('sb_x')"
    "vq_register_transition_listener|SELECT vq_register_transition_listener('sb_x', channel => 'sb_channel')"
    "vq_unregister_transition_listener|SELECT vq_unregister_transition_listener('sb_x')"
    "vq_redrive|SELECT vq_redrive(gen_random_uuid())"
    "vq_redrive|SELECT vq_redrive(handler => 'effect')"
    "vq_reassign_jobs|SELECT vq_reassign_jobs('postgres', 'postgres')"
)
for call in "${standby_calls[@]}"; do
    fn="${call%%|*}" sql="${call#*|}"
    err="$(sb psql -XAtq -v ON_ERROR_STOP=1 -v VERBOSITY=verbose -c "$sql" 2>&1)" &&
        fail "$sql on the standby succeeded: $err"
    [[ "$err" == *"ERROR:  25006: $fn cannot run on a hot standby"* && "$err" == *"HINT:  Connect to the primary server"* ]] ||
        fail "$sql on the standby: expected SQLSTATE 25006 with \"$fn cannot run on a hot standby\" and a hint to connect to the primary, got: $err"
done
# ... and every VOLATILE SECURITY DEFINER PL/pgSQL function of the install script (the ones
# that write as the owner; one that only reads is STABLE) calls vq.require_writable
assert_eq "" "$(sb q "SELECT string_agg(p.oid::regprocedure::text, ', ')
                      FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                       AND d.deptype = 'e' JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
                     WHERE p.prosecdef AND p.provolatile = 'v'
                       AND p.prolang = (SELECT oid FROM pg_language WHERE lanname = 'plpgsql')
                       AND p.prosrc NOT LIKE '%vq.require_writable(%'")" \
    "VOLATILE SECURITY DEFINER plpgsql functions that do not call vq.require_writable"
log "on the standby, ${#standby_calls[@]} writing calls fail with 25006 in vq's words"

# ---- a job RUNNING on the primary at promotion time ---------------------------------------
log "a 5 s job RUNNING on the primary"
S="$(q "SELECT vq_enqueue('slow', '{}')")"
wait_for "SELECT state = 'RUNNING' FROM vq.job WHERE execution_id = '$S'" 5 "job $S RUNNING on the primary"

# ---- jobs for the promoted server, held on the primary -----------------------------------
N=20
log "enqueue $N due jobs in the paused queue $HELD_QUEUE on the primary; wait for the standby"
q "SELECT cardinality(vq_enqueue_many('effect', array_agg(jsonb_build_object('i', g)), queue => '$HELD_QUEUE'))
     FROM generate_series(1, $N) g" >/dev/null
wait_replayed
sb wait_for "SELECT count(*) = $N FROM vq.job WHERE queue = '$HELD_QUEUE' AND state = 'ENQUEUED'" 10 \
    "the $N held jobs replicated to the standby"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job WHERE queue = '$HELD_QUEUE' AND state <> 'ENQUEUED'")" \
    "held jobs touched on the primary (queue paused)"
assert_eq "1 launcher, 0 executors" "$(sb q "$workers_sql")" "vq_job workers on the standby before promotion"
assert_eq RUNNING "$(sb q "SELECT state FROM vq.job WHERE execution_id = '$S'")" \
    "the slow job on the standby before promotion"

# ---- promotion -----------------------------------------------------------------------------
log "promote the standby"
t_promote="$(now_ms)"
vq_as_pg "$VQ_PG_BIN/pg_ctl" -D "$SB_DATA" -w -t 30 promote >/dev/null || fail "pg_ctl promote failed"
sb wait_for "SELECT NOT pg_is_in_recovery()" 10 "the standby out of recovery"
t_out="$(now_ms)"
sb q "SELECT vq_resume_queue('$HELD_QUEUE')" >/dev/null
t_resumed="$(now_ms)"
# (at least: a slow job there may have executors started on demand)
sb wait_for "SELECT count(*) >= 2 FROM pg_stat_activity
              WHERE backend_type = 'vq_job executor' AND datname = current_database()" 10 \
    "2 executors for $PGDATABASE on the promoted server"
t_exec="$(now_ms)"
sb wait_for "SELECT count(*) > 0 FROM vq.job WHERE queue = '$HELD_QUEUE' AND state = 'COMPLETED'" 10 \
    "a first held job completed on the promoted server"
t_first="$(now_ms)"
sb wait_for "SELECT count(*) = $N FROM vq.job WHERE queue = '$HELD_QUEUE' AND state = 'COMPLETED'" 10 \
    "all $N held jobs completed on the promoted server"
t_all="$(now_ms)"

held="SELECT execution_id FROM vq.job WHERE queue = '$HELD_QUEUE'"
assert_eq "$N effects, $N distinct, $N by port $SB_PORT" \
    "$(sb q "SELECT count(*) || ' effects, ' || count(DISTINCT execution_id) || ' distinct, ' ||
                    count(*) FILTER (WHERE port = $SB_PORT) || ' by port $SB_PORT'
               FROM effects WHERE execution_id IN ($held)")" \
    "effects of the held jobs on the promoted server"
assert_eq "$N" "$(sb q "SELECT count(*) FROM vq.job_transition
                         WHERE execution_id IN ($held) AND kind = 'COMPLETED' AND to_state = 'COMPLETED'")" \
    "COMPLETED transitions of the held jobs on the promoted server (one per job)"
assert_eq 0 "$(sb q "SELECT count(*) FROM vq.job_transition
                      WHERE execution_id IN ($held) AND kind NOT IN ('CLAIMED', 'COMPLETED')")" \
    "other transitions of the held jobs on the promoted server"
assert_eq 0 "$(q "SELECT count(*) FROM effects WHERE execution_id IN ($held)")" \
    "effects of the held jobs on the primary"
assert_eq "$N" "$(q "SELECT count(*) FROM vq.job WHERE queue = '$HELD_QUEUE' AND state = 'ENQUEUED'")" \
    "held jobs still ENQUEUED (paused) on the primary"

# The job the old primary was running is an orphan on the promoted server: claimed on the
# earlier timeline, so INTERRUPTED (RUNNING -> ENQUEUED, the attempt not consumed: a failover is
# not the job's doing) and run again there, still at attempt 0.
sb wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$S'" 10 \
    "the job left RUNNING by the old primary rescued and completed on the promoted server"
t_slow="$(now_ms)"
assert_eq "attempt 0, 1 INTERRUPTED RUNNING->ENQUEUED (attempt 0), 0 ABANDONED, 1 COMPLETED, 1 effect by port $SB_PORT" \
    "$(sb q "SELECT 'attempt ' || j.attempt_number
                    || ', ' || (SELECT count(*) FROM vq.job_transition t WHERE t.execution_id = j.execution_id
                                   AND kind = 'INTERRUPTED' AND from_state = 'RUNNING' AND to_state = 'ENQUEUED'
                                   AND t.attempt_number = 0
                                   AND t.error ~ '^interrupted by a failover') || ' INTERRUPTED RUNNING->ENQUEUED (attempt 0)'
                    || ', ' || (SELECT count(*) FROM vq.job_transition t WHERE t.execution_id = j.execution_id
                                   AND kind = 'ABANDONED') || ' ABANDONED'
                    || ', ' || (SELECT count(*) FROM vq.job_transition t WHERE t.execution_id = j.execution_id
                                   AND kind = 'COMPLETED') || ' COMPLETED'
                    || ', ' || (SELECT count(*) FROM effects e WHERE e.execution_id = j.execution_id
                                   AND port = $SB_PORT) || ' effect by port $SB_PORT'
               FROM vq.job j WHERE j.execution_id = '$S'")" \
    "the slow job on the promoted server"
wait_for "SELECT state = 'COMPLETED' FROM vq.job WHERE execution_id = '$S'" 10 "the slow job completed on the old primary"
assert_eq "attempt 0, 1 effect by port $PRIMARY_PORT" \
    "$(q "SELECT 'attempt ' || attempt_number || ', ' ||
                 (SELECT count(*) FROM effects e WHERE e.execution_id = j.execution_id AND port = $PRIMARY_PORT)
                 || ' effect by port $PRIMARY_PORT'
            FROM vq.job j WHERE execution_id = '$S'")" "the slow job on the old primary"

log "timings (ms after pg_ctl promote): out of recovery $((t_out - t_promote)), queue resumed $((t_resumed - t_promote)), executors up $((t_exec - t_promote)), first job completed $((t_first - t_promote)), all $N completed $((t_all - t_promote)), orphan rescued and completed $((t_slow - t_promote))"
log "PASS worker_standby"

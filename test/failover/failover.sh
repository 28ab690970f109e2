#!/usr/bin/env bash
# test/failover/failover.sh: vq_job on a pg_auto_failover formation, across planned switchovers
# and unplanned failovers, with producers writing all along.
#
#   A monitor and two nodes on this machine (test/failover/lib.sh), vq_job preloaded on both
#   nodes, the extension created in database `app` on the primary (it replicates). Producers
#   (FO_PRODUCERS bash loops, one psql per transaction) connect with
#   `host=localhost,localhost port=P1,P2 target_session_attrs=read-write`, and in one
#   transaction enqueue a job and insert a ledger row naming it; a producer notes the keys
#   whose COMMIT returned (acknowledged) and the others (no writable server, or the connection
#   broke: such a transaction may have committed all the same). The handler (PL/pgSQL) inserts an effect row keyed by
#   (execution_id, attempt) with the port of the server that ran it. Most jobs are fast (run
#   inline), some take 1 s (claimed visibly, committed RUNNING first), some are due 2 s later.
#   A sampler per node records every 50 ms: in recovery?, default_transaction_read_only,
#   executor processes.
#
#   FO_EVENTS (default "switchover kill") in order, FO_LOAD_SECS of load before each and after
#   the last. Before each event FO_PINNED jobs of 6 s are started and seen RUNNING on the
#   primary and on the standby. An event is:
#     switchover  `pg_autoctl perform switchover`;
#     kill        SIGKILL of the primary's node: its pg_autoctl processes and its postmaster
#                 (killing the postmaster alone, its keeper would just restart it); the monitor
#                 fails over; then the killed node's pg_autoctl is started again;
#     kill_async  the same after the standby has left the write quorum (`pg_autoctl set node
#                 replication-quorum false`: asynchronous replication) for 1 s of load; the
#                 quorum is restored once the old primary is back.
#   After each: the old primary rejoins as a secondary.
#
#   Required, each checked:
#    - executors never run on a standby (no sample in recovery with an executor; the old
#      primary, back as a standby, has the launcher only for 3 s);
#    - on the new primary a job runs within 5 s of the moment it accepts writes (printed:
#      from the end of recovery too; pg_auto_failover keeps a promoted node read-only until
#      the old primary is known to be down: 2 s here, primary_demote_timeout);
#    - every enqueue acknowledged under synchronous replication is on the final primary (those
#      acknowledged while it was asynchronous may be lost: counted); every job in the ledger
#      completed, with exactly one effect row; no effect of an unknown job;
#    - the pinned jobs, RUNNING on the old primary, are rescued and completed on the new one.
#   Prints the figures per event and in total.
#
# Runs as root; needs the extension installed (make install) and installs
# postgresql-15-auto-failover if missing. `make failover` runs the long version; the suite
# runs the short one (test/scenarios/failover.sh). Knobs: FO_EVENTS, FO_LOAD_SECS (4),
# FO_PRODUCERS (2), FO_PINNED (3), FO_BASE_DIR (/tmp: where the formation's directory is made),
# FO_MONITOR_DEFAULTS=1 (pg_auto_failover's own detection and demote timeouts),
# FO_KEEP=1 (leave the formation's files).
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
. "$HERE/../../scripts/lib.sh"
export PGDATABASE=app PGUSER=postgres
unset PGHOST PGPORT
# shellcheck source=test/scenarios/lib/common.sh
. "$VQ_REPO_ROOT/test/scenarios/lib/common.sh"
# shellcheck source=test/failover/lib.sh
. "$HERE/lib.sh"

FO_EVENTS="${FO_EVENTS:-switchover kill}"
FO_LOAD_SECS="${FO_LOAD_SECS:-4}"
FO_PRODUCERS="${FO_PRODUCERS:-2}"
FO_PINNED="${FO_PINNED:-3}"
RUN_BOUND_MS=5000            # a job runs on the new primary within this of its first write
BG_PIDS=()                   # samplers and producers
PRODUCER_PIDS=()

# ---- setup and teardown ------------------------------------------------------------------
on_exit() {
    local rc=$?
    set +e
    stop_background
    fo_stop_all
    if ((rc != 0)) && [[ -n "$FO_DIR" ]]; then
        local f n logs=() files=()
        # pg_autoctl's logs, then each server's own (startup, and the last file of its log dir)
        for n in node1 node2 monitor; do
            logs=("$FO_DIR/$n"/log/*.log)
            files+=("$FO_DIR/$n.log" "$FO_DIR/$n/startup.log" "${logs[-1]}")
        done
        for f in "${files[@]}"; do
            [[ -s "$f" ]] || continue
            echo "----- last lines of $f -----" >&2
            tail -n 15 "$f" >&2
        done
    fi
    if [[ "${FO_KEEP:-}" == 1 || -z "$FO_DIR" ]]; then
        [[ -n "$FO_DIR" ]] && echo "FO_KEEP=1: files kept in $FO_DIR"
    else
        rm -rf "$FO_DIR"
    fi
    exit "$rc"
}

# stop_background: every background loop of ours, with its children (psql, sleep).
stop_background() {
    local pid
    [[ -n "$FO_DIR" ]] && touch "$FO_DIR/stop"
    for pid in "${BG_PIDS[@]}"; do
        # shellcheck disable=SC2046  # one pid per word
        kill -TERM $(fo_pids ppid "$pid") "$pid" 2>/dev/null || true
    done
    for pid in "${BG_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    BG_PIDS=()
    return 0
}

ensure_package() {
    [[ -x /usr/bin/pg_autoctl ]] && return 0
    [[ "${VQ_SKIP_DEPS:-}" == 1 ]] && fail "pg_autoctl is missing (apt-get install postgresql-15-auto-failover)"
    vq_log "failover: installing postgresql-15-auto-failover"
    apt-get -o DPkg::Lock::Timeout=600 update >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
        --no-install-recommends postgresql-15-auto-failover </dev/null >/dev/null
}

# sampler NAME: "epoch_ms in_recovery default_transaction_read_only executors sync_off" every
# 50 ms (sync_off: synchronous_standby_names is empty, the node's commits wait for no standby).
sampler() {
    local name="$1"
    while [[ ! -e "$FO_DIR/stop" ]]; do
        printf '%s\n' "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint, pg_is_in_recovery(),
                              current_setting('default_transaction_read_only'),
                              count(*) FILTER (WHERE backend_type = 'vq_job executor'),
                              current_setting('synchronous_standby_names') = ''
                         FROM pg_stat_activity" '\watch 0.05' |
            psql "host=localhost port=${FO_PORTS[$name]} dbname=app user=postgres connect_timeout=1" \
                -XAtq -F ' ' -f - >>"$FO_DIR/sample.$name" 2>/dev/null || true
        sleep 0.05
    done
}

# producer ID: enqueue + ledger row per transaction until FO_DIR/stop_producers exists. An
# acknowledged key is noted with the times before and after its transaction and the port of
# the server that acknowledged it.
producer() {
    local id="$1" i=0 k handler payload run_at out t_start
    local conn="host=localhost,localhost port=${FO_PORTS[node1]},${FO_PORTS[node2]} dbname=app
                user=postgres target_session_attrs=read-write connect_timeout=2"
    while [[ ! -e "$FO_DIR/stop_producers" ]]; do
        i=$((i + 1))
        k="p$id.$i" handler=fo_fast payload='{}' run_at=NULL
        ((i % 20 == 0)) && handler=fo_slow payload='{"sleep": 1}'
        ((i % 7 == 0)) && run_at="clock_timestamp() + interval '2 s'"
        t_start="$(now_ms)"
        # acknowledged = psql succeeded and printed the port (a connection ended by the server
        # may still exit 0 with only its FATAL message)
        if out="$(timeout 30 psql "$conn" -XAtq -v ON_ERROR_STOP=1 \
                -c "INSERT INTO ledger (k, execution_id)
                    VALUES ('$k', vq_enqueue('$handler', '$payload', $run_at))
                    RETURNING current_setting('port')" 2>"$FO_DIR/stderr.$id")" && [[ "$out" =~ ^[0-9]+$ ]]; then
            echo "$k $t_start $(now_ms) $out" >>"$FO_DIR/acked.$id"
        else
            out="$out $(cat "$FO_DIR/stderr.$id" 2>/dev/null)"
            printf '%s %s %s\n' "$k" "$(now_ms)" "${out//$'\n'/ }" >>"$FO_DIR/doubt.$id"
            sleep 0.1
        fi
    done
}

start_background() {
    local i n
    for n in node1 node2; do
        sampler "$n" &
        BG_PIDS+=($!)
    done
    for ((i = 1; i <= FO_PRODUCERS; i++)); do
        producer "$i" &
        BG_PIDS+=($!)
        PRODUCER_PIDS+=($!)
    done
}

# wait_formation PRIMARY SECONDARY SECS: the monitor has both nodes settled in those roles.
# A node created or rejoining by base backup waits for a spread checkpoint on the primary,
# minutes on an idle server: an immediate CHECKPOINT there every 2 s ends that wait.
wait_formation() {
    local want deadline=$((SECONDS + $3)) next=0
    want="$(printf '%s\n' "$1:primary/primary" "$2:secondary/secondary" | sort | paste -sd ' ')"
    while [[ "$(fo_states 2>/dev/null || true)" != "$want" ]]; do
        ((SECONDS < deadline)) || fail "formation not settled as [$want] in $3 s (now: [$(fo_states 2>&1)])"
        if ((SECONDS >= next)); then
            fo_on "$1" psql -XAtq -d postgres -c CHECKPOINT >/dev/null 2>&1 || true
            next=$((SECONDS + 2))
        fi
        sleep 0.1
    done
}

# step MSG: a step marker with the seconds since the start.
step() { log "[${SECONDS}s] $*"; }

other() { [[ "$1" == node1 ]] && echo node2 || echo node1; }

# ---- the formation -------------------------------------------------------------------------
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
ensure_package
fo_init
step "formation in $FO_DIR: monitor $FO_MONITOR_PORT, node1 ${FO_PORTS[node1]}, node2 ${FO_PORTS[node2]}"
fo_start_monitor
fo_start_node node1
fo_wait_states "node1:single/single" 60
fo_on node1 wait_for "SELECT 'vq_job' = current_setting('shared_preload_libraries')" 5 "node1 preloading vq_job"

step "setup in database app on node1: extension, queue, ledger, effects, handlers"
fo_on node1 qs >/dev/null <<'SQL'
CREATE EXTENSION vq_job;
SELECT vq_create_queue('fo', sleep_delay_ms => 200, max_concurrent_jobs => 50);
-- one row per enqueue, written in the enqueuing transaction
CREATE TABLE ledger (k text PRIMARY KEY, execution_id uuid NOT NULL UNIQUE,
                     at timestamptz NOT NULL DEFAULT clock_timestamp());
-- one row per run of a job: a second run of the same attempt would fail on the key, a run of
-- another attempt adds a row
CREATE TABLE effects (execution_id uuid NOT NULL, attempt int NOT NULL, port int NOT NULL,
                      at timestamptz NOT NULL DEFAULT clock_timestamp(),
                      PRIMARY KEY (execution_id, attempt));
CREATE FUNCTION fo_run(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p ? 'sleep' THEN
        PERFORM pg_sleep((p->>'sleep')::float8);
    END IF;
    INSERT INTO public.effects (execution_id, attempt, port)
    VALUES (c.execution_id, c.attempt_number, current_setting('port')::int);
END $$;
-- the same function under two names: the fast one runs inline, the slow one visibly
SELECT vq_register_handler('fo_fast', 'fo_run(jsonb, vq.job_context)', 'fo');
SELECT vq_register_handler('fo_slow', 'fo_run(jsonb, vq.job_context)', 'fo');
SQL
fo_on node1 wait_for "SELECT count(*) >= 2 FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                       AND datname = 'app'" 10 "node1's executors in app"

start_background
fo_start_node node2
wait_formation node1 node2 90
fo_on node2 wait_for "SELECT pg_is_in_recovery() AND 'vq_job' = current_setting('shared_preload_libraries')" 10 \
    "node2 a hot standby preloading vq_job"
fo_on node2 wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'" 10 \
    "the vq_job launcher on node2"

# ---- events ----------------------------------------------------------------------------------
workers_sql="SELECT count(*) FILTER (WHERE backend_type = 'vq_job launcher') || ' launcher, ' ||
                    count(*) FILTER (WHERE backend_type = 'vq_job executor') || ' executors'
               FROM pg_stat_activity"
# first_sample NAME AFTER_MS WHAT: the time of the node's first sample after AFTER_MS where it
# is out of recovery (promoted), also accepting writes (writable), or has executors (executors).
first_sample() {
    awk -v after="$2" -v what="$3" '
        $1 > after && NF == 5 && $2 == "f" &&
        (what == "promoted" || (what == "writable" && $3 == "off") || (what == "executors" && $4 > 0)) {
            print $1; exit
        }' "$FO_DIR/sample.$1" 2>/dev/null
}
# readonly_errors NAME: lines of the node's server logs where a statement failed as read-only.
readonly_errors() {
    cat "$FO_DIR/$1"/log/*.log 2>/dev/null | grep -c 'in a read-only transaction' || true
}
SUMMARY=()

event() { # NUMBER KIND
    local no="$1" kind="$2" old new pins t0 t_async t_promoted t_writable t_exec t_run t_rescue ro_before rescued
    old="$(fo_primary)"
    new="$(other "$old")"
    step "event $no: $kind; $old (port ${FO_PORTS[$old]}) is the primary"
    pins="$(fo_on "$old" q "WITH j AS (SELECT 'pin$no.' || g AS k, vq_enqueue('fo_slow', '{\"sleep\": 6}') AS id
                                        FROM generate_series(1, $FO_PINNED) g)
                             INSERT INTO ledger (k, execution_id) SELECT k, id FROM j
                             RETURNING quote_literal(execution_id)" | paste -sd ,)"
    fo_on "$old" wait_for "SELECT count(*) = $FO_PINNED FROM vq.job WHERE execution_id IN ($pins) AND state = 'RUNNING'" \
        10 "the $FO_PINNED pinned jobs RUNNING on $old"
    fo_on "$new" wait_for "SELECT count(*) = $FO_PINNED FROM vq.job WHERE execution_id IN ($pins) AND state = 'RUNNING'" \
        10 "the $FO_PINNED pinned jobs RUNNING on the standby $new"
    ro_before="$(readonly_errors "$new")"
    if [[ "$kind" == kill_async ]]; then
        # the standby leaves the write quorum: the primary's commits stop waiting for it
        t_async="$(now_ms)"
        fo_autoctl set node replication-quorum false --pgdata "$FO_DIR/$new" >>"$FO_DIR/set.$no.log" 2>&1 ||
            { cat "$FO_DIR/set.$no.log" >&2; fail "pg_autoctl set node replication-quorum false failed"; }
        fo_on "$old" wait_for "SELECT current_setting('synchronous_standby_names') = ''" 30 \
            "asynchronous replication from $old"
        sleep 1    # commits acknowledged without the standby
    fi

    t0="$(now_ms)"
    case "$kind" in
        switchover)
            fo_autoctl perform switchover --pgdata "$FO_DIR/$old" >"$FO_DIR/switchover.$no.log" 2>&1 ||
                { tail -n 20 "$FO_DIR/switchover.$no.log" >&2; fail "pg_autoctl perform switchover failed"; } ;;
        kill | kill_async)
            fo_kill_node "$old" ;;
        *) fail "unknown event $kind" ;;
    esac
    fo_on "$new" wait_for "SELECT NOT pg_is_in_recovery() AND current_setting('default_transaction_read_only') = 'off'" \
        60 "$new promoted and accepting writes"
    step "$new accepts writes"
    if [[ "$kind" == kill* ]]; then
        fo_start_node "$old"
    fi
    wait_formation "$new" "$old" 120
    step "$old is a secondary of $new"
    if [[ "$kind" == kill_async ]]; then
        # commits acknowledged by the old primary since t_async may be lost; the end checks
        # all others
        echo "$t_async $(now_ms) ${FO_PORTS[$old]}" >>"$FO_DIR/async_windows"
        fo_autoctl set node replication-quorum true --pgdata "$FO_DIR/$new" >>"$FO_DIR/set.$no.log" 2>&1 ||
            { cat "$FO_DIR/set.$no.log" >&2; fail "pg_autoctl set node replication-quorum true failed"; }
        fo_on "$new" wait_for "SELECT current_setting('synchronous_standby_names') <> ''" 30 \
            "synchronous replication from $new again"
    fi

    # the times, from the samples of the new primary and its effect rows
    t_promoted="$(first_sample "$new" "$t0" promoted)"
    t_writable="$(first_sample "$new" "$t0" writable)"
    t_exec="$(first_sample "$new" "$t0" executors)"
    fo_on "$new" wait_for "SELECT count(*) > 0 FROM effects WHERE port = ${FO_PORTS[$new]}
                            AND at > to_timestamp($t0 / 1000.0)" 30 "a job run on $new after the $kind"
    t_run="$(fo_on "$new" q "SELECT (extract(epoch FROM min(at)) * 1000)::bigint FROM effects
                              WHERE port = ${FO_PORTS[$new]} AND at > to_timestamp($t0 / 1000.0)")"
    [[ -n "$t_promoted" && -n "$t_writable" ]] || fail "no sample of $new out of recovery (promoted '$t_promoted', writable '$t_writable')"
    ((t_run - t_writable <= RUN_BOUND_MS)) ||
        fail "first job on $new $((t_run - t_writable)) ms after it accepted writes (bound $RUN_BOUND_MS ms)"

    # the old primary is a standby now, and idle
    fo_on "$old" wait_for "SELECT pg_is_in_recovery()" 10 "$old a standby"
    fo_on "$old" wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'" 10 \
        "the vq_job launcher on $old"
    fo_on "$old" assert_stays "$workers_sql" 3 "vq_job workers on $old, a standby again"
    assert_eq "1 launcher, 0 executors" "$(fo_on "$old" q "$workers_sql")" "vq_job workers on $old, a standby again"

    # the pinned jobs: RUNNING on the old primary, completed on the new one, one effect each
    fo_on "$new" wait_for "SELECT count(*) = $FO_PINNED FROM vq.job WHERE execution_id IN ($pins) AND state = 'COMPLETED'" \
        40 "the pinned jobs rescued and completed on $new"
    assert_eq "$FO_PINNED effects, all by port ${FO_PORTS[$new]}" \
        "$(fo_on "$new" q "SELECT count(*) || ' effects, all by port ' || string_agg(DISTINCT port::text, ',')
                           FROM effects WHERE execution_id IN ($pins)")" "effects of the pinned jobs of event $no"
    rescued="$(fo_on "$new" q "SELECT count(*) FILTER (WHERE kind = 'ABANDONED') || ' abandoned (attempt consumed), ' ||
                                      count(*) FILTER (WHERE kind = 'INTERRUPTED') || ' interrupted'
                                 FROM vq.job_transition WHERE execution_id IN ($pins)")"
    t_rescue="$(fo_on "$new" q "SELECT (extract(epoch FROM min(at)) * 1000)::bigint FROM vq.job_transition
                                 WHERE execution_id IN ($pins) AND kind IN ('ABANDONED', 'INTERRUPTED')")"

    echo "$no $kind $old $new t0 $t0 promoted $t_promoted writable $t_writable" >>"$FO_DIR/events"
    SUMMARY+=("event $no $kind $old->$new: promoted $((t_promoted - t0)) ms after the trigger; writable +$((t_writable - t_promoted)) ms; executors up +$((${t_exec:-$t_run} - t_promoted)) ms; first job run +$((t_run - t_promoted)) ms after promotion = $((t_run - t_writable)) ms after writable; pinned $FO_PINNED rescued ($rescued) $((t_rescue - t_writable)) ms after writable; $(($(readonly_errors "$new") - ro_before)) read-only errors in $new's log; $old back as an idle standby")
    log "${SUMMARY[-1]}"
}

n=0
sleep "$FO_LOAD_SECS"    # load: the producers are running
for kind in $FO_EVENTS; do
    n=$((n + 1))
    event "$n" "$kind"
    sleep "$FO_LOAD_SECS"
done

# ---- the end: every acknowledged job there, every job run once ---------------------------------
step "stopping the producers; waiting for every job to finish"
touch "$FO_DIR/stop_producers"
for pid in "${PRODUCER_PIDS[@]}"; do
    wait "$pid" || true
done
primary="$(fo_primary)"
fo_on "$primary" wait_for "SELECT count(*) = 0 FROM vq.job_active" 60 "every job finished on $primary"
cat "$FO_DIR"/acked.* >"$FO_DIR/acked.all" 2>/dev/null || :
touch "$FO_DIR/async_windows"
# pg_auto_failover also turns synchronous replication off by itself, for a moment, while a
# standby (re)joins or is not healthy (wait_primary): the samples where a primary's
# synchronous_standby_names was empty are asynchronous windows too (50 ms margins)
for name in node1 node2; do
    awk -v port="${FO_PORTS[$name]}" '
        NF == 5 { async = ($2 == "f" && $5 == "t")
                  if (async && !open) { from = $1 - 50; open = 1 }
                  if (!async && open) { printf "%d %d %d\n", from, $1, port; open = 0 }
                  last = $1 }
        END { if (open) printf "%d %d %d\n", from, last + 50, port }' "$FO_DIR/sample.$name" >>"$FO_DIR/async_windows" 2>/dev/null || :
done
cut -d ' ' -f 1 "$FO_DIR"/doubt.* >"$FO_DIR/doubt.all" 2>/dev/null || :
figures="$(fo_on "$primary" qs <<SQL
CREATE TEMP TABLE acked (k text, start_ms bigint, end_ms bigint, port int);
CREATE TEMP TABLE doubt (k text);
CREATE TEMP TABLE async_window (from_ms bigint, to_ms bigint, port int);
\\copy acked FROM '$FO_DIR/acked.all' WITH (DELIMITER ' ')
\\copy doubt FROM '$FO_DIR/doubt.all'
\\copy async_window FROM '$FO_DIR/async_windows' WITH (DELIMITER ' ')
CREATE TEMP VIEW acked_async AS
    SELECT a.* FROM acked a
     WHERE EXISTS (SELECT 1 FROM async_window w
                    WHERE a.port = w.port AND a.start_ms <= w.to_ms AND a.end_ms >= w.from_ms);
CREATE TEMP VIEW lost AS
    SELECT a.*, a.k IN (SELECT k FROM acked_async) AS async
      FROM acked a WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.k = a.k);
SELECT (SELECT count(*) FROM acked),
       (SELECT count(*) FROM lost WHERE NOT async),
       (SELECT count(*) FROM acked_async),
       (SELECT count(*) FROM lost WHERE async),
       (SELECT count(*) FROM doubt),
       (SELECT count(*) FROM doubt d JOIN ledger l USING (k)),
       (SELECT count(*) FROM ledger),
       (SELECT count(*) FROM ledger l JOIN vq.job j USING (execution_id) WHERE j.state = 'COMPLETED'),
       (SELECT count(*) FROM ledger l
         WHERE (SELECT count(*) FROM effects e WHERE e.execution_id = l.execution_id) = 1),
       (SELECT count(*) FROM effects e
         WHERE NOT EXISTS (SELECT 1 FROM ledger l WHERE l.execution_id = e.execution_id)),
       (SELECT count(*) FROM vq.job_transition WHERE kind = 'FAILED'),
       (SELECT count(*) FROM vq.job_transition WHERE kind = 'ABANDONED'),
       (SELECT count(*) FROM vq.job_transition WHERE kind = 'INTERRUPTED'),
       (SELECT count(*) FROM vq.job WHERE attempt_number > 0);
SELECT 'lost: ' || k || ', acknowledged by port ' || port || ' between ' || start_ms || ' and ' || end_ms
       || CASE WHEN async THEN ' (asynchronous)' ELSE '' END
  FROM lost ORDER BY start_ms LIMIT 20;
SQL
)"
grep '^lost: ' <<<"$figures" || true
figures="$(head -n 1 <<<"$figures")"
IFS='|' read -r n_acked n_lost n_acked_async n_lost_async n_doubt n_doubt_in n_jobs n_completed n_once n_stray n_failed n_abandoned \
    n_interrupted n_later <<<"$figures"
totals="$n_acked enqueues acknowledged, $n_lost of them lost (of the $n_acked_async acknowledged by a primary while its"
totals+=" replication was asynchronous, until it was a standby again: $n_lost_async lost); $n_doubt not"
totals+=" acknowledged ($n_doubt_in of them committed all the same);"
totals+=" $n_jobs jobs, $n_completed completed, $n_once with exactly one effect, $n_stray stray effects;"
totals+=" transitions: $n_failed FAILED, $n_abandoned ABANDONED, $n_interrupted INTERRUPTED; $n_later jobs past attempt 0"
log "totals: $totals"
((n_lost == 0)) || sed 's/^/   event /' "$FO_DIR/events"
((n_acked > 0)) || fail "no enqueue was acknowledged"
assert_eq 0 "$n_lost" "acknowledged enqueues (under synchronous replication) missing on the final primary $primary"
# a failover is not the jobs' doing: the orphans are INTERRUPTED, no attempt is consumed
assert_eq "0 ABANDONED, 0 jobs past attempt 0" "$n_abandoned ABANDONED, $n_later jobs past attempt 0" \
    "attempts consumed by the failovers"
assert_eq "$n_jobs" "$n_completed" "jobs completed (of the jobs in the ledger)"
assert_eq "$n_jobs" "$n_once" "jobs with exactly one effect row"
assert_eq 0 "$n_stray" "effect rows of jobs not in the ledger"
assert_eq 0 "$n_failed" "FAILED transitions (handler errors)"

# executors never on a standby, by every sample of both nodes
read -r n_samples n_standby n_bad <<<"$(cat "$FO_DIR"/sample.* |
    awk 'NF == 5 { n++; if ($2 == "t") { s++; if ($4 > 0) b++ } } END { print n + 0, s + 0, b + 0 }')"
((n_standby > 0)) || fail "no sample was taken on a standby"
assert_eq 0 "$n_bad" "samples of a standby with a vq_job executor (of $n_standby in recovery)"

stop_background
log "figures"
printf '   %s\n' "${SUMMARY[@]}" "totals: $totals" "samples: $n_samples, $n_standby of a standby, $n_bad with an executor there"
log "PASS failover"

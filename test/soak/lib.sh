# shellcheck shell=bash
# test/soak/lib.sh — the chaos soak: producers, a NOTIFY consumer, faults, and the exact
# accounting at the end. Sourced by test/soak/soak.sh (10 minutes, its own cluster) and by
# test/scenarios/soak_short.sh (60 s, in the test suite's cluster), after
# test/scenarios/lib/common.sh and scripts/lib.sh, with PGDATABASE naming a database that has
# vq_job and VQ_CLUSTER_DIR / VQ_CLUSTER_DATA naming the cluster (it is stopped and started).
#
# The caller sets the server settings the soak relies on (vq.execution_timeout_ms = 3000,
# vq.shutdown_grace_ms = 1000, no retention, log_line_prefix with %b), then calls soak_run.
#
# Knobs (environment; the callers choose defaults):
#   SOAK_SECS           seconds of load and faults
#   SOAK_RATE           jobs/s of the bulk producers (direct, batch, outbox, future-dated)
#   SOAK_SPECIAL_TPS    transactions/s of the other producers (one job each: busy, failing,
#                       timing out, NOTIFY, cancelled)
#   SOAK_FAULTS         the fault kinds, each dealt once per round in random order (repeat a
#                       kind to deal it more often); every one is dealt at least once
#   SOAK_GAP_MS         "MIN MAX" pause between faults, in ms
#   SOAK_HOLD_SECS      how long the held snapshot is held
#   SOAK_FUTURE_SECS    future-dated jobs are due within this many seconds
#   SOAK_SETTLE_SECS    how long everything may take to settle after the load
#
# soak_run prints the accounting table and returns non-zero when a 'must' is violated (the
# jobs concerned are listed with their transitions, and the server log's errors printed).

SOAK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
SOAK_CONSUMER="${VQ_PG_BIN:-/usr/lib/postgresql/15/bin}/vq_consumer"

soak_epoch() { date +%s.%N; }

# soak_retry SQL: q, retried for up to 60 s (the server may be restarting after a fault).
soak_retry() {
    local i
    for ((i = 0; i < 300; i++)); do
        q "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    fail "soak: query failed for 60 s: $1"
}

# ---- producers ---------------------------------------------------------------------------
# Each producer transaction records the keys it enqueued or published in soak_produced, in
# the same transaction: whatever rolls back or dies with the server is not counted.

# _soak_enqueue_sql KIND HANDLER [RUN_AT]: one job, recorded with what vq_enqueue returned.
_soak_enqueue_sql() {
    printf "INSERT INTO soak_produced (k, kind, execution_id)
SELECT k, '%s', vq_enqueue('%s', jsonb_build_object('k', k), %s) FROM (SELECT gen_random_uuid() AS k) s;\n" \
        "$1" "$2" "${3:-NULL}"
}
# _soak_batch_sql KIND N: vq_enqueue_many of N jobs, each key recorded with its execution_id.
_soak_batch_sql() {
    printf "INSERT INTO soak_produced (k, kind, execution_id)
SELECT u.k, '%s', u.id
  FROM (SELECT array_agg(gen_random_uuid()) AS ks FROM generate_series(1, %d)) a,
       unnest(a.ks, vq_enqueue_many('soak_ok', ARRAY(SELECT jsonb_build_object('k', x)
                                                      FROM unnest(a.ks) WITH ORDINALITY AS t(x, o) ORDER BY o))) AS u(k, id);\n" \
        "$1" "$2"
}
# _soak_publish_sql KIND N CALL: N outbox rows; CALL uses k (the row's key).
_soak_publish_sql() {
    printf "INSERT INTO soak_produced (k, kind, outbox_id)
SELECT k, '%s', %s FROM (SELECT gen_random_uuid() AS k FROM generate_series(1, %d)) s;\n" "$1" "$3" "$2"
}

# soak_write_scripts: the pgbench scripts in $SOAK_TMP. Bulk jobs per transaction, by the
# weights below: direct 1 x10, batch 20 x4, outbox 10 x3, future 2 x2 -> 124 jobs per 22
# transactions (plus 2 rolled back and 1 of NOTIFY outbox rows).
SOAK_JOBS_PER_BULK_TX="124 / 22"
soak_write_scripts() {
    local d="$SOAK_TMP" future="clock_timestamp() + random() * interval '${SOAK_FUTURE_SECS} s'"
    { echo "BEGIN;"; _soak_enqueue_sql direct soak_ok; echo "COMMIT;"; } >"$d/direct.sql"
    { echo "BEGIN;"; _soak_batch_sql batch 20; echo "COMMIT;"; } >"$d/batch.sql"
    # rolled back on purpose: nothing of it may surface
    { echo "BEGIN;"; _soak_batch_sql batch 5; _soak_enqueue_sql direct soak_ok
      _soak_publish_sql outbox_job 2 "vq_outbox_publish('soak_ok', jsonb_build_object('k', k))"
      echo "ROLLBACK;"; } >"$d/rollback.sql"
    { echo "BEGIN;"
      _soak_publish_sql outbox_job 8 "vq_outbox_publish('soak_ok', jsonb_build_object('k', k))"
      _soak_publish_sql outbox_future 2 "vq_outbox_publish('soak_ok', jsonb_build_object('k', k), $future)"
      echo "COMMIT;"; } >"$d/outbox.sql"
    { echo "BEGIN;"
      _soak_publish_sql outbox_notify 2 "vq_outbox_publish_to('NOTIFY', 'soak_outbox', jsonb_build_object('k', k))"
      echo "COMMIT;"; } >"$d/outbox_notify.sql"
    { echo "BEGIN;"; _soak_enqueue_sql future soak_ok "$future"; _soak_enqueue_sql future soak_ok "$future"
      echo "COMMIT;"; } >"$d/future.sql"
    _soak_enqueue_sql busy soak_busy >"$d/busy.sql"
    _soak_enqueue_sql flaky soak_flaky >"$d/flaky.sql"
    _soak_enqueue_sql doomed soak_doomed >"$d/doomed.sql"
    _soak_enqueue_sql slow soak_slow >"$d/slow.sql"
    _soak_enqueue_sql notify soak_notify >"$d/notify.sql"
    # due in 2 to 4 s; the canceller cancels most of them first
    _soak_enqueue_sql cancel soak_ok "clock_timestamp() + interval '2 s' + random() * interval '2 s'" >"$d/cancel.sql"
}

# _soak_producer NAME TPS CLIENTS SCRIPT@WEIGHT...: pgbench at TPS transactions/s until the
# soak's end, started again whenever it ends early (a fault ends its sessions).
_soak_producer() {
    local name="$1" tps="$2" clients="$3" rest
    shift 3
    while [[ ! -e "$SOAK_TMP/stop.producers" ]]; do
        rest=$((${SOAK_END%.*} - $(date +%s)))
        ((rest >= 1)) || break
        if pg_isready -q 2>/dev/null; then
            pgbench -n -c "$clients" -j "$clients" -R "$tps" -T "$rest" "$@" >>"$SOAK_TMP/$name.log" 2>&1 || true
            echo run >>"$SOAK_TMP/$name.runs"
        fi
        sleep 0.1
    done
}
soak_producers_start() {
    local d="$SOAK_TMP" bulk_tps
    bulk_tps="$(awk -v r="$SOAK_RATE" "BEGIN { printf \"%d\", r / ($SOAK_JOBS_PER_BULK_TX) + 0.5 }")"
    (cd "$d" && _soak_producer bulk "$bulk_tps" 4 -f direct.sql@10 -f batch.sql@4 -f rollback.sql@2 \
        -f outbox.sql@3 -f outbox_notify.sql@1 -f future.sql@2) &
    SOAK_PIDS+=($!)
    (cd "$d" && _soak_producer special "$SOAK_SPECIAL_TPS" 2 -f busy.sql@12 -f flaky.sql@6 -f doomed.sql@4 \
        -f slow.sql@1 -f notify.sql@10 -f cancel.sql@5) &
    SOAK_PIDS+=($!)
    log "producers: bulk $bulk_tps transactions/s (~$SOAK_RATE jobs/s), special $SOAK_SPECIAL_TPS transactions/s"
}

# _soak_canceller: every second, vq_cancel most of the 'cancel' jobs still waiting.
_soak_canceller() {
    while [[ ! -e "$SOAK_TMP/stop.producers" ]]; do
        q "SELECT count(vq_cancel(j.execution_id)) FROM soak_produced p JOIN vq.job_active j USING (execution_id)
            WHERE p.kind = 'cancel' AND j.state = 'ENQUEUED' AND random() < 0.8" >/dev/null 2>&1 || true
        sleep 1
    done
}

# ---- the NOTIFY consumer -----------------------------------------------------------------
# Its command writes one effect row per run, retrying while the server restarts.
soak_write_consumer_command() {
    cat >"$SOAK_TMP/notify_cmd.sh" <<'EOF'
#!/bin/sh
cat >/dev/null
i=0
until psql -XAtq -v ON_ERROR_STOP=1 -c "INSERT INTO soak_effect (execution_id, attempt, fn)
        VALUES ('$VQ_EXECUTION_ID', $VQ_ATTEMPT, 'consumer')" >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -lt 150 ] || exit 1
    sleep 0.2
done
EOF
    chmod +x "$SOAK_TMP/notify_cmd.sh"
}
# _soak_consumer: vq_consumer, started again whenever it exits (killed or stopped).
_soak_consumer() {
    local pid
    while [[ ! -e "$SOAK_TMP/stop.consumer" ]]; do
        "$SOAK_CONSUMER" --dbname "host=$PGHOST port=$PGPORT user=$PGUSER dbname=$PGDATABASE application_name=soak_consumer" \
            --channel soak_jobs --handler soak_notify --batch 1 --poll-interval 1 \
            --pass-env PGHOST --pass-env PGPORT --pass-env PGUSER --pass-env PGDATABASE \
            -- "$SOAK_TMP/notify_cmd.sh" >>"$SOAK_TMP/consumer.log" 2>&1 &
        pid=$!
        echo "$pid" >"$SOAK_TMP/consumer.pid"
        wait "$pid" || true
        sleep 0.3
    done
}
soak_consumer_pid() { cat "$SOAK_TMP/consumer.pid" 2>/dev/null || true; }

# _soak_listener: a session LISTENing on the outbox's NOTIFY destination, connected again
# after every fault; psql prints the notifications it got after each statement, so it is
# sent an empty one every 100 ms, and a last one once the outbox has settled.
_soak_listener() {
    while [[ ! -e "$SOAK_TMP/stop.listener" ]]; do
        {
            echo "LISTEN soak_outbox;"
            while [[ ! -e "$SOAK_TMP/stop.listener" ]]; do
                echo "SELECT 1 WHERE false;"
                sleep 0.1
            done
            echo "SELECT 1 WHERE false;"
        } | PGAPPNAME=soak_listener psql -XAtq >>"$SOAK_TMP/listener.out" 2>&1 || true
        sleep 0.3
    done
}

# ---- the held snapshot -------------------------------------------------------------------
# _soak_hold SECS: a REPEATABLE READ transaction holds its snapshot for SECS seconds (taken
# again if a fault ends its session).
_soak_hold() {
    local end=$(($(date +%s) + $1)) rest
    while rest=$((end - $(date +%s))) && ((rest > 0)); do
        psql -XAtq -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM soak_produced" \
            -c "SELECT pg_sleep($rest)" -c "COMMIT" \
            -v application_name=soak_holder >/dev/null 2>&1 || sleep 0.5
    done
}

# ---- faults ------------------------------------------------------------------------------
# Each fault appends "kind|detail|t0|t1" to faults.tsv: [t0, t1] brackets the fault, from
# just before it until the server (if it went down) accepts connections again.
_soak_record() { printf '%s|%s|%s|%s\n' "$1" "$2" "$3" "$(soak_epoch)" >>"$SOAK_TMP/faults.tsv"; }

# _soak_back T0 BACKEND_TYPE: wait until the server accepts connections and a BACKEND_TYPE
# process started after T0 runs (the crash restart is over).
_soak_back() {
    wait_for "SELECT count(*) > 0 FROM pg_stat_activity WHERE backend_type = '$2'
                 AND backend_start > to_timestamp($1)" 60 "a $2 started after the fault"
}

fault_kill_executor() {
    local pid t0
    # an executor running a job claimed visibly, if any, so that a job is surely orphaned
    pid="$(soak_retry "SELECT coalesce((SELECT j.worker_pid FROM vq.job_active j JOIN pg_stat_activity a ON a.pid = j.worker_pid AND a.backend_type = 'vq_job executor'
                                         WHERE j.state = 'RUNNING' ORDER BY random() LIMIT 1),
                                        (SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job executor'
                                          AND datname = current_database() ORDER BY random() LIMIT 1))")"
    [[ -n "$pid" ]] || { log "fault: no executor to kill"; return 1; }
    t0="$(soak_epoch)"
    kill -9 "$pid" 2>/dev/null || { log "fault: executor $pid had already exited"; return 1; }
    _soak_back "$t0" 'vq_job executor'
    _soak_record kill_executor "pid $pid" "$t0"
}
fault_kill_launcher() {
    local pid t0
    pid="$(soak_retry "SELECT pid FROM pg_stat_activity WHERE backend_type = 'vq_job launcher'")"
    [[ -n "$pid" ]] || { log "fault: no launcher to kill"; return 1; }
    t0="$(soak_epoch)"
    kill -9 "$pid" 2>/dev/null || return 1
    _soak_back "$t0" 'vq_job executor'
    _soak_record kill_launcher "pid $pid" "$t0"
}
_soak_restart() { # MODE KIND
    local t0
    t0="$(soak_epoch)"
    vq_pg_ctl -m "$1" -w -t 60 stop >/dev/null || fail "pg_ctl stop -m $1 failed"
    vq_pg_ctl -l "$VQ_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null || fail "pg_ctl start failed"
    _soak_back "$t0" 'vq_job executor'
    _soak_record "$2" "pg_ctl stop -m $1, start" "$t0"
}
fault_immediate() { _soak_restart immediate immediate; }
fault_fast() { _soak_restart fast fast; }
fault_kill_consumer() {
    local pid t0
    pid="$(soak_consumer_pid)"
    [[ -n "$pid" ]] || return 1
    t0="$(soak_epoch)"
    kill -9 "$pid" 2>/dev/null || return 1
    _soak_record kill_consumer "pid $pid" "$t0"
}
fault_consumer_restart() {
    local pid t0 i
    pid="$(soak_consumer_pid)"
    [[ -n "$pid" ]] || return 1
    t0="$(soak_epoch)"
    kill -TERM "$pid" 2>/dev/null || return 1
    for ((i = 0; i < 200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    _soak_record consumer_restart "pid $pid, SIGTERM" "$t0"
}
fault_snapshot() {
    if [[ -n "${SOAK_HOLDER:-}" ]] && kill -0 "$SOAK_HOLDER" 2>/dev/null; then
        return 0   # one held at a time
    fi
    _soak_hold "$SOAK_HOLD_SECS" &
    SOAK_HOLDER=$!
    SOAK_PIDS+=("$SOAK_HOLDER")
    _soak_record snapshot "held ${SOAK_HOLD_SECS} s" "$(soak_epoch)"
}
fault_pause() {
    local t0 queue secs
    queue="$(shuf -n 1 -e soak_fast soak_busy soak_retry soak_notify)"
    secs="$(shuf -i 1-4 -n 1)"
    t0="$(soak_epoch)"
    soak_retry "SELECT vq_pause_queue('$queue')" >/dev/null
    sleep "$secs"
    soak_retry "SELECT vq_resume_queue('$queue')" >/dev/null
    _soak_record pause "$queue ${secs} s" "$t0"
}
fault_alter() {
    local t0 cap delay
    cap="$(shuf -i 20-200 -n 1)"
    delay="$(shuf -i 50-500 -n 1)"
    t0="$(soak_epoch)"
    soak_retry "SELECT vq_alter_queue('soak_fast', max_concurrent_jobs => $cap, sleep_delay_ms => $delay)" >/dev/null
    soak_retry "SELECT vq_alter_queue('soak_retry', backoff_base_delay_ms => $(shuf -i 100-500 -n 1))" >/dev/null
    _soak_record alter "soak_fast capacity $cap, sleep $delay ms" "$t0"
}
fault_reregister() {
    local t0 fn
    fn="$(soak_retry "SELECT CASE WHEN address LIKE '%soak_ok_a%' THEN 'soak_ok_b' ELSE 'soak_ok_a' END
                        FROM vq.handler WHERE name = 'soak_ok'")"
    t0="$(soak_epoch)"
    soak_retry "BEGIN; SELECT vq_unregister_handler('soak_ok');
                SELECT vq_register_handler('soak_ok', '$fn(jsonb, vq.job_context)', queue => 'soak_fast', max_attempts => 10);
                COMMIT;" >/dev/null
    _soak_record reregister "soak_ok -> $fn" "$t0"
}

# _soak_deal KIND: strike the fault; one whose target was not there (a process between its
# exit and its restart) is tried again every 0.5 s, for up to 15 s.
_soak_deal() {
    local tries=0
    until "fault_$1"; do
        ((++tries < 30)) || { log "fault: $1 found nothing to strike for 15 s"; return 0; }
        sleep 0.5
    done
}

# _soak_chaos: deal the faults in SOAK_FAULTS in random order, round after round, with a
# random pause before each, until the soak's end (the first round is always finished).
_soak_chaos() {
    local round=0 kind gap gap_min gap_max
    local -a deck kinds
    read -r gap_min gap_max <<<"${SOAK_GAP_MS:?}"
    read -r -a kinds <<<"$SOAK_FAULTS"
    while :; do
        mapfile -t deck < <(printf '%s\n' "${kinds[@]}" | shuf)
        for kind in "${deck[@]}"; do
            gap="$(shuf -i "$gap_min-$gap_max" -n 1)"
            sleep "$(awk -v g="$gap" 'BEGIN { printf "%.3f", g / 1000 }')"
            if ((round > 0)) && [[ "$(date +%s.%N)" > "$SOAK_END" ]]; then
                return 0
            fi
            log "fault: $kind (t+$(awk -v a="$SOAK_START" -v b="$(soak_epoch)" 'BEGIN { printf "%.0f", b - a }') s)"
            _soak_deal "$kind"
        done
        round=$((round + 1))
        awk -v a="$(soak_epoch)" -v b="$SOAK_END" 'BEGIN { exit !(a < b) }' || return 0
    done
}

# ---- settling ----------------------------------------------------------------------------
# soak_settle: stop the load, release the snapshot, resume the queues, and wait (at most
# SOAK_SETTLE_SECS) until every committed job has ended and no outbox row is PENDING.
soak_settle() {
    local deadline=$((SECONDS + SOAK_SETTLE_SECS)) left=""
    touch "$SOAK_TMP/stop.producers"
    wait "${SOAK_PIDS[@]}" 2>/dev/null || true   # producers end by themselves; the holder too
    q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'soak_holder'" >/dev/null
    soak_retry "SELECT count(vq_resume_queue(name)) FROM vq.queue WHERE name LIKE 'soak\_%' AND paused" >/dev/null
    while ((SECONDS < deadline)); do
        left="$(q "SELECT (SELECT count(*) FROM vq.job_active WHERE handler LIKE 'soak\_%')
                        + (SELECT count(*) FROM vq.outbox WHERE status = 'PENDING')
                        + (SELECT count(*) FROM soak_produced p WHERE p.execution_id IS NOT NULL
                             AND NOT EXISTS (SELECT 1 FROM vq.job j WHERE j.execution_id = p.execution_id))" 2>/dev/null)" || left="?"
        [[ "$left" == 0 ]] && break
        sleep 0.5
    done
    log "settled in $((SECONDS - deadline + SOAK_SETTLE_SECS)) s (unfinished jobs + PENDING outbox rows left: ${left:-?})"
    touch "$SOAK_TMP/stop.consumer" "$SOAK_TMP/stop.listener"
    local pid
    pid="$(soak_consumer_pid)"
    [[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null
    wait "$SOAK_CONSUMER_LOOP" "$SOAK_LISTENER_LOOP" 2>/dev/null || true
}

# ---- accounting --------------------------------------------------------------------------
# soak_log_errors: the server log written during the soak: the vq_job processes' messages by
# severity and kind (numbers and ids replaced), and how server processes ended.
soak_log_errors() {
    tail -c +"$((SOAK_LOG_OFFSET + 1))" "$VQ_CLUSTER_DIR/server.log" |
        sed -nE -e 's/^.*\] (vq_job (executor|launcher)) (LOG|WARNING|ERROR|FATAL|PANIC):  (.*)$/\1 \3: \4/p' \
                -e 's/^.*LOG:  (background worker "vq_job [a-z]+"|server process) \(PID [0-9]+\)( was terminated by signal [0-9]+| exited with exit code [0-9]+).*$/LOG: \1\2/p' |
        sed -E 's/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/<id>/g; s/[0-9]+/N/g' |
        cut -c1-150 | sort | uniq -c | sort -rn
}

# _soak_load_faults: faults.tsv into soak_fault.
_soak_load_faults() {
    awk -F'|' '{ gsub(/'"'"'/, "", $2)
                 printf "INSERT INTO soak_fault VALUES ('"'"'%s'"'"', '"'"'%s'"'"', to_timestamp(%s), to_timestamp(%s));\n", $1, $2, $3, $4 }' \
        "$SOAK_TMP/faults.tsv" | qs >/dev/null
}

# _soak_rolled_back: transactions of rollback.sql that pgbench ran (its summaries).
_soak_rolled_back() {
    awk '/SQL script [0-9]+: rollback.sql/ { r = 1; next }
         r && /^ - [0-9]+ transactions/ { n += $2; r = 0 }
         END { print n + 0 }' "$SOAK_TMP/bulk.log"
}

# _soak_load_heard: the outbox ids in the listener's notifications into soak_heard.
_soak_load_heard() {
    grep -oE '"outbox_id": [0-9]+' "$SOAK_TMP/listener.out" 2>/dev/null | grep -oE '[0-9]+$' |
        psql -XAtq -v ON_ERROR_STOP=1 -c '\copy soak_heard FROM STDIN' >/dev/null
}

# soak_account: load the faults, compute the table, print it; non-zero on a violated must.
soak_account() {
    local nbad
    touch "$SOAK_TMP/faults.tsv"
    _soak_load_faults
    _soak_load_heard
    echo
    echo "==================== soak accounting: $SOAK_SECS s, $(q "SELECT count(*) FROM soak_fault") faults ===================="
    psql -X -q -v ON_ERROR_STOP=1 -v "faults=$SOAK_FAULTS" -v "rolled_back=$(_soak_rolled_back)" \
        -v "producer_runs=$(cat "$SOAK_TMP"/*.runs 2>/dev/null | wc -l)" -f "$SOAK_DIR/accounting.sql" \
        -c '\pset footer off' \
        -c "SELECT measure, value, CASE WHEN rule = '' THEN '' WHEN ok THEN rule || ': ok' ELSE rule || ': VIOLATED' END AS \"must\"
              FROM acc ORDER BY ord, measure" \
        -c '\pset format unaligned' -c '\pset tuples_only on' \
        -c "SELECT 'violated musts: ' || count(*) FROM acc WHERE NOT ok" \
        -c '\pset format aligned' -c '\pset tuples_only off' \
        -c "SELECT b.what, b.execution_id, b.k,
                   (SELECT string_agg(t.kind || '/' || t.attempt_number || ' ' || to_char(t.at, 'HH24:MI:SS.MS')
                                      || coalesce(' (' || left(t.error, 80) || ')', ''), ', ' ORDER BY t.at)
                      FROM vq.job_transition t
                     WHERE t.execution_id = coalesce(b.execution_id, (SELECT j.execution_id FROM vq.job j
                                                                        WHERE j.payload ->> 'k' = b.k::text LIMIT 1))) AS transitions
              FROM bad b ORDER BY b.what LIMIT 200" >"$SOAK_TMP/account.txt" || fail "the accounting queries failed"
    sed -n '/^violated musts: /q; p' "$SOAK_TMP/account.txt"
    echo "server log since the soak began: messages of the vq_job processes by kind; how server processes ended"
    soak_log_errors | sed 's/^/    /'
    nbad="$(sed -n 's/^violated musts: //p' "$SOAK_TMP/account.txt")"
    # SIGKILL is the soak's; a process ended by any other signal crashed by itself
    if tail -c +"$((SOAK_LOG_OFFSET + 1))" "$VQ_CLUSTER_DIR/server.log" | grep -E 'terminated by signal [0-9]+' |
            grep -vE 'terminated by signal 9:' >"$SOAK_TMP/signals.txt"; then
        echo "must: no server process dies of a signal the soak did not send: VIOLATED"
        head -n 20 "$SOAK_TMP/signals.txt"
        nbad=$((nbad + 1))
    fi
    echo "violated musts: $nbad"
    if [[ "$nbad" != 0 ]]; then
        echo
        echo "violations (at most 200 rows, with each job's transitions):"
        sed '1,/^violated musts: /d' "$SOAK_TMP/account.txt"
        return 1
    fi
    return 0
}

# ---- the whole run -----------------------------------------------------------------------
# soak_cleanup: for the caller's EXIT trap: end what the soak started, by pid, and leave the
# server running.
soak_cleanup() {
    local pid
    [[ -n "${SOAK_TMP:-}" && -d "$SOAK_TMP" ]] || return 0
    touch "$SOAK_TMP/stop.producers" "$SOAK_TMP/stop.consumer" "$SOAK_TMP/stop.listener"
    for pid in "${SOAK_PIDS[@]}" "${SOAK_CONSUMER_LOOP:-}" "${SOAK_LISTENER_LOOP:-}" "$(soak_consumer_pid)"; do
        [[ -n "$pid" ]] && kill -TERM "$pid" 2>/dev/null
    done
    wait 2>/dev/null
    if ! pg_isready -q; then
        vq_pg_ctl -l "$VQ_CLUSTER_DIR/server.log" -w -t 60 start >/dev/null 2>&1
    fi
    psql -XAtq -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE application_name IN ('soak_holder', 'soak_consumer', 'soak_listener')" >/dev/null 2>&1
    if [[ "${SOAK_KEEP_TMP:-}" == 1 ]]; then
        echo "soak files kept in $SOAK_TMP"
    else
        rm -rf "$SOAK_TMP"
    fi
    return 0
}

soak_run() {
    SOAK_TMP="$(mktemp -d /tmp/vq_soak.XXXXXX)"
    SOAK_PIDS=()
    log "setup: tables, handlers, queues (files in $SOAK_TMP)"
    qs <"$SOAK_DIR/setup.sql" >/dev/null
    soak_write_scripts
    soak_write_consumer_command
    SOAK_LOG_OFFSET="$(stat -c %s "$VQ_CLUSTER_DIR/server.log")"
    SOAK_START="$(soak_epoch)"
    SOAK_END="$(awk -v a="$SOAK_START" -v s="$SOAK_SECS" 'BEGIN { printf "%.3f", a + s }')"
    _soak_consumer 2>>"$SOAK_TMP/consumer.log" &   # (bash reports the kills on stderr)
    SOAK_CONSUMER_LOOP=$!
    _soak_listener &
    SOAK_LISTENER_LOOP=$!
    soak_producers_start
    _soak_canceller &
    SOAK_PIDS+=($!)
    log "load and faults for $SOAK_SECS s (faults: $SOAK_FAULTS)"
    _soak_chaos
    if [[ -n "${SOAK_HOLDER:-}" ]]; then
        kill -TERM "$SOAK_HOLDER" 2>/dev/null || true
    fi
    log "load over after $(awk -v a="$SOAK_START" -v b="$(soak_epoch)" 'BEGIN { printf "%.0f", b - a }') s; settling"
    soak_settle
    soak_account
}

#!/usr/bin/env bash
# concurrent_job_id.sh: job_id is an idempotency key among unfinished jobs, race-free.
#   (a) 8 sessions released at the same instant (they wait on an advisory lock held by a
#       coordinator) enqueue the same job_id: one row, and all 8 get its execution_id.
#       Repeated 5 times.
#   (c) pgbench, 8 clients, 2000 transactions of vq_enqueue / vq_enqueue_many over 50 keys:
#       no failed transaction, and exactly one unfinished row per job_id.
# (One session waiting for another's uncommitted id, commit or rollback, is the isolation
# spec test/isolation/specs/job_id_race.spec.)
# Jobs are scheduled far in the future so that no worker runs (and finishes) them meanwhile.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

WORK="$(mktemp -d /tmp/vq_sc_job_id.XXXXXX)"
APP="vqjid$$"                 # application_name prefix of our sessions
LATER="2999-01-01"            # run_at of every job (no colons: pgbench would read :00 as a variable)
DEADLINE_SECS=30              # for every wait on another session
BG_PIDS=()

cleanup() {
    local pid
    set +e
    sessions_stop
    for pid in "${BG_PIDS[@]}"; do
        kill "$pid" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT

# uuid_in FILE: the one execution id printed in FILE (fails unless there is exactly one).
UUID_RE='^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
uuid_in() {
    local ids
    ids="$(grep -E "$UUID_RE" "$1" || true)"
    [[ -n "$ids" && "$(wc -l <<<"$ids")" -eq 1 ]] ||
        fail "expected one execution id in $1, got: $(cat "$1")"
    printf '%s' "$ids"
}

# rows_for JOB_ID: the execution ids of every row holding JOB_ID (any state).
rows_for() {
    q "SELECT execution_id FROM vq.job WHERE job_id = '$1' ORDER BY execution_id"
}

# ---------------------------------------------------------------------------
log "setup: handler noop"
q "CREATE FUNCTION sc_noop(jsonb) RETURNS void LANGUAGE sql AS ''" >/dev/null
q "SELECT vq_register_handler('noop', 'sc_noop(jsonb)')" >/dev/null

# ---------------------------------------------------------------------------
# (a) 8 sessions enqueue the same job_id at the same instant.
race_round() {
    local round="$1" key=$((7310000 + $1)) jid="race-$1" i pid rc expected id
    local pids=()
    log "(a) round $round: 8 sessions enqueue job_id $jid at once"
    session_start "$WORK" coord "$APP-coord"
    session_send coord "SELECT pg_advisory_lock($key);"
    wait_for "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                         WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = $key
                           AND l.objsubid = 1 AND a.application_name = '$APP-coord')" \
        "$DEADLINE_SECS" "the coordinator to hold advisory lock $key"
    for i in 1 2 3 4 5 6 7 8; do
        PGAPPNAME="$APP-racer" psql -X -q -v ON_ERROR_STOP=1 -At \
            -c "SELECT pg_advisory_lock_shared($key)" \
            -c "SELECT vq_enqueue('noop', '{\"racer\": $i}', '$LATER', job_id => '$jid')" \
            >"$WORK/race-$round-$i.out" 2>&1 &
        pids+=("$!")
        BG_PIDS+=("$!")
    done
    wait_for "SELECT count(*) = 8 FROM pg_locks
          WHERE locktype = 'advisory' AND NOT granted AND classid = 0 AND objid = $key AND objsubid = 1
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())" \
        "$DEADLINE_SECS" "8 sessions to wait on advisory lock $key"
    session_send coord "SELECT pg_advisory_unlock($key);"
    for i in "${!pids[@]}"; do
        rc=0
        wait "${pids[$i]}" || rc=$?
        ((rc == 0)) || fail "round $round: racer $((i + 1)) failed (exit $rc): $(cat "$WORK/race-$round-$((i + 1)).out")"
    done
    BG_PIDS=()
    session_end coord

    expected="$(rows_for "$jid")"
    [[ -n "$expected" && "$(wc -l <<<"$expected")" -eq 1 ]] ||
        fail "round $round: expected exactly one vq.job row with job_id $jid, got: ${expected:-none}"
    for i in 1 2 3 4 5 6 7 8; do
        id="$(uuid_in "$WORK/race-$round-$i.out")"
        [[ "$id" == "$expected" ]] ||
            fail "round $round: racer $i got execution_id $id, but the row holding $jid is $expected"
    done
}
for round in 1 2 3 4 5; do
    race_round "$round"
done

# ---------------------------------------------------------------------------
# (c) pgbench: many clients, few keys, single and batch enqueues mixed.
log "(c) pgbench: 8 clients x 250 transactions over job_ids k1..k50"
cat >"$WORK/enqueue.sql" <<EOF
\\set k random(1, 50)
SELECT vq_enqueue('noop', '{}', '$LATER', job_id => 'k' || :k);
EOF
cat >"$WORK/enqueue_many.sql" <<EOF
\\set k1 random(1, 50)
\\set k2 random(1, 50)
\\set k3 random(1, 50)
SELECT vq_enqueue_many('noop', ARRAY['{}', '{}', '{}', '{}']::jsonb[], '$LATER',
                       job_ids => ARRAY['k' || :k1, 'k' || :k2, 'k' || :k3, NULL]);
EOF
rc=0
pgbench -n -c 8 -j 8 -t 250 -f "$WORK/enqueue.sql@4" -f "$WORK/enqueue_many.sql@1" \
    >"$WORK/pgbench.out" 2>&1 || rc=$?
sed 's/^/   | /' "$WORK/pgbench.out" | grep -E 'processed|failed|aborted|ERROR|error' || true
((rc == 0)) || fail "pgbench exited $rc: $(tail -n 20 "$WORK/pgbench.out")"
grep -qE '^number of transactions actually processed: 2000/2000$' "$WORK/pgbench.out" ||
    fail "pgbench did not process 2000/2000 transactions: $(grep -E 'processed' "$WORK/pgbench.out")"
grep -qE '^number of failed transactions: 0 ' "$WORK/pgbench.out" ||
    fail "pgbench reported failed transactions: $(grep -E 'failed' "$WORK/pgbench.out")"

read -r unfinished distinct_ids generated < <(q "
    SELECT count(*) FILTER (WHERE job_id ~ '^k[0-9]+\$'),
           count(DISTINCT job_id) FILTER (WHERE job_id ~ '^k[0-9]+\$'),
           count(*) FILTER (WHERE job_id LIKE 'delayed-%')
      FROM vq.job WHERE handler = 'noop' AND state IN ('ENQUEUED', 'RUNNING')" | tr '|' ' ')
log "(c) unfinished keyed rows: $unfinished, distinct job_ids: $distinct_ids, generated ids: $generated"
((unfinished == distinct_ids)) ||
    fail "some job_id has more than one unfinished row: $unfinished rows for $distinct_ids job_ids"
((distinct_ids >= 1 && distinct_ids <= 50)) || fail "expected 1..50 distinct job_ids, got $distinct_ids"
((generated > 0)) || fail "the batches' NULL job_ids inserted nothing"

log "PASS: concurrent job_id"

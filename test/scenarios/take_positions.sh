#!/usr/bin/env bash
# take_positions.sh: workers' takes (vq_take_jobs) resume where the previous takes of their lane
# ("queue/handler") ended (src/claim/take.c, claimpos.c), and never leave a due job behind.
#   1. races: four takers (psql sessions taking 1-20 jobs at a time and replying with
#      vq_reply_jobs, in a loop; about one take in six runs in a transaction that holds its jobs
#      a few ms and rolls back, or rolls back to a savepoint) while two producers enqueue jobs
#      at priorities -1..2, due now or up to 400 ms later, in transactions that stay open a few
#      ms: every job is taken and completed exactly once (attempt 0, no reply ignored), no due
#      job waits more than 3 s (sampled while it runs, and the wait of every job from its due
#      time to its take), the rows of each take come in priority DESC, scheduled_at order, and
#      the positions' safety net never finds a job behind a position (so none was skipped);
#   2. the safety net: a taken job put back to ENQUEUED by hand (an UPDATE as superuser: no
#      commit lowers the position, which is past it) is not found by the next take, but is
#      taken within 16 s (executor 0 looks behind the positions every 10 s), and logged;
#   3. a held snapshot: a REPEATABLE READ transaction stays open while 20,000 jobs are enqueued
#      (1,000 at a time) and taken 100 at a time (and answered), so vacuum removes none of the
#      index entries the takes leave behind: a take near the end takes no longer than 10 times
#      one near the start (medians of 9, server-side, from EXPLAIN ANALYZE) and its buffers
#      grow by less than a quarter of what the plain scan's do. The plain scan a take without
#      positions would make (the first 100 due jobs from the start of the lane, with the take
#      index's conditions) is measured at the same two moments and printed; it must have become
#      much costlier, or this part would prove nothing. (Last: a look behind the positions
#      walks what the held snapshot keeps, and executor 0 then waits longer for the next one.)
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

RACE_SECS="${VQ_TAKE_RACE_SECS:-12}"
TAKERS=4
MAX_WAIT_S=3
TMPD="$(mktemp -d /tmp/vq_sc_tp.XXXXXX)"
PIDS=()
cleanup() {
    local rc=$? p
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    stop_snapshot_holder
    wait 2>/dev/null
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

log_offset() { echo $(($(stat -c %s "${VQ_CLUSTER_DIR:?}/server.log") + 1)); }
# behind_lines OFFSET LANE: the safety net's lines about LANE logged after byte OFFSET
behind_lines() {
    tail -c +"$1" "$VQ_CLUSTER_DIR/server.log" | grep -F "a due job of lane \"$2\"" || true
}

log "setup: queues tp_q and tp_sq (room for 10,000 held jobs each), external handlers tp_n and tp_s"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('tp_q', sleep_delay_ms => 100, max_concurrent_jobs => 10000);
SELECT vq_create_queue('tp_sq', sleep_delay_ms => 100, max_concurrent_jobs => 10000);
SELECT vq_register_notify_handler('tp_n', 'tp_chan', queue => 'tp_q');
SELECT vq_register_notify_handler('tp_s', 'tp_schan', queue => 'tp_sq');
-- every take that committed, one row per job, in the take's order (ord)
CREATE TABLE tp_taken (execution_id uuid, attempt int, priority int, scheduled_at timestamptz,
                       taker int, take_no int, ord bigint, taken_at timestamptz DEFAULT clock_timestamp());
CREATE INDEX ON tp_taken (taker, take_no);
CREATE TABLE tp_ignored (execution_id uuid, attempt int, ignored text, taker int);
SQL

# ---------------------------------------------------------------------------------------------
log "1. $TAKERS takers and 2 producers race for $RACE_SECS s (takes rolled back now and then)"
# One iteration of a taker, repeated; it stops at :'deadline'. A take that commits records its
# rows (and their order) in tp_taken in the take's own statement, then answers them.
iteration() {
    cat <<'SQL'
SELECT clock_timestamp() > :'deadline'::timestamptz AS stop, 1 + floor(random() * 20)::int AS n,
       random() < 0.17 AS rb, random() < 0.5 AS sp, :k + 1 AS k \gset
\if :stop
\q
\endif
\if :rb
BEGIN;
\if :sp
SAVEPOINT s;
\endif
SELECT count(*) AS rolled FROM vq_take_jobs('{tp_n}', :n) \gset
\echo rolled :rolled
SELECT pg_sleep(random() * 0.02);
\if :sp
ROLLBACK TO SAVEPOINT s;
COMMIT;
\else
ROLLBACK;
\endif
\else
WITH t AS (SELECT * FROM vq_take_jobs('{tp_n}', :n) WITH ORDINALITY),
     ins AS (INSERT INTO tp_taken (execution_id, attempt, priority, scheduled_at, taker, take_no, ord)
             SELECT execution_id, attempt, priority, scheduled_at, :me, :k, ordinality FROM t RETURNING 1)
SELECT count(*) > 0 AS any, count(*) < :n AS short FROM ins \gset
\if :any
INSERT INTO tp_ignored
SELECT r.*, :me FROM vq_reply_jobs(ARRAY(SELECT execution_id FROM tp_taken WHERE taker = :me AND take_no = :k ORDER BY ord),
                                   ARRAY(SELECT attempt FROM tp_taken WHERE taker = :me AND take_no = :k ORDER BY ord)) r;
\endif
\if :short
SELECT pg_sleep(0.02 + random() * 0.03);
\endif
\endif
SQL
}
ITERATION="$(iteration)"
{
    printf 'SELECT 0 AS k \\gset\n'
    for ((i = 0; i < 8000; i++)); do printf '%s\n' "$ITERATION"; done
} >"$TMPD/taker.sql"
cat >"$TMPD/produce.sql" <<'SQL'
BEGIN;
SELECT vq_enqueue('tp_n', jsonb_build_object('c', :client_id), priority => floor(random() * 4)::int - 1);
SELECT pg_sleep(random() * 0.005);
SELECT vq_enqueue_many('tp_n', ARRAY['{}'::jsonb, '{}'::jsonb], clock_timestamp() + random() * interval '400 ms',
                       priority => floor(random() * 4)::int - 1);
COMMIT;
SQL
start1="$(log_offset)"
deadline="$(q "SELECT clock_timestamp() + make_interval(secs => $RACE_SECS + 6)")"
for ((t = 1; t <= TAKERS; t++)); do
    psql -XAtq -v ON_ERROR_STOP=1 -v me="$t" -v deadline="$deadline" -f "$TMPD/taker.sql" \
        >"$TMPD/taker$t.out" 2>&1 &
    PIDS+=($!)
done
pgbench -n -c 2 -j 1 -R 60 -T "$RACE_SECS" -f "$TMPD/produce.sql" >"$TMPD/produce.out" 2>&1 &
producers=$!
max_wait=0 samples=0
while kill -0 "$producers" 2>/dev/null; do
    w="$(q "SELECT coalesce(round(extract(epoch FROM now() - min(scheduled_at)) * 1000), 0)::int FROM vq.job_active
             WHERE handler = 'tp_n' AND state = 'ENQUEUED' AND scheduled_at <= now()")"
    ((w > max_wait)) && max_wait=$w
    samples=$((samples + 1))
    sleep 0.25
done
wait "$producers" || fail "producers: $(tail -n 5 "$TMPD/produce.out")"
log "the longest wait of a due job seen while the producers ran: ${max_wait} ms ($samples samples)"
((max_wait <= MAX_WAIT_S * 1000)) || fail "a due job waited ${max_wait} ms for a take (at most ${MAX_WAIT_S} s allowed)"
wait_for "SELECT count(*) = 0 FROM vq.job_active WHERE handler = 'tp_n'" 10 \
    "every tp_n job taken and answered (left: $(q "SELECT count(*) FROM vq.job_active WHERE handler = 'tp_n'"))"
for ((t = 1; t <= TAKERS; t++)); do
    wait "${PIDS[$((t - 1))]}" || fail "taker $t failed: $(tail -n 5 "$TMPD/taker$t.out")"
done
PIDS=()
enqueued="$(q "SELECT count(*) FROM vq.job WHERE handler = 'tp_n'")"
rolled="$(cat "$TMPD"/taker*.out | awk '/^rolled / { takes++; jobs += $2 } END { printf "%d takes holding %d jobs", takes, jobs }')"
log "$enqueued jobs enqueued; $(q "SELECT count(DISTINCT (taker, take_no)) FROM tp_taken") takes committed; rolled back: $rolled"
[[ "$rolled" =~ holding\ ([1-9][0-9]*)\ jobs ]] || fail "no take rolled back while holding jobs: the race did not test that"
assert_eq "$enqueued|$enqueued|0" "$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) || '|' || count(*) FILTER (WHERE attempt <> 0)
                                         FROM tp_taken")" "jobs taken|distinct|at an attempt other than 0"
assert_eq "" "$(q "SELECT string_agg(taker || ': ' || execution_id || ' ' || ignored, ', ') FROM tp_ignored")" "replies ignored"
assert_eq "$enqueued" "$(q "SELECT count(*) FROM vq.job j JOIN tp_taken t USING (execution_id)
                             WHERE j.handler = 'tp_n' AND j.state = 'COMPLETED' AND j.attempt_number = 0")" \
    "taken jobs COMPLETED at their first attempt"
assert_eq 0 "$(q "SELECT count(*) FROM (
                    SELECT ord, row_number() OVER (PARTITION BY taker, take_no
                                                   ORDER BY priority DESC, scheduled_at, execution_id) AS want
                      FROM tp_taken) x WHERE ord <> want")" \
    "rows of a take out of priority DESC, scheduled_at order"
log "levels taken: $(q "SELECT string_agg(priority || ': ' || n, ', ' ORDER BY priority DESC)
                         FROM (SELECT priority, count(*) n FROM tp_taken GROUP BY 1) x");" \
    "multi-level takes: $(q "SELECT count(*) FROM (SELECT 1 FROM tp_taken GROUP BY taker, take_no
                                                     HAVING count(DISTINCT priority) > 1) x")"
read -r p50 p99 worst <<<"$(q "SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY w))::int, round(percentile_cont(0.99)
                                   WITHIN GROUP (ORDER BY w))::int, round(max(w))::int
                              FROM (SELECT greatest(0, extract(epoch FROM taken_at - scheduled_at) * 1000) AS w FROM tp_taken) x" |
                           tr '|' ' ')"
log "wait from due time to take: p50 ${p50} ms, p99 ${p99} ms, max ${worst} ms"
((worst <= MAX_WAIT_S * 1000)) || fail "a job was taken ${worst} ms after its due time (at most ${MAX_WAIT_S} s allowed)"
assert_eq "" "$(behind_lines "$start1" tp_q/tp_n)" "the safety net's lines about lane tp_q/tp_n during the race"

# ---------------------------------------------------------------------------------------------
log "2. a taken job put back behind the position by hand is found by the safety net"
ids=()
for tag in net after-1 after-2 after-3; do   # one by one: keys in this order
    ids+=("$(q "SELECT vq_enqueue('tp_n', '{\"tag\": \"$tag\"}')")")
done
NET="${ids[0]}"
assert_eq "net,after-1,after-2,after-3" "$(q "SELECT string_agg(payload ->> 'tag', ',') FROM vq_take_jobs('{tp_n}', 10)")" \
    "the take of the four (left unanswered: the position is past them)"
start3="$(log_offset)"
q "UPDATE vq.job_active SET state = 'ENQUEUED', started_at = NULL, consumer_claimed_at = NULL, lease_until = NULL,
                            updated_at = now() - interval '1 min'
    WHERE execution_id = '$NET'" >/dev/null
got="$(q "SELECT coalesce(string_agg(payload ->> 'tag', ','), '') FROM vq_take_jobs('{tp_n}', 10)")"
if [[ -n "$got" && -z "$(behind_lines "$start3" tp_q/tp_n)" ]]; then
    fail "the take right after the UPDATE found [$got]: it did not start at the lane's position"
fi
t0="$(now_ms)"
while [[ -z "$got" ]] && (($(now_ms) - t0 < 16000)); do
    sleep 0.25
    got="$(q "SELECT coalesce(string_agg(payload ->> 'tag', ','), '') FROM vq_take_jobs('{tp_n}', 10)")"
done
assert_eq net "$got" "the take after the safety net moved the position back"
log "taken again $(($(now_ms) - t0)) ms after the UPDATE"
behind_lines "$start3" tp_q/tp_n | grep -q 'a due job of lane "tp_q/tp_n" (priority 0, scheduled at .*) was behind the claim position; claims go back to it' ||
    fail "no LOG line of the job found behind the position of lane tp_q/tp_n"
assert_eq "" "$(q "SELECT string_agg(execution_id || ' ' || ignored, ', ') FROM vq_reply_jobs(
                     (SELECT array_agg(execution_id ORDER BY execution_id) FROM vq.job_active WHERE handler = 'tp_n'),
                     (SELECT array_agg(attempt_number ORDER BY execution_id) FROM vq.job_active WHERE handler = 'tp_n'))")" \
    "replies to the four ignored"
assert_eq 4 "$(q "SELECT count(*) FROM vq.job WHERE handler = 'tp_n' AND state = 'COMPLETED' AND payload ? 'tag'")" \
    "the four COMPLETED"
# ---------------------------------------------------------------------------------------------
log "3. a snapshot held while 20,000 jobs are enqueued and taken, 100 at a time"
hold_snapshot "$TMPD" tp_taken
PLAIN="SELECT execution_id FROM vq.job_active
        WHERE queue = 'tp_sq' AND handler = 'tp_s' AND state = 'ENQUEUED' AND handler_function IS NULL
          AND scheduled_at <= now()
        ORDER BY priority DESC, scheduled_at, execution_id LIMIT 100"
# Each take runs under EXPLAIN ANALYZE (it takes the jobs all the same, in its own transaction):
# its Function Scan node gives the take's time and the buffers it used.
{
    echo "CREATE TEMP TABLE tp_batch (execution_id uuid, attempt int);"
    for ((r = 1; r <= 20; r++)); do
        echo "SELECT 'enqueued', cardinality(vq_enqueue_many('tp_s', (SELECT array_agg(jsonb_build_object('r', $r, 'i', g))
                                                                      FROM generate_series(1, 1000) g)));"
        for ((k = 1; k <= 10; k++)); do
            if ((k == 2 && (r == 1 || r == 20))); then
                # the plain scan from the start of the lane, at the same moment (best of 3)
                for _ in 1 2 3; do
                    printf '\\echo plain %s\n' "$r"
                    echo "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) $PLAIN;"
                done
            fi
            printf '\\echo take %s %s\n' "$r" "$k"
            echo "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
                  INSERT INTO tp_batch SELECT execution_id, attempt FROM vq_take_jobs('{tp_s}', 100);"
            echo "SELECT 'ignored', count(*) FROM vq_reply_jobs(ARRAY(SELECT execution_id FROM tp_batch ORDER BY execution_id),
                                                               ARRAY(SELECT attempt FROM tp_batch ORDER BY execution_id));"
            echo "TRUNCATE tp_batch;"
        done
    done
} >"$TMPD/held.sql"
t0="$(now_ms)"
psql -XAtq -v ON_ERROR_STOP=1 -f "$TMPD/held.sql" >"$TMPD/held.out" 2>&1 || fail "the held-snapshot run failed: $(tail -n 5 "$TMPD/held.out")"
log "20 rounds in $(($(now_ms) - t0)) ms"
# buffers NODE-LINE-PATTERN: awk code that reads the shared buffers (hit + read) of a Buffers line into buf
# shellcheck disable=SC2016  # (awk code)
BUFFERS='match($0, /hit=[0-9]+/); buf = RLENGTH > 0 ? substr($0, RSTART + 4, RLENGTH - 4) : 0
         if (match($0, /read=[0-9]+/)) buf += substr($0, RSTART + 5, RLENGTH - 5)'
# one line per take: "round take ms rows buffers"
awk '/^take / { r = $2; k = $3; fs = 0; next }
     /Function Scan on vq_take_jobs/ { match($0, /\.\.[0-9.]+ rows=[0-9]+/); split(substr($0, RSTART + 2, RLENGTH - 2), a, " rows=")
                                       ms = a[1]; rows = a[2]; fs = 1; next }
     fs && /Buffers:/ { '"$BUFFERS"'; print r, k, ms, rows, buf; fs = 0 }' "$TMPD/held.out" >"$TMPD/takes"
assert_eq "200|20000|20000|0" "$(awk '{ n++; t += $4 } END { printf "%d|%d|", n, t }' "$TMPD/takes")$(awk -F'|' '
        /^enqueued\|/ { e += $2 } /^ignored\|/ { i += $2 } END { print e "|" i }' "$TMPD/held.out")" \
    "takes measured|jobs taken|enqueued|replies ignored"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_active WHERE handler = 'tp_s'")" "tp_s jobs left"
# median ROUND FIELD: the median of FIELD (3: ms, 5: buffers) over takes 2..10 of ROUND
median() {
    awk -v r="$1" -v f="$2" '$1 == r && $2 >= 2 { print $f }' "$TMPD/takes" | sort -g |
        awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
start_ms="$(median 1 3)" end_ms="$(median 20 3)" start_buf="$(median 1 5)" end_buf="$(median 20 5)"
# the plain scan of round R: "best time (ms)|buffers of that run"
plain() {
    awk -v r="$1" '/^plain / { cur = ($2 == r); buf = ""; next }
                   cur && /Buffers:/ && buf == "" { '"$BUFFERS"' }
                   cur && /Execution Time:/ { if (best == "" || $3 < best) { best = $3; bbest = buf } cur = 0 }
                   END { print best "|" bbest }' "$TMPD/held.out"
}
IFS='|' read -r plain_start_ms plain_start_buf <<<"$(plain 1)"
IFS='|' read -r plain_end_ms plain_end_buf <<<"$(plain 20)"
grep -Eq 'Index (Only )?Scan using job_take_idx' "$TMPD/held.out" ||
    fail "the plain scan did not use job_take_idx: $(grep -m 5 -i scan "$TMPD/held.out")"
release_snapshot
log "take of 100 (median of 9): ${start_ms} ms / ${start_buf} buffers near the start," \
    "${end_ms} ms / ${end_buf} buffers near the end (19,000 taken jobs behind)"
log "plain scan of the lane (best of 3): ${plain_start_ms} ms / ${plain_start_buf} buffers near the start," \
    "${plain_end_ms} ms / ${plain_end_buf} buffers near the end"
log "a take that scanned from the start of the lane would take about" \
    "$(awk -v s="$start_ms" -v p="$plain_end_ms" 'BEGIN { printf "%.1f", s + p }') ms near the end"
# (this part proves something only if the held snapshot kept the entries of the jobs taken)
awk -v s="$plain_start_buf" -v e="$plain_end_buf" 'BEGIN { exit !(e >= 20 * s && e >= 5000) }' ||
    fail "the plain scan read ${plain_end_buf} buffers near the end, ${plain_start_buf} near the start: the held snapshot did not keep the taken jobs' entries"
awk -v s="$start_ms" -v e="$end_ms" 'BEGIN { exit !(e <= 10 * s) }' ||
    fail "a take near the end took ${end_ms} ms, more than 10 times one near the start (${start_ms} ms): takes do not start at their positions"
awk -v s="$start_buf" -v e="$end_buf" -v ps="$plain_start_buf" -v pe="$plain_end_buf" 'BEGIN { exit !(e - s < (pe - ps) / 4) }' ||
    fail "a take used ${start_buf} buffers near the start and ${end_buf} near the end, a growth like the plain scan's: takes do not start at their positions"
log "PASS"

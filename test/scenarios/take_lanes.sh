#!/usr/bin/env bash
# take_lanes.sh: workers' takes with many lanes ("queue/handler": every external handler in every
# unpaused queue), more than the claim positions remember (src/main/shmem.h: VQ_MAX_CLAIM_LANES
# lanes, VQ_MAX_CLAIM_LEVELS levels per database; src/claim/take.c, claimpos.c).
#   1. few lanes hold jobs, many exist: 30 handlers x 12 queues (360 lanes), jobs in 4 of them at
#      two priorities. A take of all 30 handlers costs what those 4 lanes cost, not 360: fewer
#      than 40 index scans of vq.job_active per take (pg_stat_user_tables, over 10 takes after a
#      first one), and it takes every due job in claim order (the rows of one lane in a take in
#      claim order; a take's lanes come one after the other). A lane that gets its first job
#      after that (a 5th one) is taken by the next take.
#   2. more lanes hold jobs than are remembered: 30 handlers x 6 queues (180 lanes, 3 priorities
#      each: up to 540 levels), 3,000 jobs, a third due at once, the rest over the next 3 s, all
#      committed before one worker takes 50 at a time (and answers) until none is left: every
#      job is taken exactly once, none more than 10 s after its due time, and in claim order
#      across lanes: no job is taken by a take that started after a take that took a job behind
#      it in claim order (priority DESC, scheduled_at) while it was due.
#   3. then (the levels of part 2 still remembered, the rest not) new jobs in 20 lanes, some
#      due at once and some 1 s later: all taken, in claim order, within 10 s of their due time.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

HANDLERS=30
LATE_MS=10000   # (part 2 drains a backlog of 1,000 jobs due at once: most of the wait is the backlog)
TMPD="$(mktemp -d /tmp/vq_sc_tl.XXXXXX)"
cleanup() {
    local rc=$?
    set +e
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

ALL="$(q "SELECT array_agg('tl_h' || lpad(h::text, 2, '0') ORDER BY h) FROM generate_series(1, $HANDLERS) h")"

log "setup: 12 queues tl_q01..tl_q12 (room for 100,000 held jobs each), $HANDLERS external handlers"
qs >/dev/null <<SQL
SELECT vq_create_queue('tl_q' || lpad(q::text, 2, '0'), max_concurrent_jobs => 100000) FROM generate_series(1, 12) q;
SELECT vq_register_notify_handler('tl_h' || lpad(h::text, 2, '0'), 'tl_chan', queue => 'tl_q01')
  FROM generate_series(1, $HANDLERS) h;
-- every job taken, with the take's number and the row's place in it
CREATE TABLE tl_taken (execution_id uuid, attempt int, handler text, queue text, priority int,
                       scheduled_at timestamptz, take_no int, ord bigint);
SQL

# take_loop FIRST_TAKE_NO MAX_JOBS SECS: one session taking MAX_JOBS of all handlers at a time,
# recording and answering them, until a take gets nothing and no job is left (or SECS pass)
take_loop() {
    local one
    one="$(cat <<'ONE'
SELECT :k + 1 AS k \gset
WITH t AS (SELECT * FROM vq_take_jobs(:'all'::text[], :max) WITH ORDINALITY),
     ins AS (INSERT INTO tl_taken SELECT execution_id, attempt, handler, queue, priority, scheduled_at, :k, ordinality
               FROM t RETURNING 1)
SELECT count(*) > 0 AS got FROM ins \gset
\if :got
SELECT count(*) AS ignored FROM vq_reply_jobs(ARRAY(SELECT execution_id FROM tl_taken WHERE take_no = :k ORDER BY ord),
                                              ARRAY(SELECT attempt FROM tl_taken WHERE take_no = :k ORDER BY ord)) \gset
\else
SELECT NOT EXISTS (SELECT FROM vq.job_active WHERE handler LIKE 'tl_h%') OR clock_timestamp() > :'deadline' AS done \gset
\if :done
\q
\endif
SELECT pg_sleep(0.005);
\endif
ONE
)"
    {
        printf 'SELECT %s AS k, clock_timestamp() + interval %s AS deadline \\gset\n' "$1" "'$3 s'"
        for ((i = 0; i < 3000; i++)); do printf '%s\n' "$one"; done
    } >"$TMPD/take.sql"
    psql -XAtq -v ON_ERROR_STOP=1 -v all="$ALL" -v max="$2" -f "$TMPD/take.sql" >"$TMPD/take.out" 2>&1 ||
        fail "the taker failed: $(tail -n 5 "$TMPD/take.out")"
}

# check_order FROM_TAKE WHAT: no job was left behind by a take that took one after it in claim order
check_order() {
    assert_eq 0 "$(q "SELECT count(*) FROM (
                        SELECT ord, rank() OVER (PARTITION BY take_no, queue, handler ORDER BY ord) AS got,
                               rank() OVER (PARTITION BY take_no, queue, handler ORDER BY priority DESC, scheduled_at, execution_id) AS want
                          FROM tl_taken WHERE take_no >= $1) x WHERE got <> want")" "$2: rows of a lane in a take out of claim order"
    assert_eq "" "$(q "SELECT string_agg(DISTINCT b.take_no || ' took ' || a.handler || ' (' || a.priority || ') before ' ||
                                                 b.handler || ' (' || b.priority || ')', '; ')
                         FROM (SELECT t.*, j.started_at FROM tl_taken t JOIN vq.job j USING (execution_id) WHERE take_no >= $1) a
                         JOIN (SELECT t.*, j.started_at FROM tl_taken t JOIN vq.job j USING (execution_id) WHERE take_no >= $1) b
                           ON b.take_no < a.take_no AND a.scheduled_at <= b.started_at
                          AND (a.priority > b.priority OR (a.priority = b.priority AND a.scheduled_at < b.scheduled_at))")" \
        "$2: jobs left behind by a take of a later job in claim order"
}

# ---------------------------------------------------------------------------------------------
log "1. jobs in 4 of $((HANDLERS * 12)) lanes; takes of all $HANDLERS handlers"
qs >/dev/null <<'SQL'
SELECT vq_enqueue_many(h, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g), queue => q, priority => p)
  FROM (VALUES ('tl_h03', 'tl_q02'), ('tl_h11', 'tl_q07'), ('tl_h20', 'tl_q07'), ('tl_h29', 'tl_q12')) l(h, q),
       (VALUES (0), (3)) p(p);
SQL
assert_eq 40 "$(q "WITH t AS (SELECT * FROM vq_take_jobs('$ALL'::text[], 100) WITH ORDINALITY)
                   INSERT INTO tl_taken SELECT execution_id, attempt, handler, queue, priority, scheduled_at, 0, ordinality
                     FROM t RETURNING 1" | wc -l)" "jobs the first take took"
check_order 0 "the first take"
qs >/dev/null <<'SQL'
SELECT vq_enqueue_many(h, ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 5) g), queue => q, priority => p)
  FROM (VALUES ('tl_h03', 'tl_q02'), ('tl_h11', 'tl_q07'), ('tl_h20', 'tl_q07'), ('tl_h29', 'tl_q12')) l(h, q),
       (VALUES (0), (3)) p(p);
SQL
sleep 1   # (the statistics of the executors' and this session's statements so far are flushed)
before="$(q "SELECT pg_stat_clear_snapshot(); SELECT idx_scan FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass" | tail -n 1)"
took="$(psql -XAtq -v ON_ERROR_STOP=1 <<SQL | awk '{ s += $1 } END { print s }'
$(for ((i = 1; i <= 10; i++)); do echo "SELECT count(*) FROM vq_take_jobs('$ALL'::text[], 4);"; done)
SQL
)"
sleep 1
after="$(q "SELECT pg_stat_clear_snapshot(); SELECT idx_scan FROM pg_stat_user_tables WHERE relid = 'vq.job_active'::regclass" | tail -n 1)"
assert_eq 40 "$took" "jobs the 10 takes of 4 took"
per_take=$(((after - before) / 10))
log "index scans of vq.job_active per take of all $HANDLERS handlers: $per_take"
((per_take < 40)) || fail_later "a take of all $HANDLERS handlers made $per_take index scans: it visits empty lanes"
q "SELECT count(*) FROM vq_reply_jobs(ARRAY(SELECT execution_id FROM vq.job_active WHERE handler LIKE 'tl_h%'),
                                      ARRAY(SELECT attempt_number FROM vq.job_active WHERE handler LIKE 'tl_h%'))" >/dev/null
id="$(q "SELECT vq_enqueue('tl_h07', '{\"first\": true}', queue => 'tl_q05')")"
assert_eq "$id" "$(q "SELECT string_agg(execution_id::text, ',') FROM vq_take_jobs('$ALL'::text[], 10)")" \
    "the take after a job went into a lane that had none"
q "SELECT count(*) FROM vq_reply_jobs(ARRAY['$id'::uuid], ARRAY[0])" >/dev/null

# ---------------------------------------------------------------------------------------------
log "2. 3,000 jobs in 180 lanes (3 priorities each); one worker takes 50 at a time"
qs >/dev/null <<SQL
SELECT vq_enqueue_many('tl_h' || lpad(h::text, 2, '0'),
                       ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 2) g),
                       run_at => clock_timestamp() + (r % 3) * random() * interval '3 s',
                       queue => 'tl_q' || lpad(q::text, 2, '0'), priority => p)
  FROM generate_series(1, $HANDLERS) h, generate_series(1, 6) q, generate_series(-1, 1) p, generate_series(1, 3) r
 WHERE (h + q + p + r) % 9 <> 0 OR r = 1;
SQL
n2="$(q "SELECT count(*) FROM vq.job_active WHERE handler LIKE 'tl_h%'")"
lanes2="$(q "SELECT count(DISTINCT (queue, handler)) FROM vq.job_active WHERE handler LIKE 'tl_h%'")"
log "$n2 jobs in $lanes2 lanes"
t0="$(now_ms)"
take_loop 1000 50 60
log "taken in $(($(now_ms) - t0)) ms by $(q "SELECT count(DISTINCT take_no) FROM tl_taken WHERE take_no > 1000") takes"
assert_eq "$n2|$n2|0" "$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) || '|' || count(*) FILTER (WHERE attempt <> 0)
                            FROM tl_taken WHERE take_no > 1000")" "jobs taken|distinct|at an attempt other than 0"
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_active WHERE handler LIKE 'tl_h%'")" "jobs left"
check_order 1000 "part 2"
late="$(q "SELECT round(max(extract(epoch FROM j.started_at - j.scheduled_at)) * 1000)::int
             FROM tl_taken t JOIN vq.job j USING (execution_id) WHERE take_no > 1000")"
log "the latest take after a job's due time: $late ms"
((late <= LATE_MS)) || fail "a job was taken $late ms after its due time (at most $LATE_MS ms allowed)"

# ---------------------------------------------------------------------------------------------
log "3. new jobs in 20 lanes, due at once and 1 s later"
qs >/dev/null <<SQL
SELECT vq_enqueue_many('tl_h' || lpad(h::text, 2, '0'), ARRAY['{}'::jsonb, '{}'::jsonb],
                       run_at => clock_timestamp() + d * interval '1 s', queue => 'tl_q' || lpad(q::text, 2, '0'),
                       priority => (h + q) % 3)
  FROM generate_series(6, 15) h, generate_series(8, 9) q, generate_series(0, 1) d;
SQL
take_loop 5000 7 30
assert_eq "80|80" "$(q "SELECT count(*) || '|' || count(DISTINCT execution_id) FROM tl_taken WHERE take_no > 5000")" \
    "jobs taken|distinct"
check_order 5000 "part 3"
late="$(q "SELECT round(max(extract(epoch FROM j.started_at - j.scheduled_at)) * 1000)::int
             FROM tl_taken t JOIN vq.job j USING (execution_id) WHERE take_no > 5000")"
log "the latest take after a job's due time: $late ms"
((late <= LATE_MS)) || fail "a job was taken $late ms after its due time (at most $LATE_MS ms allowed)"
fail_summary
log PASS

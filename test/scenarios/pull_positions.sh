#!/usr/bin/env bash
# pull_positions.sh: vq_pull resumes where the previous pulls of its handler ended, and never
# leaves an announced job behind. After a first load moves the position of handler pp_n along,
# jobs land before it in every way there is: a higher priority, an earlier scheduled_at, a pull
# rolled back (or rolled back to a savepoint) after other pulls went past the jobs it held, the
# same for vq_take (a pull of one job, which moves the position too), a job
# another transaction holds while the pulls go past it, jobs a restricted consumer may not take. Each is taken by the very next pull
# that can take it (no waiting for the safety net). Then four consumers race producers: every
# job pulled exactly once. Pull order is priority DESC, then scheduled_at. Last, a job put back
# behind the position by hand (no commit lowers it) is found by the positions check, and logged.
# Roles are cluster-wide: they carry this process id and are dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

R_OWN="vq_pp_own_$$" # may pull only the jobs it enqueued (no consumer grant)
TMPD="$(mktemp -d /tmp/vq_sc_pp.XXXXXX)"
cleanup() {
    local rc=$?
    set +e
    cleanup_configs
    drop_roles "$R_OWN"
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT

log "setup: queue pp_q, NOTIFY handler pp_n (no consumer listens: the test pulls)"
qs >/dev/null <<SQL
SELECT vq_create_queue('pp_q', sleep_delay_ms => 100, max_concurrent_jobs => 5000);
SELECT vq_register_notify_handler('pp_n', 'pp_chan', queue => 'pp_q');
CREATE ROLE "$R_OWN";
SELECT vq_grant_producer('pp_n', '$R_OWN');
SQL

enqueue_tags() { # PREFIX N: scheduled one after the other (a batch's jobs would tie on scheduled_at)
    q "SELECT count(vq_enqueue('pp_n', jsonb_build_object('tag', '$1' || g), clock_timestamp()))
         FROM generate_series(1, $2) g" >/dev/null
}
enqueue_one() { # TAG [extra vq_enqueue arguments]
    q "SELECT vq_enqueue('pp_n', '{\"tag\": \"$1\"}'${2:+, $2})" >/dev/null
}
# every pp_n job enqueued so far is announced (RUNNING) or finished
wait_announced() {
    wait_for "SELECT count(*) = 0 FROM vq.job_active WHERE handler = 'pp_n' AND state = 'ENQUEUED'" 15 \
        "every pp_n job announced"
}
# pull N and answer them; prints the tags in the order vq_pull returned them
PULL="SELECT coalesce(string_agg(tag, ',' ORDER BY ord), '') FROM (
        SELECT p.payload ->> 'tag' AS tag, vq_complete(p.execution_id, p.attempt) AS done,
               row_number() OVER () AS ord
          FROM vq_pull('pp_n', %s) p) x"
pull() { # N
    # shellcheck disable=SC2059
    q "$(printf "$PULL" "$1")"
}
assert_pulled() { # EXPECTED N WHAT
    assert_eq "$1" "$(pull "$2")" "$3"
}

log "1. a first load moves the position along (300 jobs, pulled 50 at a time)"
enqueue_tags warm- 300
wait_announced
for _ in 1 2 3 4 5 6; do pull 50 >>"$TMPD/warm"; echo >>"$TMPD/warm"; done
assert_eq "300|300" "$(tr ',' '\n' <"$TMPD/warm" | grep -c . )|$(tr ',' '\n' <"$TMPD/warm" | grep . | sort -u | wc -l)" \
    "warm jobs pulled|distinct"
assert_pulled "" 10 "nothing left to pull"

log "2a. a higher priority and an earlier scheduled_at land before the position"
enqueue_one high "priority => 5"
enqueue_one earlier "now() - interval '1 hour'"
enqueue_tags next- 3
wait_announced
assert_pulled "high,earlier,next-1,next-2,next-3" 10 "pull after jobs landed before the position"

# hold_pull TAG SQL...: run the statements in the background (psql -c each); wait until its pull holds jobs
hold_pull() {
    local tag="$1"
    shift
    local args=()
    for sql in "$@"; do args+=(-c "$sql"); done
    psql -XAtq -v ON_ERROR_STOP=1 -c "SET application_name = 'pp_$tag'" "${args[@]}" >/dev/null &
    holder=$!
    wait_for "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'pp_$tag'
               AND query LIKE '%pg_sleep%'" 10 "the $tag pull holding its jobs"
}

log "2b. pulls go past jobs a pull in flight holds; that pull rolls back (its transaction, a savepoint)"
enqueue_tags rb- 5
enqueue_tags rb-after- 2
wait_announced
hold_pull rb "BEGIN" "SELECT count(*) FROM vq_pull('pp_n', 5)" "SELECT pg_sleep(1.5)" "ROLLBACK"
assert_pulled "rb-after-1,rb-after-2" 10 "pull while the rb pull holds its jobs"
wait "$holder"
assert_pulled "rb-1,rb-2,rb-3,rb-4,rb-5" 10 "pull after the rb pull rolled back"
enqueue_tags sx- 3
enqueue_tags sx-after- 2
wait_announced
hold_pull sx "BEGIN" "SAVEPOINT s" "SELECT count(*) FROM vq_pull('pp_n', 3)" "SELECT pg_sleep(1.5)" \
    "ROLLBACK TO SAVEPOINT s" "COMMIT"
assert_pulled "sx-after-1,sx-after-2" 10 "pull while the sx pull holds its jobs"
wait "$holder"
assert_pulled "sx-1,sx-2,sx-3" 10 "pull after the sx pull was rolled back to its savepoint"

log "2c. a job another transaction holds while pulls go past it"
enqueue_one held
enqueue_tags past- 3
wait_announced
hold_pull held "BEGIN" "SELECT 1 FROM vq.job_active WHERE payload ->> 'tag' = 'held' FOR UPDATE" \
    "SELECT pg_sleep(1.5)" "COMMIT"
assert_pulled "past-1,past-2,past-3" 10 "pull while held is held"
wait "$holder"
assert_pulled "held" 10 "pull once the holder committed"

log "2e. vq_take takes in any order; a take rolled back after a pull went past its job"
enqueue_tags tk- 6
wait_announced
take_sql() { echo "SELECT count(vq_complete(t.execution_id, t.attempt)) FROM vq_take((SELECT execution_id
                FROM vq.job_active WHERE payload ->> 'tag' = '$1')) t"; }
for t in 2 1 3; do assert_eq 1 "$(q "$(take_sql "tk-$t")")" "tk-$t taken and answered"; done
hold_pull tk "BEGIN" "SELECT count(*) FROM vq_take((SELECT execution_id FROM vq.job_active
                                                     WHERE payload ->> 'tag' = 'tk-4'))" "SELECT pg_sleep(1.5)" "ROLLBACK"
assert_pulled "tk-5,tk-6" 10 "pull while a take holds tk-4"
wait "$holder"
assert_pulled "tk-4" 10 "pull after the take rolled back"

log "2d. jobs a restricted consumer may not take"
enqueue_one theirs-1
q_as "$R_OWN" "SELECT vq_enqueue('pp_n', '{\"tag\": \"own-1\"}')" >/dev/null
enqueue_one theirs-2
wait_announced
assert_eq "own-1" "$(q_as "$R_OWN" "$(printf "$PULL" 10)")" "what the restricted consumer pulled"
assert_pulled "theirs-1,theirs-2" 10 "pull by a consumer that may take them"

log "3. four consumers race producers for 8 s: every job pulled once"
cat >"$TMPD/produce.sql" <<'SQL'
SELECT vq_enqueue_many('pp_n', array_agg(jsonb_build_object('tag', 'race-' || :client_id || '-' || random())),
                       priority => (random() * 2)::int) FROM generate_series(1, 5);
SQL
cat >"$TMPD/consume.sql" <<'SQL'
\set n random(1, 20)
INSERT INTO pp_pulled (tag)
SELECT tag FROM (SELECT p.payload ->> 'tag' AS tag, vq_complete(p.execution_id, p.attempt) AS done
                   FROM vq_pull('pp_n', :n) p) x;
SQL
q "CREATE TABLE pp_pulled (tag text)" >/dev/null
pgbench -n -c 2 -j 1 -T 8 -R 100 -f "$TMPD/produce.sql" >"$TMPD/produce.out" 2>&1 &
producers=$!
pgbench -n -c 4 -j 2 -T 10 -f "$TMPD/consume.sql" >"$TMPD/consume.out" 2>&1 ||
    fail "consumers: $(tail -5 "$TMPD/consume.out")"
wait "$producers" || fail "producers: $(tail -5 "$TMPD/produce.out")"
wait_announced
for _ in $(seq 1 20); do
    q "INSERT INTO pp_pulled SELECT unnest(string_to_array(($(printf "$PULL" 500)), ','))" >/dev/null
done
assert_eq 0 "$(q "SELECT count(*) FROM vq.job_active WHERE handler = 'pp_n'")" "race jobs not pulled"
assert_eq "$(q "SELECT count(*) FROM vq.job WHERE payload ->> 'tag' LIKE 'race-%'")" \
    "$(q "SELECT count(DISTINCT tag) || '' FROM pp_pulled WHERE tag LIKE 'race-%'")" "race jobs enqueued vs pulled"
assert_eq 0 "$(q "SELECT count(*) FROM (SELECT tag FROM pp_pulled GROUP BY tag HAVING count(*) > 1) d")" \
    "race jobs pulled twice"

log "4. pull order: priority DESC, then scheduled_at"
q "SELECT vq_pause_queue('pp_q')" >/dev/null
q "SELECT vq_enqueue('pp_n', jsonb_build_object('tag', 'order-' || p || '-' || s), now() - s * interval '1 min',
                     priority => p)
     FROM (VALUES (1), (5), (3)) pr(p), generate_series(1, 4) s ORDER BY random()" >/dev/null
q "SELECT vq_resume_queue('pp_q')" >/dev/null
wait_announced
assert_pulled "order-5-4,order-5-3,order-5-2,order-5-1,order-3-4,order-3-3,order-3-2,order-3-1,order-1-4,order-1-3,order-1-2,order-1-1" \
    20 "pull order"

log "5. a job put back behind the position by hand is found by the positions check"
enqueue_one net
enqueue_tags net-after- 3
wait_announced
assert_eq 4 "$(q "SELECT count(*) FROM vq_pull('pp_n', 10)")" "jobs taken (and left unanswered)"
log_offset="$(stat -c %s "$VQ_CLUSTER_DIR/server.log")"
q "UPDATE vq.job_active SET consumer_claimed_at = NULL, updated_at = now() - interval '1 min'
     WHERE payload ->> 'tag' = 'net'" >/dev/null
deadline=$((SECONDS + 30))
got=""
while ((SECONDS < deadline)); do
    got="$(pull 10)"
    [[ -n "$got" ]] && break
    sleep 0.5
done
assert_eq "net" "$got" "pulled after the positions check"
tail -c +"$((log_offset + 1))" "$VQ_CLUSTER_DIR/server.log" |
    grep -q 'an announced job of handler "pp_n" (priority 0, scheduled at .*) was behind the pull position' ||
    fail "no LOG line of the job found behind the pull position"
log "PASS"

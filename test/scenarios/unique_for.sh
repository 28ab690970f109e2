#!/usr/bin/env bash
# unique_for.sh: vq_enqueue(..., job_id, unique_for => interval) keeps the role's job_id for the
# window whatever becomes of the job (idempotency that covers finished jobs).
#   1. within the window the id returns the first job after it COMPLETED and after it was
#      DEAD_LETTERed (vq_enqueue and vq_enqueue_in); after the window a new job; a plain enqueue
#      (no unique_for) dedups only among unfinished jobs; another role has ids of its own;
#      unique_for without a job_id (VQ007) or not positive (VQ008) is refused.
#   2. concurrency, with the executors running the jobs as they come: 6 sessions enqueue the same
#      150 ids in different orders, one statement per transaction: exactly one job per id, and
#      every call for an id returned that job's execution_id.
#   3. a handler's window (vq_register_handler(..., unique_for), "uniqueFor" in
#      vq_register_handlers) applies to its jobs with a job_id and no unique_for of their own,
#      vq_enqueue_many included; a call's unique_for takes precedence; invalid values refused.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

OTHER="vq_uf_other_$$"
TMPD="$(mktemp -d)"
cleanup() {
    set +e
    drop_roles "$OTHER"
    rm -rf "$TMPD"
}
trap cleanup EXIT

log "setup: queue uf, handlers uf_noop and uf_fail"
qs >/dev/null <<SQL
CREATE ROLE "$OTHER";
SELECT vq_create_queue('uf', sleep_delay_ms => 100, max_concurrent_jobs => 100);
CREATE FUNCTION uf_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
CREATE FUNCTION uf_fail(p jsonb) RETURNS void LANGUAGE plpgsql AS \$\$ BEGIN RAISE 'no'; END \$\$;
SELECT vq_register_handler('uf_noop', 'uf_noop(jsonb)', queue => 'uf');
SELECT vq_register_handler('uf_fail', 'uf_fail(jsonb)', queue => 'uf', max_attempts => 1);
GRANT EXECUTE ON FUNCTION uf_noop(jsonb) TO "$OTHER";
SQL

log "1. the window outlives the job"
A="$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 'a', unique_for => '1 hour')")"
wait_state "$A" COMPLETED 10
assert_eq "$A" "$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 'a', unique_for => '1 hour')")" \
    "enqueue of id a again after its job COMPLETED"
assert_eq "$A" "$(q "SELECT vq_enqueue_in('uf_noop', '{}', '1 s', job_id => 'a', unique_for => '5 min')")" \
    "vq_enqueue_in of id a within its window"
D="$(q "SELECT vq_enqueue('uf_fail', '{}', job_id => 'd', unique_for => '1 hour')")"
wait_state "$D" DEAD_LETTER 10
assert_eq "$D" "$(q "SELECT vq_enqueue('uf_fail', '{}', job_id => 'd', unique_for => '1 hour')")" \
    "enqueue of id d again after its job was dead-lettered"
P="$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 'a')")"
[[ "$P" != "$A" ]] || fail "a plain enqueue of id a (no unique_for) after its job finished returned it"
wait_state "$P" COMPLETED 10
S="$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 's', unique_for => '300 ms')")"
wait_state "$S" COMPLETED 10
# (ended: expired, or already deleted by the retention, which removes expired windows)
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job_id_window WHERE job_id = 's' AND until >= now())" 5 "the window of id s to end"
S2="$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 's', unique_for => '300 ms')")"
[[ "$S2" != "$S" ]] || fail "enqueue of id s after its window ended returned the old job"
assert_eq "$S2" "$(q "SELECT execution_id FROM vq.job_id_window WHERE job_id = 's'")" "the window of id s now holds the new job"
O="$(q_as "$OTHER" "SELECT vq_enqueue('uf_noop', '{}', job_id => 'a', unique_for => '1 hour')")"
[[ "$O" != "$A" ]] || fail "another role's enqueue of id a returned the first role's job"
assert_eq "$O" "$(q_as "$OTHER" "SELECT vq_enqueue('uf_noop', '{}', job_id => 'a', unique_for => '1 hour')")" \
    "the other role's own window for id a"
out="$(psql -XAtq -v VERBOSITY=verbose -c "SELECT vq_enqueue('uf_noop', '{}', unique_for => '1 hour')" 2>&1)" &&
    fail "unique_for without a job_id was accepted"
grep -q 'VQ007: unique_for needs a job_id' <<<"$out" || fail "unique_for without a job_id: $out"
out="$(psql -XAtq -v VERBOSITY=verbose -c "SELECT vq_enqueue('uf_noop', '{}', job_id => 'z', unique_for => '0 s')" 2>&1)" &&
    fail "unique_for of 0 was accepted"
grep -q 'VQ008: unique_for must be a positive interval' <<<"$out" || fail "unique_for of 0: $out"

log "2. 6 sessions x the same 150 ids, while the jobs run"
for s in 1 2 3 4 5 6; do
    seq 1 150 | shuf --random-source=<(yes "$s") |
        awk '{ printf "SELECT %d, vq_enqueue('"'"'uf_noop'"'"', '"'"'{}'"'"', job_id => '"'"'c%d'"'"', unique_for => '"'"'1 hour'"'"');\n", $1, $1 }' \
            >"$TMPD/s$s.sql"
    psql -XAtq -F ' ' -v ON_ERROR_STOP=1 -f "$TMPD/s$s.sql" >"$TMPD/s$s.out" 2>"$TMPD/s$s.err" &
done
wait || fail "a session failed: $(cat "$TMPD"/s*.err)"
q "CREATE TABLE uf_calls (id int, execution_id uuid)" >/dev/null
cat "$TMPD"/s*.out | psql -XAtq -v ON_ERROR_STOP=1 -c "COPY uf_calls FROM STDIN (DELIMITER ' ')"
assert_eq 900 "$(q "SELECT count(*) FROM uf_calls")" "calls recorded"
assert_eq "150|150" "$(q "SELECT count(*) || '|' || count(DISTINCT job_id) FROM vq.job WHERE job_id LIKE 'c%'")" \
    "jobs for the 150 ids (one each)"
assert_eq 0 "$(q "SELECT count(*) FROM uf_calls c LEFT JOIN vq.job j ON j.job_id = 'c' || c.id
                   WHERE j.execution_id IS DISTINCT FROM c.execution_id")" \
    "calls that returned another execution_id than their id's job"
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job WHERE job_id LIKE 'c%' AND state <> 'COMPLETED')" 30 "the 150 jobs COMPLETED"

log "3. a handler's window: its jobs with a job_id and no unique_for of their own"
qs >/dev/null <<'SQL'
SELECT vq_register_handler('uf_window', 'uf_noop(jsonb)', queue => 'uf', unique_for => '1 hour');
SELECT vq_register_handlers('[{"name": "uf_bulk", "function": "public.uf_noop(jsonb)", "uniqueFor": "2 hours"},
                              {"name": "uf_notify", "channel": "uf_ch", "uniqueFor": "5 minutes"}]');
SQL
assert_eq "uf_bulk|02:00:00 uf_notify|00:05:00 uf_window|01:00:00" \
    "$(q "SELECT string_agg(name || '|' || unique_for, ' ' ORDER BY name) FROM vq.handler_settings WHERE name LIKE 'uf\_%' AND unique_for IS NOT NULL")" \
    "handler_settings.unique_for"
H="$(q "SELECT vq_enqueue('uf_window', '{}', job_id => 'h')")"
wait_state "$H" COMPLETED 10
assert_eq "$H" "$(q "SELECT vq_enqueue('uf_window', '{}', job_id => 'h')")" "id h again after its job COMPLETED"
assert_eq "$H|$H|$H" "$(q "SELECT array_to_string(vq_enqueue_many('uf_window', ARRAY['{}', '{}', '{}']::jsonb[],
                                   job_ids => ARRAY['h', 'h', 'h']), '|')")" "vq_enqueue_many of id h x3"
B="$(q "SELECT array_to_string(vq_enqueue_many('uf_window', ARRAY['{}', '{}']::jsonb[], job_ids => ARRAY['b', NULL]), ',')")"
wait_state "${B%%,*}" COMPLETED 10
assert_eq "${B%%,*}" "$(q "SELECT (vq_enqueue_many('uf_window', ARRAY['{}']::jsonb[], job_ids => ARRAY['b']))[1]")" \
    "a batch's id b again after its job COMPLETED"
N="$(q "SELECT vq_enqueue('uf_window', '{}', job_id => 'n', unique_for => '300 ms')")"
wait_state "$N" COMPLETED 10
# (ended: expired, or already deleted by the retention, which removes expired windows)
wait_for "SELECT NOT EXISTS (SELECT 1 FROM vq.job_id_window WHERE job_id = 'n' AND until >= now())" 5 "the call's own window of id n to end"
[[ "$(q "SELECT vq_enqueue('uf_window', '{}', job_id => 'n')")" != "$N" ]] ||
    fail "the call's unique_for (300 ms) did not take precedence over the handler's (1 hour)"
G="$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 'g')")"
wait_state "$G" COMPLETED 10
[[ "$(q "SELECT vq_enqueue('uf_noop', '{}', job_id => 'g')")" != "$G" ]] ||
    fail "a handler without a window kept the id of a finished job"
out="$(psql -XAtq -v VERBOSITY=verbose -c "SELECT vq_register_handler('uf_bad', 'uf_noop(jsonb)', unique_for => '-1 s')" 2>&1)" &&
    fail "a handler's unique_for of -1 s was accepted"
grep -q 'unique_for must be a positive interval' <<<"$out" || fail "a handler's negative unique_for: $out"
out="$(psql -XAtq -c "SELECT vq_register_handlers('[{\"name\": \"uf_bad\", \"function\": \"public.uf_noop(jsonb)\", \"uniqueFor\": 5}]')" 2>&1)" &&
    fail "a uniqueFor that is not an interval string was accepted"
grep -q 'uniqueFor must be an interval' <<<"$out" || fail "uniqueFor 5: $out"
log "PASS"

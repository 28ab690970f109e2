#!/usr/bin/env bash
# cancel_grace.sh: vq_cancel stops a running handler that never looks at vq_job_cancelled().
# vq.cancel_grace_ms = 1000.
#   1. a handler sleeping 30 s (claimed visibly, max_attempts 3) after a write: vq_cancel ->
#      CANCEL_REQUESTED; the executor looks once a second, and 1 s after it saw the request the
#      handler is interrupted: the job is CANCELLED (last_error names the grace) within 3.5 s
#      of the request, its write rolled back, no retry.
#   2. the same handler run inline (it ran fast before: a flag makes it sleep): the same.
#   3. a handler that catches the interruption (EXCEPTION WHEN query_canceled, then sleeps
#      again): its executor ends 2 s after the interruption; the job is CANCELLED all the same
#      (within 7 s of the request), and the launcher replaces the executor.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

cleanup() {
    set +e
    q "UPDATE cg_flag SET slow = false" >/dev/null 2>&1
    cleanup_configs
}
trap cleanup EXIT

log "setup: vq.cancel_grace_ms = 1000, queue cg, handlers"
set_config vq.cancel_grace_ms 1000
qs >/dev/null <<'SQL'
SELECT vq_create_queue('cg', sleep_delay_ms => 100, max_concurrent_jobs => 10);
CREATE TABLE cg_flag (slow boolean NOT NULL);
INSERT INTO cg_flag VALUES (false);
CREATE TABLE cg_effect (execution_id uuid, tag text);
CREATE FUNCTION cg_sleep(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.cg_effect VALUES (c.execution_id, p ->> 'tag');
    IF (p ->> 'always')::boolean OR (SELECT slow FROM public.cg_flag) THEN
        IF (p ->> 'stubborn')::boolean THEN
            LOOP
                BEGIN PERFORM pg_sleep(30); EXCEPTION WHEN query_canceled THEN NULL; END;
            END LOOP;
        END IF;
        PERFORM pg_sleep(30);
    END IF;
END $$;
SELECT vq_register_handler(h, 'cg_sleep(jsonb, vq.job_context)', queue => 'cg')
  FROM unnest(ARRAY['cg_visible', 'cg_inline', 'cg_stubborn']) h;
SQL

# cancel_case TAG HANDLER PAYLOAD MAX_SECS: start the job, wait for it to sleep, vq_cancel it, and
# check it ends CANCELLED within MAX_SECS of the request, with its write rolled back and no retry.
cancel_case() {
    local tag="$1" handler="$2" payload="$3" max_secs="$4" id t0 secs st
    id="$(q "SELECT vq_enqueue('$handler', '$payload', max_attempts => 3)")"
    wait_for "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%execution $id%'
                  AND wait_event = 'PgSleep')" 10 "($tag) the handler sleeping"
    t0="$(now_ms)"
    assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$id')")" "($tag) vq_cancel of the running job"
    wait_for "SELECT state NOT IN ('ENQUEUED', 'RUNNING') FROM vq.job WHERE execution_id = '$id'" 10 \
        "($tag) the job to end"
    secs="$(awk -v ms="$(($(now_ms) - t0))" 'BEGIN { printf "%.2f", ms / 1000 }')"
    st="$(job_state "$id")"
    [[ "$st" == "CANCELLED|0|cancelled while running: "* ]] || fail "($tag) expected CANCELLED at attempt 0, found '$st'"
    awk -v s="$secs" -v m="$max_secs" 'BEGIN { exit !(s <= m) }' || fail "($tag) the job ended ${secs} s after the request, expected <= $max_secs s"
    assert_eq 0 "$(q "SELECT count(*) FROM cg_effect WHERE execution_id = '$id'")" "($tag) writes of the cancelled attempt"
    assert_eq "" "$(q "SELECT string_agg(kind, ',') FROM vq.job_transition WHERE execution_id = '$id' AND kind IN ('FAILED', 'ABANDONED')")" \
        "($tag) FAILED / ABANDONED transitions (no retry)"
    log "ok: ($tag) ${st#CANCELLED|0|} after ${secs} s"
}

# ---------------------------------------------------------------------------
log "1. a handler claimed visibly that never checks"
cancel_case visible cg_visible '{"tag": "visible", "always": true}' 3.5

# ---------------------------------------------------------------------------
log "2. the same handler inline"
q "SELECT vq_enqueue('cg_inline', '{\"tag\": \"warm\"}') FROM generate_series(1, 10)" >/dev/null
wait_for "SELECT count(*) = 10 FROM cg_effect WHERE tag = 'warm'" 10 "warm-up jobs"
q "UPDATE cg_flag SET slow = true" >/dev/null
cancel_case inline cg_inline '{"tag": "inline"}' 3.5
q "UPDATE cg_flag SET slow = false" >/dev/null

# ---------------------------------------------------------------------------
log "3. a handler that catches the interruption"
before="$(q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
              WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
cancel_case stubborn cg_stubborn '{"tag": "stubborn", "always": true, "stubborn": true}' 7
after="$(q "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity
             WHERE backend_type = 'vq_job executor' AND datname = current_database()")"
[[ "$after" != "$before" ]] || fail "(stubborn) no executor was replaced ($before)"
log "PASS"

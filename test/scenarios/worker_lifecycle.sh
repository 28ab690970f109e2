#!/usr/bin/env bash
# worker_lifecycle.sh: what the executors do to a job, from ENQUEUED to its end.
#   With visible claims (vq.inline_handler_ms = 0):
#    - a one-argument and a two-argument handler complete; the vq.job_context a handler
#      receives matches the row; exactly CLAIMED + COMPLETED in vq.job_transition;
#    - a 2 s handler is RUNNING for other sessions, with worker_pid a live executor;
#    - FIXED / LINEAR / EXPONENTIAL retries: each retry's scheduled_at is the FAILED
#      transition's time + backoff(attempt_number + 1); DEAD_LETTER after max_attempts with
#      the last error; nothing runs a dead-lettered job again;
#    - a handler's writes commit with success and roll back with failure;
#    - vq_log lines of a failing handler are kept (level, message, fields, attempt); an
#      attempt keeps at most vq.log_max_lines lines of at most vq.log_max_line_bytes each (a
#      long message is cut, large fields dropped, the excess lines counted in one last line);
#    - a job whose handler is unregistered before it is due still runs its recorded function;
#    - live progress in vq.running_jobs, persisted at the end;
#    - cooperative cancellation of a running job: CANCELLED whether its handler returns early
#      (writes kept) or raises (writes rolled back, no retry); vq_cancel of a future job;
#    - durable context: a job enqueued by a handler inherits the running job's metadata;
#    - NULL payloads, a STRICT handler and a handler returning NULL.
#   With the default vq.inline_handler_ms: a fast handler runs inline after its first run
#   (one COMPLETED transition from ENQUEUED); rollback and logs behave the same inline.
#   With vq.execution_timeout_ms = 500: a handler sleeping 5 s is ABANDONED within ~1.5 s,
#   re-enqueued with attempt + 1, then dead-lettered.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=test/scenarios/lib/common.sh
. "$HERE/lib/common.sh"
on_exit() {
    local rc=$?
    cleanup_configs
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# ---- helpers -------------------------------------------------------------------------------

# assert_history EID MODE OUTCOME...: the job's transitions are exactly, attempt by attempt,
# the given outcomes (KIND:TO_STATE, e.g. FAILED:ENQUEUED), each attempt claimed visibly
# (CLAIMED then KIND from RUNNING), inline (KIND from ENQUEUED) or either (MODE any).
assert_history() {
    local eid="$1" mode="$2" arr
    shift 2
    arr="$(printf "'%s'," "$@")"
    assert_eq ok "$(q "SELECT check_history('$eid', ARRAY[${arr%,}]::text[], '$mode')")" \
        "transitions of job $eid"
}

# assert_job EID SQL_CONDITION WHAT: the vq.job row satisfies the condition (aliased j).
assert_job() {
    local v
    v="$(q "SELECT ($2)::text || ' | ' || row_to_json(j)::text FROM vq.job j WHERE execution_id = '$1'")"
    [[ "$v" == true\ \|* ]] || fail "$3: expected ($2) for job $1, row: ${v:-<no row>}"
}

# enqueue ARGS: vq_enqueue(ARGS) in its own transaction; prints the execution_id.
enqueue() { q "SELECT vq_enqueue($1)"; }

# ---- objects -------------------------------------------------------------------------------
log "setup: queues, tables, handlers"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('lq', sleep_delay_ms => 200, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => 200, backoff_max_delay_ms => 1000);
SELECT vq_create_queue('q_fixed', sleep_delay_ms => 200, backoff_strategy => 'FIXED',
                       backoff_base_delay_ms => 200, backoff_max_delay_ms => 1000);
SELECT vq_create_queue('q_linear', sleep_delay_ms => 200, backoff_strategy => 'linear',
                       backoff_base_delay_ms => 200, backoff_max_delay_ms => 1000);
SELECT vq_create_queue('q_exp', sleep_delay_ms => 200, backoff_strategy => 'Exponential',
                       backoff_base_delay_ms => 200, backoff_max_delay_ms => 1000);

-- what handlers saw (written in the handler's transaction: kept only on success)
CREATE TABLE calls (
    id            bigserial PRIMARY KEY,
    tag           text,
    execution_id  uuid,
    attempt       int,
    ctx           jsonb,
    payload       jsonb,
    payload_null  boolean,
    row_state     text,        -- the job row's state as the handler's transaction sees it
    pid           int,
    started_at    timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- a handler's own writes, one per attempt
CREATE TABLE effects (execution_id uuid, attempt int, note text, PRIMARY KEY (execution_id, attempt));
-- counts runs of the always-failing handler whatever their outcome (sequences ignore rollback)
CREATE SEQUENCE fail_runs;

CREATE FUNCTION h_one(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO calls (tag, payload, payload_null, pid) VALUES (coalesce(p ->> 'tag', 'one'), p, p IS NULL, pg_backend_pid());
END $$;

CREATE FUNCTION h_two(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO calls (tag, execution_id, attempt, ctx, payload, payload_null, row_state, pid)
    VALUES (coalesce(p ->> 'tag', 'two'), c.execution_id, c.attempt_number, to_jsonb(c), p, p IS NULL,
            (SELECT state::text FROM vq.job j WHERE j.execution_id = c.execution_id), pg_backend_pid());
    PERFORM vq_log('INFO', 'two done', jsonb_build_object('tag', p ->> 'tag'));
END $$;

CREATE FUNCTION h_fail(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('fail_runs');
    PERFORM vq_log('INFO', 'attempt', jsonb_build_object('scheduled_at', c.scheduled_at,
                                                         'started_at', clock_timestamp()));
    INSERT INTO effects VALUES (c.execution_id, c.attempt_number, 'must be rolled back');
    RAISE EXCEPTION 'boom % attempt %', p ->> 'tag', c.attempt_number;
END $$;

CREATE FUNCTION h_flaky(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO effects VALUES (c.execution_id, c.attempt_number, 'attempt ' || c.attempt_number);
    IF c.attempt_number < (p ->> 'fail_until')::int THEN
        RAISE EXCEPTION 'flaky failure on attempt %', c.attempt_number;
    END IF;
END $$;

CREATE FUNCTION h_logfail(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'starting', jsonb_build_object('attempt', c.attempt_number, 'step', 1));
    PERFORM vq_log('warning', 'about to fail');
    PERFORM vq_log('Error', 'failing now', '{"k": [1, 2]}');
    INSERT INTO effects VALUES (c.execution_id, c.attempt_number, 'must be rolled back');
    RAISE EXCEPTION 'logged then failed';
END $$;

-- 1,005 lines: one with a 20,000-byte message, one with 10,000 bytes of fields, 1,003 short ones
CREATE FUNCTION h_logflood(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', repeat('x', 20000));
    PERFORM vq_log('INFO', 'big fields', jsonb_build_object('blob', repeat('f', 10000)));
    FOR i IN 1..1003 LOOP
        PERFORM vq_log('DEBUG', 'line ' || i);
    END LOOP;
END $$;

CREATE FUNCTION h_sleep(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_log('INFO', 'sleeping', jsonb_build_object('attempt', c.attempt_number));
    INSERT INTO calls (tag, execution_id, attempt, pid) VALUES (p ->> 'tag', c.execution_id, c.attempt_number, pg_backend_pid());
    PERFORM pg_sleep((p ->> 'secs')::float8);
END $$;

CREATE FUNCTION h_progress(p jsonb) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM vq_progress_set_total(3);
    PERFORM vq_progress_add();
    PERFORM pg_sleep(0.6);
    PERFORM vq_progress_add(1);
    PERFORM pg_sleep(0.6);
    PERFORM vq_progress_add(0, 1);
    PERFORM pg_sleep(0.6);
END $$;

CREATE FUNCTION h_cancellable(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. 800 LOOP          -- 20 s unless cancelled
        IF vq_job_cancelled() THEN
            INSERT INTO effects VALUES (c.execution_id, c.attempt_number, 'cancelled');
            PERFORM vq_log('INFO', 'cancelled', jsonb_build_object('loops', i));
            RETURN;
        END IF;
        PERFORM pg_sleep(0.025);
    END LOOP;
    INSERT INTO effects VALUES (c.execution_id, c.attempt_number, 'ran to the end');
END $$;

-- raises once it sees the cancel request (after a write that the error rolls back)
CREATE FUNCTION h_cancel_raise(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO effects VALUES (c.execution_id, c.attempt_number, 'must be rolled back');
    FOR i IN 1 .. 800 LOOP
        IF vq_job_cancelled() THEN
            RAISE EXCEPTION 'stopping: cancelled';
        END IF;
        PERFORM pg_sleep(0.025);
    END LOOP;
END $$;

CREATE FUNCTION h_parent(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO effects VALUES (c.execution_id, c.attempt_number,
        vq_enqueue('two', jsonb_build_object('tag', p ->> 'child_tag'), NULL, NULL, NULL, NULL, NULL,
                   '{"own": {"x": 1}}')::text);
END $$;

CREATE FUNCTION h_fast(p jsonb, c vq.job_context) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO calls (tag, execution_id, row_state, pid)
    VALUES ('fast', c.execution_id, (SELECT state::text FROM vq.job j WHERE j.execution_id = c.execution_id),
            pg_backend_pid());
END $$;

CREATE FUNCTION h_returns_null(p jsonb) RETURNS jsonb LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO calls (tag, payload, payload_null) VALUES ('returns-null', p, p IS NULL);
    RETURN NULL;
END $$;

CREATE FUNCTION h_strict(p jsonb) RETURNS void STRICT LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO calls (tag, payload, payload_null) VALUES ('strict', p, p IS NULL);
END $$;

SELECT vq_register_handler('one', 'h_one(jsonb)', 'lq');
SELECT vq_register_handler('two', 'h_two(jsonb, vq.job_context)', 'lq');
SELECT vq_register_handler('fail', 'h_fail(jsonb, vq.job_context)', max_attempts => 4);
SELECT vq_register_handler('flaky', 'h_flaky(jsonb, vq.job_context)', 'q_fixed');
SELECT vq_register_handler('logfail', 'h_logfail(jsonb, vq.job_context)', 'q_fixed', max_attempts => 2);
SELECT vq_register_handler('logflood', 'h_logflood(jsonb)', 'q_fixed');
SELECT vq_register_handler('unreg', 'h_one(jsonb)', 'lq');
SELECT vq_register_handler('sleep', 'h_sleep(jsonb, vq.job_context)', 'lq');
SELECT vq_register_handler('nap', 'h_sleep(jsonb, vq.job_context)', 'lq');
SELECT vq_register_handler('progress', 'h_progress(jsonb)', 'lq');
SELECT vq_register_handler('cancellable', 'h_cancellable(jsonb, vq.job_context)', 'lq');
SELECT vq_register_handler('cancel_raise', 'h_cancel_raise(jsonb, vq.job_context)', 'lq', max_attempts => 3);
SELECT vq_register_handler('parent', 'h_parent(jsonb, vq.job_context)', 'lq');
SELECT vq_register_handler('fast', 'h_fast(jsonb, vq.job_context)', 'lq');
SELECT vq_register_handler('returns-null', 'h_returns_null(jsonb)', 'lq');
SELECT vq_register_handler('strict', 'h_strict(jsonb)', 'lq');

-- 'ok' when a job's transitions are exactly the expected outcomes, attempt by attempt.
-- expected: KIND:TO_STATE per attempt (FAILED:ENQUEUED, COMPLETED:COMPLETED, CANCELLED:CANCELLED ...);
-- mode: visible (CLAIMED ENQUEUED->RUNNING, then KIND RUNNING->TO), inline (KIND ENQUEUED->TO), any.
CREATE FUNCTION check_history(eid uuid, expected text[], mode text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    actual text;
    pat text := '';
    e text;
    k text;
    t text;
    piece text;
    vis text;
    inl text;
    i int := 0;
BEGIN
    SELECT coalesce(string_agg(format('%s(%s:%s->%s)', kind, attempt_number, from_state, to_state), ' ' ORDER BY id), '')
      INTO actual FROM vq.job_transition WHERE execution_id = eid;
    FOREACH e IN ARRAY expected LOOP
        k := split_part(e, ':', 1);
        t := split_part(e, ':', 2);
        vis := format('CLAIMED\(%s:ENQUEUED->RUNNING\) %s\(%s:RUNNING->%s\)', i, k, i, t);
        inl := format('%s\(%s:ENQUEUED->%s\)', k, i, t);
        piece := CASE WHEN k = 'CANCELLED' AND mode <> 'visible' THEN inl
                      WHEN mode = 'visible' THEN vis
                      WHEN mode = 'inline' THEN inl
                      ELSE '(' || vis || '|' || inl || ')' END;
        pat := pat || CASE WHEN pat = '' THEN '' ELSE ' ' END || piece;
        IF k IN ('FAILED', 'ABANDONED') AND t = 'ENQUEUED' THEN
            i := i + 1;
        END IF;
    END LOOP;
    IF actual ~ ('^' || pat || '$') THEN
        RETURN 'ok';
    END IF;
    RETURN format('[%s] does not match the expected (%s) [%s]', actual, mode, replace(pat, '\', ''));
END $$;
SQL

# =============================================================================================
log "visible claims: vq.inline_handler_ms = 0"
set_config vq.inline_handler_ms 0

# ---- completion ------------------------------------------------------------------------------
log "one-argument handler completes"
e1="$(enqueue "'one', '{\"tag\": \"one-a\", \"k\": [1, 2]}'")"
wait_state "$e1" COMPLETED 10
assert_eq '{"k": [1, 2], "tag": "one-a"}|false' "$(q "SELECT payload::text || '|' || payload_null FROM calls WHERE tag = 'one-a'")" \
    "payload received by the one-argument handler"
assert_job "$e1" "j.attempt_number = 0 AND j.last_error IS NULL AND j.finished_at IS NOT NULL
                  AND j.started_at IS NOT NULL AND j.created_at <= j.started_at AND j.started_at <= j.finished_at
                  AND j.created_at <= j.scheduled_at AND j.scheduled_at <= j.started_at
                  AND j.worker_pid IS NULL AND j.worker_started_at IS NULL" \
    "completed one-argument job"
assert_history "$e1" visible COMPLETED:COMPLETED
assert_eq "true|true" "$(q "SELECT bool_and(error IS NULL) || '|' || bool_and(at <= (SELECT finished_at FROM vq.job WHERE execution_id = '$e1'))
                       FROM vq.job_transition WHERE execution_id = '$e1'")" "transition errors NULL and times not after finished_at"
assert_eq "$(q "SELECT finished_at FROM vq.job WHERE execution_id = '$e1'")" \
    "$(q "SELECT at FROM vq.job_transition WHERE execution_id = '$e1' AND kind = 'COMPLETED'")" \
    "COMPLETED transition time = finished_at"

log "two-argument handler completes with a job_context matching the row"
e2="$(enqueue "'two', '{\"tag\": \"two-a\"}', now() - interval '1 minute', 'lq', 7, 5, 'ctx-job-1', '{\"m\": {\"n\": 1}}'")"
wait_state "$e2" COMPLETED 10
v="$(q "SELECT (c.ctx = jsonb_build_object('execution_id', j.execution_id, 'job_id', j.job_id, 'handler', j.handler,
                                          'queue', j.queue, 'priority', j.priority, 'attempt_number', j.attempt_number,
                                          'max_attempts', j.max_attempts, 'scheduled_at', j.scheduled_at,
                                          'metadata', j.metadata)
               AND c.execution_id = j.execution_id AND c.row_state = 'RUNNING'
               AND j.job_id = 'ctx-job-1' AND j.handler = 'two' AND j.queue = 'lq' AND j.priority = 7
               AND j.max_attempts = 5 AND j.metadata = '{\"m\": {\"n\": 1}}' AND j.scheduled_at < j.created_at
               AND j.attempt_number = 0 AND j.last_error IS NULL AND j.finished_at IS NOT NULL)::text
               || ' ' || c.ctx::text || ' ' || c.row_state
          FROM calls c JOIN vq.job j ON j.execution_id = c.execution_id WHERE c.tag = 'two-a'")"
[[ "$v" == true\ * ]] || fail "job_context of a two-argument handler vs its row: ${v:-<no call recorded>}"
assert_history "$e2" visible COMPLETED:COMPLETED
assert_eq "INFO|two done|{\"tag\": \"two-a\"}|0" \
    "$(q "SELECT level || '|' || message || '|' || fields::text || '|' || attempt_number FROM vq.job_log WHERE execution_id = '$e2'")" \
    "vq_log line of a successful handler"

# ---- visible run: RUNNING seen from another session ------------------------------------------
log "a 2 s handler is RUNNING for other sessions, on a live executor"
e3="$(enqueue "'sleep', '{\"tag\": \"sleep-2s\", \"secs\": 2}'")"
wait_state "$e3" RUNNING 5
v="$(q "SELECT count(*) FROM vq.job j JOIN pg_stat_activity a ON a.pid = j.worker_pid
         WHERE j.execution_id = '$e3' AND a.datname = current_database()
           AND a.backend_type = 'vq_job executor' AND a.application_name LIKE 'vq_job executor %'
           AND j.worker_started_at IS NOT NULL AND j.started_at IS NOT NULL AND j.finished_at IS NULL")"
assert_eq 1 "$v" "RUNNING job's worker_pid is a live 'vq_job executor' of this database (job: $(q "SELECT row_to_json(j) FROM vq.job j WHERE execution_id = '$e3'"); executors: $(q "SELECT string_agg(pid || ' ' || backend_type || ' ' || application_name, ', ') FROM pg_stat_activity WHERE datname = current_database() AND backend_type <> 'client backend'"))"
assert_eq "1|true" "$(q "SELECT count(*) || '|' || bool_and(r.executor_pid = j.worker_pid AND r.handler = 'sleep' AND r.queue = 'lq'
                                                       AND r.attempt_number = 0 AND r.job_id = j.job_id)
                       FROM vq.running_jobs r JOIN vq.job j USING (execution_id) WHERE execution_id = '$e3'")" \
    "vq.running_jobs lists the running job"
wait_state "$e3" COMPLETED 10
assert_history "$e3" visible COMPLETED:COMPLETED
assert_job "$e3" "j.finished_at - j.started_at >= interval '2 s' AND j.worker_pid IS NULL" "2 s job took its time"
assert_eq 0 "$(q "SELECT count(*) FROM vq.running_jobs WHERE execution_id = '$e3'")" "finished job left vq.running_jobs"

# ---- retries with each backoff strategy, then DEAD_LETTER -----------------------------------
log "retries: FIXED, LINEAR and EXPONENTIAL backoff (base 200 ms, max 1000 ms), 4 attempts"
declare -A R=()
for s in fixed linear exp; do
    R[$s]="$(enqueue "'fail', '{\"tag\": \"$s\"}', NULL, 'q_$s'")"
done
for s in fixed linear exp; do
    wait_state "${R[$s]}" DEAD_LETTER 15
done
# expected delay (ms) before attempts 1, 2, 3 = backoff(n) for n = 1, 2, 3
declare -A DELAYS=([fixed]="200 200 200" [linear]="400 600 800" [exp]="400 800 1000")
for s in fixed linear exp; do
    eid="${R[$s]}"
    assert_history "$eid" visible FAILED:ENQUEUED FAILED:ENQUEUED FAILED:ENQUEUED FAILED:DEAD_LETTER
    assert_eq "boom $s attempt 0|boom $s attempt 1|boom $s attempt 2|boom $s attempt 3" \
        "$(q "SELECT string_agg(error, '|' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$eid' AND kind = 'FAILED'")" \
        "FAILED transition errors ($s)"
    assert_job "$eid" "j.state = 'DEAD_LETTER' AND j.attempt_number = 3 AND j.max_attempts = 4
                       AND j.last_error = 'boom $s attempt 3' AND j.worker_pid IS NULL
                       AND j.finished_at = (SELECT at FROM vq.job_transition t WHERE t.execution_id = j.execution_id
                                             AND t.to_state = 'DEAD_LETTER')" "dead-lettered job ($s)"
    # every attempt was logged by the handler with the scheduled_at it ran for
    assert_eq "0 1 2 3" "$(q "SELECT string_agg(attempt_number::text, ' ' ORDER BY id) FROM vq.job_log WHERE execution_id = '$eid'")" \
        "attempts logged ($s)"
    assert_eq 0 "$(q "SELECT count(*) FROM vq.job_log WHERE execution_id = '$eid'
                        AND (fields ->> 'started_at')::timestamptz < (fields ->> 'scheduled_at')::timestamptz")" \
        "no attempt started before its scheduled_at ($s)"
    n=1
    for d in ${DELAYS[$s]}; do
        v="$(q "SELECT round(extract(epoch FROM (l.fields ->> 'scheduled_at')::timestamptz - t.at) * 1000, 1)
                  FROM vq.job_transition t JOIN vq.job_log l ON l.execution_id = t.execution_id
                 WHERE t.execution_id = '$eid' AND t.kind = 'FAILED' AND t.attempt_number = $((n - 1))
                   AND l.attempt_number = $n")"
        awk -v v="$v" -v d="$d" 'BEGIN { exit !(v != "" && v >= d - 5 && v <= d + 5) }' ||
            fail "$s backoff: attempt $n scheduled [$v] ms after the failure of attempt $((n - 1)), expected $d ms (±5)"
        n=$((n + 1))
    done
    log "  $s: retries scheduled ${DELAYS[$s]// /, } ms after each failure"
done
assert_eq 0 "$(q "SELECT count(*) FROM effects e JOIN vq.job j USING (execution_id) WHERE j.handler = 'fail'")" \
    "writes of failed attempts were rolled back"
assert_eq 12 "$(q "SELECT last_value FROM fail_runs")" "runs of the failing handler (3 jobs x 4 attempts)"
log "  dead-lettered jobs stay put past when another retry would have run"
until_ms="$(q "SELECT ceil(extract(epoch FROM max(finished_at) + interval '1300 ms' - clock_timestamp()) * 1000)
                 FROM vq.job WHERE handler = 'fail'")"
((until_ms > 0)) || until_ms=1
assert_stays "SELECT (SELECT last_value FROM fail_runs) || '/' ||
                     (SELECT count(*) FROM vq.job_transition t JOIN vq.job j USING (execution_id) WHERE j.handler = 'fail') || '/' ||
                     (SELECT string_agg(state::text || attempt_number, ',' ORDER BY execution_id) FROM vq.job WHERE handler = 'fail')" \
    "$(awk -v m="$until_ms" 'BEGIN { printf "%.3f", m / 1000 }')" "dead-lettered jobs (runs/transitions/states)"

# ---- writes commit with success, roll back with failure --------------------------------------
log "a handler's writes: rolled back on failure, committed on success"
ef="$(enqueue "'flaky', '{\"fail_until\": 2}', NULL, NULL, NULL, 3")"
wait_state "$ef" COMPLETED 10
assert_history "$ef" visible FAILED:ENQUEUED FAILED:ENQUEUED COMPLETED:COMPLETED
assert_eq "2:attempt 2" "$(q "SELECT string_agg(attempt || ':' || note, ',') FROM effects WHERE execution_id = '$ef'")" \
    "effects of the flaky job (only the successful attempt's)"
assert_job "$ef" "j.attempt_number = 2 AND j.last_error IS NULL AND j.finished_at IS NOT NULL" \
    "completed job after two failures (last_error cleared)"

# ---- vq_log lines kept when the handler fails -------------------------------------------------
log "vq_log lines of a failing handler are kept"
el="$(enqueue "'logfail', '{}'")"
wait_state "$el" DEAD_LETTER 10
assert_history "$el" visible FAILED:ENQUEUED FAILED:DEAD_LETTER
expected_logs="0|INFO|starting|{\"step\": 1, \"attempt\": 0}
0|WARN|about to fail|
0|ERROR|failing now|{\"k\": [1, 2]}
1|INFO|starting|{\"step\": 1, \"attempt\": 1}
1|WARN|about to fail|
1|ERROR|failing now|{\"k\": [1, 2]}"
assert_eq "$expected_logs" "$(q "SELECT attempt_number || '|' || level || '|' || message || '|' || coalesce(fields::text, '')
                                   FROM vq.job_log WHERE execution_id = '$el' ORDER BY id")" "job logs of the failing handler"
assert_job "$el" "j.last_error = 'logged then failed' AND j.attempt_number = 1" "dead-lettered logfail job"
assert_eq 0 "$(q "SELECT count(*) FROM effects WHERE execution_id = '$el'")" "writes of the failing logfail handler"

log "vq_log is bounded: at most vq.log_max_lines (1000) lines per attempt, vq.log_max_line_bytes (8192) per line"
ef="$(enqueue "'logflood', '{}'")"
wait_state "$ef" COMPLETED 10
assert_eq "1001|1|5 more log line(s) dropped: an attempt keeps at most 1000 (vq.log_max_lines)" \
    "$(q "SELECT count(*) || '|' || count(*) FILTER (WHERE level = 'WARN') || '|' ||
                 (SELECT message FROM vq.job_log WHERE execution_id = '$ef' ORDER BY id DESC LIMIT 1)
            FROM vq.job_log WHERE execution_id = '$ef'")" "log lines kept | WARN lines | the last line"
assert_eq "true|true|true|true" "$(q "SELECT bool_and(octet_length(message) + coalesce(pg_column_size(fields), 0) <= 8192) || '|' ||
                               bool_or(message LIKE 'xxx%[cut: 20000 bytes in all]') || '|' ||
                               bool_or(message LIKE 'big fields [fields dropped: % bytes]' AND fields IS NULL) || '|' ||
                               (bool_or(message = 'line 998') AND NOT bool_or(message = 'line 999'))
                          FROM vq.job_log WHERE execution_id = '$ef'")" \
    "every line within 8192 bytes | the long message cut | the big fields dropped | lines 999+ dropped"

log "a job whose handler is unregistered before it is due still runs what it recorded"
eu="$(q "SELECT vq_enqueue('unreg', '{\"tag\": \"unregistered\"}', now() + interval '1 second')")"
assert_eq t "$(q "SELECT vq_unregister_handler('unreg')")" "vq_unregister_handler('unreg')"
wait_state "$eu" COMPLETED 10
assert_eq 1 "$(q "SELECT count(*) FROM calls WHERE tag = 'unregistered'")" "runs of h_one for the unregistered handler's job"

# ---- live progress -----------------------------------------------------------------------------
log "progress is live in vq.running_jobs and persisted at the end"
ep="$(enqueue "'progress', '{}'")"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.running_jobs WHERE execution_id = '$ep' AND progress_total = 3
                                                        AND progress_succeeded = 1 AND progress_failed = 0)" 5 \
    "progress 1/3 while running"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.running_jobs WHERE execution_id = '$ep' AND progress_total = 3
                                                        AND progress_succeeded = 2 AND progress_failed = 0)" 5 \
    "progress 2/3 while running"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.running_jobs WHERE execution_id = '$ep' AND progress_total = 3
                                                        AND progress_succeeded = 2 AND progress_failed = 1)" 5 \
    "progress 2 succeeded + 1 failed while running"
assert_eq RUNNING "$(q "SELECT state FROM vq.job WHERE execution_id = '$ep'")" "job state while its progress is shown"
wait_state "$ep" COMPLETED 5
assert_job "$ep" "j.progress_total = 3 AND j.progress_succeeded = 2 AND j.progress_failed = 1" "persisted progress"
assert_eq 0 "$(q "SELECT count(*) FROM vq.running_jobs WHERE execution_id = '$ep'")" "finished job left vq.running_jobs"

# ---- cancellation --------------------------------------------------------------------------------
log "cooperative cancellation of a running job"
ec="$(enqueue "'cancellable', '{}'")"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.running_jobs WHERE execution_id = '$ec')" 5 "cancellable job running"
t_cancel="$(q "SELECT clock_timestamp()")"
assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$ec')")" "vq_cancel of a running job"
wait_for "SELECT state <> 'RUNNING' FROM vq.job WHERE execution_id = '$ec'" 3 "cancelled job to stop"
assert_job "$ec" "j.state = 'CANCELLED' AND j.cancel_requested AND j.last_error = 'cancelled while running'
                  AND j.finished_at < '$t_cancel'::timestamptz + interval '1 s'" \
    "running job after a cancellation request (handler returned early): CANCELLED"
assert_eq cancelled "$(q "SELECT note FROM effects WHERE execution_id = '$ec'")" \
    "cancellable handler saw vq_job_cancelled() (the writes of a handler that returned are kept)"
assert_history "$ec" visible CANCELLED:CANCELLED
assert_eq CANCELLED "$(q "SELECT vq_cancel('$ec')")" "vq_cancel of a finished job returns its state"

log "a handler that raises after a cancel request: CANCELLED, not retried, its writes rolled back"
er="$(enqueue "'cancel_raise', '{}'")"
wait_for "SELECT EXISTS (SELECT 1 FROM vq.running_jobs WHERE execution_id = '$er')" 5 "cancel_raise job running"
assert_eq CANCEL_REQUESTED "$(q "SELECT vq_cancel('$er')")" "vq_cancel of the running cancel_raise job"
wait_state "$er" CANCELLED 3
assert_job "$er" "j.attempt_number = 0 AND j.last_error = 'cancelled while running: stopping: cancelled'" \
    "cancel_raise job: attempt 0, last_error with the handler's error"
assert_history "$er" visible CANCELLED:CANCELLED
assert_eq 0 "$(q "SELECT count(*) FROM effects WHERE execution_id = '$er'")" "writes of the handler that raised"
assert_stays "SELECT state || '/' || attempt_number FROM vq.job WHERE execution_id = '$er'" 1 "cancelled job (no retry)"
assert_eq "" "$(q "SELECT vq_cancel(gen_random_uuid())")" "vq_cancel of an unknown job returns NULL"

log "vq_cancel of a future ENQUEUED job: CANCELLED, and it never runs"
ex="$(enqueue "'one', '{\"tag\": \"never\"}', clock_timestamp() + interval '1 s'")"
assert_eq CANCELLED "$(q "SELECT vq_cancel('$ex')")" "vq_cancel of an enqueued future job"
assert_job "$ex" "j.state = 'CANCELLED' AND j.finished_at IS NOT NULL AND j.attempt_number = 0" "cancelled job row"
assert_history "$ex" any CANCELLED:CANCELLED
assert_eq CANCELLED "$(q "SELECT vq_cancel('$ex')")" "second vq_cancel of the cancelled job"
until_ms="$(q "SELECT ceil(extract(epoch FROM scheduled_at + interval '700 ms' - clock_timestamp()) * 1000) FROM vq.job WHERE execution_id = '$ex'")"
((until_ms > 0)) || until_ms=1
assert_stays "SELECT (SELECT count(*) FROM calls WHERE tag = 'never') || '/' ||
                     (SELECT state FROM vq.job WHERE execution_id = '$ex') || '/' ||
                     (SELECT count(*) FROM vq.job_transition WHERE execution_id = '$ex')" \
    "$(awk -v m="$until_ms" 'BEGIN { printf "%.3f", m / 1000 }')" "cancelled future job (runs/state+transitions)"
assert_eq 0 "$(q "SELECT count(*) FROM calls WHERE tag = 'never'")" "the cancelled job never ran"

# ---- durable context -------------------------------------------------------------------------------
log "durable context: a job enqueued by a handler inherits the running job's metadata"
epar="$(enqueue "'parent', '{\"child_tag\": \"child-1\"}', NULL, NULL, NULL, NULL, NULL,
                 '{\"tenant\": {\"id\": 42}, \"trace\": {\"id\": \"t-1\"}}'")"
wait_state "$epar" COMPLETED 10
echild="$(q "SELECT note FROM effects WHERE execution_id = '$epar'")"
[[ -n "$echild" ]] || fail "the parent job recorded no child execution_id"
wait_state "$echild" COMPLETED 10
assert_job "$echild" "j.metadata = '{\"own\": {\"x\": 1}, \"tenant\": {\"id\": 42}, \"trace\": {\"id\": \"t-1\"}}'::jsonb" \
    "metadata of the child job (own + parent's context)"
assert_eq '{"own": {"x": 1}, "trace": {"id": "t-1"}, "tenant": {"id": 42}}' \
    "$(q "SELECT ctx -> 'metadata' FROM calls WHERE tag = 'child-1'")" "metadata the child handler received"
# the context is bound only while the parent runs: later parents without metadata pass none on
for i in 1 2 3 4; do
    e="$(enqueue "'parent', '{\"child_tag\": \"plain-$i\"}'")"
    wait_state "$e" COMPLETED 10
    c="$(q "SELECT note FROM effects WHERE execution_id = '$e'")"
    assert_job "$c" "j.metadata = '{\"own\": {\"x\": 1}}'::jsonb" "child $i of a parent without metadata (no leaked context)"
done

# ---- NULL payloads ---------------------------------------------------------------------------------
log "NULL payloads: plain handler, handler returning NULL, STRICT handler"
en1="$(enqueue "'one'")"
en2="$(enqueue "'returns-null', '{\"a\": 1}'")"
en3="$(enqueue "'returns-null', NULL")"
en4="$(enqueue "'strict', NULL")"
en5="$(enqueue "'strict', '{\"s\": 1}'")"
for e in "$en1" "$en2" "$en3" "$en4" "$en5"; do
    wait_state "$e" COMPLETED 10
    assert_history "$e" visible COMPLETED:COMPLETED
    assert_job "$e" "j.last_error IS NULL AND j.attempt_number = 0" "job with a NULL payload or result"
done
assert_eq "one|true" "$(q "SELECT tag || '|' || payload_null FROM calls WHERE tag = 'one' AND payload IS NULL")" \
    "a non-strict handler is called with a NULL payload"
assert_eq "false,true" "$(q "SELECT string_agg(payload_null::text, ',' ORDER BY payload_null) FROM calls WHERE tag = 'returns-null'")" \
    "handler returning NULL was called for both jobs"
assert_eq '{"s": 1}' "$(q "SELECT string_agg(payload::text, ',') FROM calls WHERE tag = 'strict'")" \
    "a STRICT handler is not called for a NULL payload"

# =============================================================================================
log "default run mode (vq.inline_handler_ms back to its default)"
reset_config vq.inline_handler_ms

log "a fast handler runs inline after its first runs: one COMPLETED transition from ENQUEUED"
executors="$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'vq_job executor'")"
((executors >= 1)) || fail "no vq_job executor serves this database"
inline=0
for i in $(seq 1 40); do
    e="$(enqueue "'fast', '{}'")"
    wait_state "$e" COMPLETED 10
    seen="$(q "SELECT row_state FROM calls WHERE tag = 'fast' AND execution_id = '$e'")"
    case "$seen" in
        ENQUEUED) assert_history "$e" inline COMPLETED:COMPLETED; inline=$((inline + 1)) ;;
        RUNNING)  assert_history "$e" visible COMPLETED:COMPLETED ;;
        *) fail "fast job $e: the handler saw its row as [$seen]" ;;
    esac
    if ((i == 1)) && [[ "$seen" != RUNNING ]]; then
        fail "the first run of a handler must be claimed visibly (the handler saw its row $seen)"
    fi
    ((inline >= 6)) && break
done
((inline >= 6)) || fail "a fast handler never ran inline enough: $inline inline runs of $i"
# every executor claimed the handler visibly the first time it ran it
v="$(q "SELECT string_agg(pid || ':' || seq, '  ') FROM (
          SELECT pid, string_agg(left(row_state, 1), '' ORDER BY id) AS seq FROM calls WHERE tag = 'fast' GROUP BY pid) s
        WHERE seq !~ '^R'")"
assert_eq "" "$v" "executors whose first run of the fast handler was not visible (R = visible, E = inline)"
log "  fast handler: $inline inline runs after $((i - inline)) visible runs on $executors executor(s)"

log "inline: a failing handler's writes roll back, its logs stay, retries and dead letter as before"
# these handlers already ran (fast) on some executor: their retries may now run inline
ef2="$(enqueue "'flaky', '{\"fail_until\": 2}', NULL, NULL, NULL, 3")"
el2="$(enqueue "'logfail', '{}'")"
wait_state "$ef2" COMPLETED 10
wait_state "$el2" DEAD_LETTER 10
assert_history "$ef2" any FAILED:ENQUEUED FAILED:ENQUEUED COMPLETED:COMPLETED
assert_history "$el2" any FAILED:ENQUEUED FAILED:DEAD_LETTER
assert_eq "2:attempt 2" "$(q "SELECT string_agg(attempt || ':' || note, ',') FROM effects WHERE execution_id = '$ef2'")" \
    "effects of the flaky job (default mode)"
assert_eq "$expected_logs" "$(q "SELECT attempt_number || '|' || level || '|' || message || '|' || coalesce(fields::text, '')
                                   FROM vq.job_log WHERE execution_id = '$el2' ORDER BY id")" "job logs of the failing handler (default mode)"
assert_eq 0 "$(q "SELECT count(*) FROM effects WHERE execution_id = '$el2'")" "writes of the failing logfail handler (default mode)"
log "  modes seen: flaky [$(q "SELECT string_agg(kind || '(' || from_state || ')', ' ' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$ef2'")]"

# =============================================================================================
log "timeout: vq.execution_timeout_ms = 500, a handler sleeping 5 s"
set_config vq.execution_timeout_ms 500
et="$(enqueue "'sleep', '{\"tag\": \"timeout\", \"secs\": 5}', NULL, NULL, NULL, 2")"
wait_state "$et" DEAD_LETTER 8
assert_history "$et" any ABANDONED:ENQUEUED ABANDONED:DEAD_LETTER
assert_eq "execution timed out after 500 ms|execution timed out after 500 ms" \
    "$(q "SELECT string_agg(error, '|' ORDER BY id) FROM vq.job_transition WHERE execution_id = '$et' AND kind = 'ABANDONED'")" \
    "ABANDONED transition errors"
assert_job "$et" "j.attempt_number = 1 AND j.last_error = 'execution timed out after 500 ms' AND j.finished_at IS NOT NULL
                  AND j.worker_pid IS NULL" "timed-out job after its last attempt"
# each attempt was cut well before its 5 s sleep: from the handler's first log line to ABANDONED
v="$(q "SELECT string_agg(round(extract(epoch FROM t.at - l.logged_at) * 1000)::text, ' ' ORDER BY t.id)
          FROM vq.job_transition t JOIN vq.job_log l ON l.execution_id = t.execution_id AND l.attempt_number = t.attempt_number
         WHERE t.execution_id = '$et' AND t.kind = 'ABANDONED'")"
for ms in $v; do
    ((ms >= 450 && ms <= 1500)) || fail "a timed-out attempt ran ${ms} ms before ABANDONED (expected 500..1500; all: $v)"
done
[[ "$(wc -w <<<"$v")" == 2 ]] || fail "expected a log line and an ABANDONED transition per attempt, got durations [$v]"
# re-enqueued due at once (no backoff): attempt 1 began right after attempt 0 was abandoned
assert_job "$et" "j.scheduled_at <= (SELECT at FROM vq.job_transition t WHERE t.execution_id = j.execution_id
                                       AND t.kind = 'ABANDONED' AND t.to_state = 'ENQUEUED')
                  AND (SELECT l.logged_at FROM vq.job_log l WHERE l.execution_id = j.execution_id AND l.attempt_number = 1)
                      - (SELECT at FROM vq.job_transition t WHERE t.execution_id = j.execution_id
                          AND t.kind = 'ABANDONED' AND t.to_state = 'ENQUEUED') < interval '300 ms'" \
    "an abandoned attempt is re-enqueued due at once and re-run within 300 ms"
assert_eq 0 "$(q "SELECT count(*) FROM calls WHERE tag = 'timeout'")" "writes of timed-out attempts were rolled back"
log "  timed-out attempts ran ${v// / ms, } ms"

log "timeout of a handler that runs inline (fast until now): ABANDONED from ENQUEUED"
# 'nap' (h_sleep with 0 s) runs until every executor has run it inline at least once
mapfile -t executor_pids < <(q "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'vq_job executor'")
declare -A warm=()
for i in $(seq 1 60); do
    e="$(enqueue "'nap', '{\"tag\": \"nap-$i\", \"secs\": 0}'")"
    wait_state "$e" COMPLETED 10
    if [[ "$(q "SELECT count(*) FROM vq.job_transition WHERE execution_id = '$e'")" == 1 ]]; then
        warm[$(q "SELECT pid FROM calls WHERE tag = 'nap-$i'")]=1
    fi
    all=1
    for pid in "${executor_pids[@]}"; do [[ -n "${warm[$pid]:-}" ]] || all=0; done
    ((all)) && break
done
mode=any
((all)) && mode=inline
en="$(enqueue "'nap', '{\"tag\": \"nap-timeout\", \"secs\": 5}', NULL, NULL, NULL, 1")"
wait_state "$en" DEAD_LETTER 5
assert_history "$en" "$mode" ABANDONED:DEAD_LETTER
assert_job "$en" "j.last_error = 'execution timed out after 500 ms' AND j.attempt_number = 0
                  AND j.finished_at - (SELECT logged_at FROM vq.job_log l WHERE l.execution_id = j.execution_id) < interval '1500 ms'" \
    "inline job cut by the timeout"
log "  'nap' warmed on ${#warm[@]} of ${#executor_pids[@]} executors after $i jobs; timeout transitions checked as $mode"
reset_config vq.execution_timeout_ms

log "the executors still run jobs after their handlers were cancelled"
eh="$(enqueue "'one', '{\"tag\": \"after-timeouts\"}'")"
wait_state "$eh" COMPLETED 10

log "PASS"

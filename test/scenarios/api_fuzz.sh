#!/usr/bin/env bash
# api_fuzz.sh: every SQL function of the extension called with bad input.
#   For each function (the API and the administration functions, as a superuser, so that
#   privilege checks do not hide what is behind them), each argument in turn gets every bad
#   value of its type (NULL, empty, 10 MB, quotes and semicolons, unicode, 129 characters,
#   extreme numbers, non-object and deeply nested JSON, empty / NULL-holding / 100,000-element
#   arrays (of text, uuid, integer, bigint, timestamptz: the worker protocol's vq_take_jobs,
#   vq_reply_jobs, vq_extend_leases, vq_log_jobs, vq_progress_jobs), infinite timestamps,
#   leases out of bounds, names that are not identifiers) while the others keep a
#   plausible value; then, for VQ_FUZZ_SECS seconds (default 20), calls with several bad
#   arguments at once, chosen at random. Reports calls made and distinct SQLSTATEs, and fails
#   on any backend crash, any internal error (SQLSTATE XX000: an error with no proper code),
#   and any error of an API function (not the internal vq.* helpers) whose SQLSTATE is not a
#   vq one (VQxxx) nor 42501 (privileges) / 22023 (invalid parameter value).
#   `make fuzz` runs it for 5 minutes.
# Runs against $PGDATABASE (a fresh database with vq_job); exits non-zero on failure.
# shellcheck disable=SC2119  # qs reads its script from stdin, not from arguments
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

SECS="${VQ_FUZZ_SECS:-20}"

log "setup: a handler, a queue and the fuzzing functions"
qs >/dev/null <<'SQL'
SELECT vq_create_queue('fz_q');
CREATE FUNCTION fz_noop(p jsonb) RETURNS void LANGUAGE sql AS '';
SELECT vq_register_handler('fz_h', 'fz_noop(jsonb)');
SELECT vq_register_notify_handler('fz_n', 'fz_channel');
-- jobs for the takes to take (a take of fz_n, with its other arguments bad or not)
SELECT vq_alter_queue('default', max_concurrent_jobs => 10000);
SELECT count(vq_enqueue('fz_n', jsonb_build_object('i', g))) FROM generate_series(1, 200) g;
CREATE TABLE fz_result (fn text, pos int, value text, sqlstate text, message text);

-- Bad values (SQL expressions) for an argument of type t.
CREATE FUNCTION fz_bad(t regtype) RETURNS SETOF text LANGUAGE sql AS $$
    SELECT 'NULL::' || t::text
    UNION ALL SELECT v FROM unnest(CASE
      WHEN t IN ('text'::regtype, 'name'::regtype) THEN ARRAY[
        $v$''$v$, $v$repeat('x', 10 * 1024 * 1024)$v$, $v$'a''b"c;--'$v$, $v$'ü€😀'$v$,
        $v$repeat('n', 129)$v$, $v$'fz_h'$v$, $v$'notify:x'$v$, $v$E'\\x01\\x1b[2J'$v$, $v$'-'$v$,
        $v$'schema.f(jsonb'$v$, $v$'fz channel'$v$]
      WHEN t IN ('integer'::regtype, 'bigint'::regtype, 'smallint'::regtype) THEN ARRAY[
        '0', '-1', '-2147483648', '2147483647', '1001', '10001']
      WHEN t = 'jsonb'::regtype THEN ARRAY[
        $v$'[]'::jsonb$v$, $v$'"s"'::jsonb$v$, $v$'null'::jsonb$v$, $v$'1'::jsonb$v$,
        $v$(SELECT ('[' || repeat('[', 5000) || repeat(']', 5000) || ']')::jsonb)$v$,
        $v$jsonb_build_object('blob', repeat('y', 10 * 1024 * 1024))$v$,
        $v$'{"queues": {"x": {"sleepDelayMs": -1}}, "contracts": {"": {}}}'::jsonb$v$,
        $v$'{"a": {"b": null}}'::jsonb$v$]
      WHEN t = 'jsonb[]'::regtype THEN ARRAY[
        $v$'{}'::jsonb[]$v$, $v$ARRAY[NULL]::jsonb[]$v$, $v$'{{1},{2}}'::jsonb[]$v$,
        $v$(SELECT array_agg('{}'::jsonb) FROM generate_series(1, 100000))$v$]
      WHEN t = 'text[]'::regtype THEN ARRAY[
        $v$'{}'::text[]$v$, $v$ARRAY[NULL]::text[]$v$, $v$ARRAY['']$v$, $v$'{{a},{b}}'::text[]$v$,
        $v$(SELECT array_agg('k' || g) FROM generate_series(1, 100000) g)$v$,
        -- (names and words the worker protocol's arrays take: a function handler where an
        -- external one is needed, an external one, reply outcomes, log levels)
        $v$ARRAY['fz_h']$v$, $v$ARRAY['fz_n']$v$, $v$ARRAY['fz_n', 'fz_n']$v$, $v$ARRAY['fail']$v$,
        $v$ARRAY['retry']$v$, $v$ARRAY['release']$v$, $v$ARRAY['ERROR']$v$,
        $v$(SELECT array_agg('fz_n'::text) FROM generate_series(1, 65))$v$]
      WHEN t = 'uuid'::regtype THEN ARRAY[
        $v$'00000000-0000-0000-0000-000000000000'::uuid$v$, 'gen_random_uuid()']
      WHEN t = 'uuid[]'::regtype THEN ARRAY[
        $v$'{}'::uuid[]$v$, $v$ARRAY[NULL]::uuid[]$v$, $v$ARRAY['00000000-0000-0000-0000-000000000000'::uuid]$v$,
        $v$ARRAY[gen_random_uuid(), gen_random_uuid()]$v$,
        $v$ARRAY[[gen_random_uuid()], [gen_random_uuid()]]$v$,
        $v$(SELECT array_agg(gen_random_uuid()) FROM generate_series(1, 100000))$v$]
      WHEN t IN ('integer[]'::regtype, 'bigint[]'::regtype) THEN ARRAY[
        $v$'{}'::$v$ || t::text, 'ARRAY[NULL]::' || t::text, 'ARRAY[-1]::' || t::text,
        'ARRAY[-2147483648]::' || t::text, 'ARRAY[2147483647]::' || t::text, 'ARRAY[1, 2]::' || t::text,
        $v$'{{1},{2}}'::$v$ || t::text,
        '(SELECT array_agg(g)::' || t::text || ' FROM generate_series(1, 100000) g)']
      WHEN t = 'timestamp with time zone[]'::regtype THEN ARRAY[
        $v$'{}'::timestamptz[]$v$, $v$ARRAY[NULL]::timestamptz[]$v$, $v$ARRAY['infinity'::timestamptz]$v$,
        $v$ARRAY['-infinity'::timestamptz]$v$, $v$ARRAY['4713-01-01 BC'::timestamptz]$v$,
        $v$ARRAY['294276-12-31'::timestamptz]$v$]
      WHEN t = 'timestamp with time zone'::regtype THEN ARRAY[
        $v$'infinity'::timestamptz$v$, $v$'-infinity'::timestamptz$v$, $v$'4713-01-01 BC'::timestamptz$v$,
        $v$'294276-12-31'::timestamptz$v$]
      WHEN t = 'interval'::regtype THEN ARRAY[
        $v$'-1 day'::interval$v$, $v$'178000000 years'::interval$v$, $v$'0'::interval$v$,
        $v$'999 ms'::interval$v$, $v$'24 hours 1 ms'::interval$v$, $v$'1 month'::interval$v$]
      WHEN t = 'regprocedure'::regtype THEN ARRAY[
        $v$'pg_sleep(float8)'::regprocedure$v$, $v$'fz_bad(regtype)'::regprocedure$v$, '0::regprocedure']
      WHEN t = 'regrole'::regtype THEN ARRAY[$v$'pg_read_all_data'::regrole$v$, '0::regrole']
      WHEN t = 'boolean'::regtype THEN ARRAY['true', 'false']
      ELSE ARRAY[]::text[] END) AS v
$$;

-- A plausible value for an argument of type t (the others of a call).
CREATE FUNCTION fz_ok(t regtype) RETURNS text LANGUAGE sql AS $$
    SELECT CASE
      WHEN t IN ('text'::regtype, 'name'::regtype) THEN $v$'fz_h'$v$
      WHEN t IN ('integer'::regtype, 'bigint'::regtype, 'smallint'::regtype) THEN '1'
      WHEN t = 'jsonb'::regtype THEN $v$'{}'::jsonb$v$
      WHEN t = 'jsonb[]'::regtype THEN $v$ARRAY['{}'::jsonb]$v$
      WHEN t = 'text[]'::regtype THEN $v$ARRAY['k1']$v$
      WHEN t = 'uuid'::regtype THEN 'gen_random_uuid()'
      WHEN t = 'uuid[]'::regtype THEN 'ARRAY[gen_random_uuid()]'
      WHEN t IN ('integer[]'::regtype, 'bigint[]'::regtype) THEN 'ARRAY[0]::' || t::text
      WHEN t = 'timestamp with time zone[]'::regtype THEN $v$ARRAY['2999-01-01'::timestamptz]$v$
      WHEN t = 'timestamp with time zone'::regtype THEN $v$'2999-01-01'::timestamptz$v$
      WHEN t = 'interval'::regtype THEN $v$'1 hour'::interval$v$
      WHEN t = 'regprocedure'::regtype THEN $v$'fz_noop(jsonb)'::regprocedure$v$
      WHEN t = 'regrole'::regtype THEN 'current_user::regrole'
      WHEN t = 'boolean'::regtype THEN 'false'
      ELSE 'NULL::' || t::text END
$$;

-- Call fn with args; record what happened.
CREATE FUNCTION fz_call(fn regprocedure, pos int, value text, args text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    st text;
    msg text;
BEGIN
    BEGIN
        EXECUTE format('SELECT %s(%s)', (SELECT p.oid::regproc FROM pg_proc p WHERE p.oid = fn),
                       array_to_string(args, ', '));
        st := '00000';
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
    END;
    INSERT INTO fz_result VALUES (fn::text, pos, left(value, 60), st, left(msg, 200));
END $$;

-- Every bad value in every position of fn, the others plausible.
CREATE FUNCTION fz_each(fn regprocedure) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    types regtype[] := (SELECT proargtypes::regtype[] FROM pg_proc WHERE oid = fn);
    n int := coalesce(array_length(types, 1), 0);
    args text[];
    v text;
    calls int := 0;
BEGIN
    IF n = 0 THEN
        PERFORM fz_call(fn, 0, '', '{}');
        RETURN 1;
    END IF;
    FOR i IN 1 .. n LOOP
        FOR v IN SELECT fz_bad(types[i - 1]) LOOP
            args := ARRAY(SELECT fz_ok(types[k - 1]) FROM generate_series(1, n) k);
            args[i] := v;
            PERFORM fz_call(fn, i, v, args);
            calls := calls + 1;
        END LOOP;
    END LOOP;
    RETURN calls;
END $$;

-- Random calls with several bad arguments, for secs seconds.
CREATE FUNCTION fz_random(fns regprocedure[], secs float8) RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + make_interval(secs => secs);
    fn regprocedure;
    types regtype[];
    args text[];
    calls int := 0;
BEGIN
    WHILE clock_timestamp() < deadline LOOP
        fn := fns[1 + floor(random() * array_length(fns, 1))::int];
        types := (SELECT proargtypes::regtype[] FROM pg_proc WHERE oid = fn);
        args := ARRAY(SELECT CASE WHEN random() < 0.5 THEN fz_ok(t)
                                  ELSE (SELECT b FROM fz_bad(t) b ORDER BY random() LIMIT 1) END
                        FROM unnest(types) t);
        PERFORM fz_call(fn, -1, array_to_string(args, ', '), args);
        calls := calls + 1;
    END LOOP;
    RETURN calls;
END $$;
SQL

# the extension's functions, but not trigger functions and not the fuzzing ones
FNS="$(q "SELECT string_agg(p.oid::text, ' ' ORDER BY p.oid)
          FROM pg_proc p JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
          JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'vq_job'
         WHERE p.prokind = 'f' AND p.prorettype <> 'trigger'::regtype")"
crashes=()
calls=0
log "1. each bad value in each position ($(wc -w <<<"$FNS") functions)"
for fn in $FNS; do
    if ! n="$(q "SELECT fz_each($fn::oid::regprocedure)" 2>&1)"; then
        crashes+=("$(q "SELECT $fn::oid::regprocedure"): $n")
        wait_ready 30
        continue
    fi
    calls=$((calls + n))
done
log "2. random calls with several bad arguments for $SECS s"
if ! n="$(q "SELECT fz_random(ARRAY(SELECT unnest(string_to_array('$FNS', ' '))::oid::regprocedure), $SECS)" 2>&1)"; then
    crashes+=("random calls: $n")
    wait_ready 30
else
    calls=$((calls + n))
fi

log "calls: $calls; SQLSTATEs (count):"
q "SELECT sqlstate || ' ' || count(*) FROM fz_result GROUP BY sqlstate ORDER BY count(*) DESC" | sed 's/^/   /'
internal="$(q "SELECT string_agg(DISTINCT fn || ' (' || pos || ' = ' || value || '): ' || message, E'\n')
                FROM fz_result WHERE sqlstate = 'XX000'")"
# the API's own errors (not the internal vq.* helpers') carry a vq SQLSTATE, or a standard one
# for what PostgreSQL itself refuses: privileges, an invalid parameter value
unclear="$(q "SELECT string_agg(DISTINCT sqlstate || ' ' || fn || ': ' || message, E'\n')
               FROM fz_result WHERE fn NOT LIKE 'vq.%' AND sqlstate !~ '^(VQ|00000|42501|22023)'")"
# the worker protocol's functions were among those called, and each got past its argument
# checks at least once (a call that succeeded)
assert_eq "vq_extend_leases 1|vq_log_jobs 1|vq_progress_jobs 1|vq_reply_jobs 1|vq_take_jobs 1" \
    "$(q "SELECT string_agg(f || ' ' || ok::int, '|' ORDER BY f) FROM (
            SELECT split_part(fn, '(', 1) AS f, bool_or(sqlstate = '00000') AS ok FROM fz_result
             WHERE split_part(fn, '(', 1) IN ('vq_take_jobs', 'vq_reply_jobs', 'vq_extend_leases', 'vq_log_jobs',
                                             'vq_progress_jobs')
             GROUP BY 1) x")" "protocol functions called (1: one call at least succeeded)"
((${#crashes[@]} == 0)) || fail "backend crashes (or lost connections): $(printf '%s; ' "${crashes[@]}")"
[[ -z "$internal" ]] || fail "internal errors (XX000):
$internal"
[[ -z "$unclear" ]] || fail "API errors without a vq SQLSTATE:
$unclear"
log "PASS: $calls calls, no crash, no internal error"

#!/usr/bin/env bash
# examples.sh: runs every client example in examples/ (Node with pg, Python with psycopg 3)
# against this cluster and checks what it did in the database.
#   0. examples/schema.sql (roles shop_app / shop_consumer, tables, handlers, queues); npm ci;
#   1. orders, straight to the server: the committed order has its row, its e-mail job (metadata
#      = per-call namespace + the transaction's durable context), its follow-up job (ENQUEUED,
#      due in 3 days) and its outbox row (context captured, headers kept); the rolled-back order
#      left no row, job or outbox row; no context is bound afterwards; the e-mail handler ran
#      with the context and the relay turned the outbox row into a NOTIFY job carrying it;
#   2. the same through PgBouncer in transaction pooling mode (its own pgbouncer, one server
#      connection, so every transaction of every client shares it): the context set with
#      SET LOCAL semantics works and does not leak, while a session-level vq_context_set does
#      leak to the next client (why the examples never rely on session state);
#   3. the NOTIFY consumers (the vq-job and vq_job libraries, clients/node and clients/python): the orders' invoice
#      jobs and, per language, a job that completes, one that fails once then completes, one
#      that fails until it is dead-lettered, with the exact transitions and invoice rows; the
#      consumer stops cleanly on SIGTERM;
#   4. stats: the JSON equals vq.queue_stats / vq_metrics() as the same role sees them, with
#      the counts this run expects;
#   5. the exporters: HTTP 200, text format, HELP/TYPE before each family's samples, every
#      sample well formed, the samples equal vq_metrics(); clean stop on SIGTERM.
# A language whose runtime is absent (node + npm; /usr/bin/python3 with psycopg) is skipped and
# the skip is printed; pgbouncer likewise for step 2. scripts/lib.sh installs all of them.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/../../scripts/lib.sh"

EX="$VQ_REPO_ROOT/examples"
PY=/usr/bin/python3           # Debian's, which has python3-psycopg (not the first python3 on PATH)
EX_BOUNCER_PORT=56200         # names pgbouncer's socket, in a directory of its own: cannot collide
TMPD="$(mktemp -d /tmp/vq_examples.XXXXXX)"
declare -A BG_PID=()

cleanup() {
    local rc=$? name
    set +e
    for name in "${!BG_PID[@]}"; do
        kill -KILL "${BG_PID[$name]}" 2>/dev/null
        wait "${BG_PID[$name]}" 2>/dev/null
    done
    bouncer_stop
    drop_roles shop_app shop_consumer
    if ((rc != 0)); then
        for name in "$TMPD"/*.log; do
            [[ -s "$name" ]] && { echo "----- ${name##*/}"; tail -n 30 "$name"; }
        done
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT
# a timeout's signal must run cleanup too: pgbouncer runs as a daemon, outside our process group
trap 'exit 143' TERM
trap 'exit 130' INT

# ---- helpers ---------------------------------------------------------------------------------

# bg_start NAME CMD...: run CMD (a program, so that its pid is the one signalled) in the
# background, output in $TMPD/NAME.log.
bg_start() {
    local name="$1"
    shift
    "$@" >"$TMPD/$name.log" 2>&1 &
    BG_PID[$name]=$!
}

# bg_wait_line NAME REGEX SECS: until NAME's output has a line matching REGEX (fail early if it exited).
bg_wait_line() {
    local name="$1" re="$2" deadline=$(($(date +%s%N) + $3 * 1000000000))
    until grep -qE -- "$re" "$TMPD/$name.log"; do
        kill -0 "${BG_PID[$name]}" 2>/dev/null ||
            fail "$name exited before printing /$re/: $(tail -n 20 "$TMPD/$name.log")"
        (($(date +%s%N) < deadline)) || fail "$name printed no line matching /$re/ within $3 s"
        sleep 0.02
    done
}

# bg_stop NAME: SIGTERM, then NAME must exit with status 0 within 10 s.
bg_stop() {
    local name="$1" pid="${BG_PID[$1]}" rc=0 i
    kill -TERM "$pid"
    for ((i = 0; i < 500; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.02
    done
    kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; fail "$name did not stop within 10 s of SIGTERM"; }
    wait "$pid" || rc=$?
    unset "BG_PID[$name]"
    assert_eq 0 "$rc" "exit status of $name after SIGTERM"
}

# check NAME SQL [psql args]: SQL returns the failed checks, one per row; fail if any.
check() {
    local name="$1" sql="$2" got
    shift 2
    got="$(qs "$@" <<<"$sql")" || fail "$name: query failed"
    [[ -z "$got" ]] || fail "$name: $(tr '\n' ';' <<<"$got")"
}

# ---- runtimes --------------------------------------------------------------------------------
LANGS=()
if command -v node >/dev/null && command -v npm >/dev/null; then
    LANGS+=(node)
else
    log "SKIP the Node examples: node or npm is not installed"
fi
if [[ -x "$PY" ]] && "$PY" -c 'import psycopg' 2>/dev/null; then
    LANGS+=(python)
else
    log "SKIP the Python examples: $PY with psycopg (python3-psycopg) is not installed"
fi
PGBOUNCER="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
[[ -x "$PGBOUNCER" ]] || { log "SKIP the PgBouncer runs: pgbouncer is not installed"; PGBOUNCER=""; }
if ((${#LANGS[@]} == 0)); then
    log "SKIP examples: no runtime"
    exit 0
fi

# example LANG NAME: EXAMPLE_CMD = the command that runs example NAME of LANG.
example() {
    case "$1" in
        node) EXAMPLE_CMD=(node "$EX/node/$2.js") ;;
        python) EXAMPLE_CMD=("$PY" "$EX/python/$2.py") ;;
    esac
}

# ---- 0. set-up -------------------------------------------------------------------------------
log "0. examples/schema.sql; npm ci"
drop_roles shop_app shop_consumer
psql -XAtq -v ON_ERROR_STOP=1 -f "$EX/schema.sql" >/dev/null
if [[ " ${LANGS[*]} " == *" node "* ]]; then
    (cd "$EX/node" && npm ci --no-audit --no-fund --loglevel=error >"$TMPD/npm.log" 2>&1) ||
        fail "npm ci in examples/node failed: $(tail -n 20 "$TMPD/npm.log")"
fi

# ---- 1. and 2. orders --------------------------------------------------------------------------

# check_orders LANG JSON: what orders.js / orders.py printed matches the database.
check_orders() {
    local lang="$1" out="$2" ids
    log "   $out"
    check "orders ($lang)" "$(cat <<'SQL'
WITH o AS (SELECT :'out'::jsonb AS o),
     v AS (SELECT o, o->'committed' AS c, o->>'label' AS lbl,
                  jsonb_build_object('id', (o->>'label') || '-req-1', 'client', :'lang') AS ctx FROM o)
SELECT what FROM v, LATERAL (VALUES
  ('one row for the committed order',
   (SELECT count(*) = 1 FROM shop.orders WHERE id = (c->>'order_id')::bigint AND customer = lbl || '-committed')),
  ('no row for the rolled-back order',
   NOT EXISTS (SELECT FROM shop.orders WHERE customer = lbl || '-rolled-back')),
  ('the e-mail job: handler, job_id, payload, metadata = per-call namespace + durable context, by shop_app',
   EXISTS (SELECT FROM vq.job WHERE execution_id = (c->>'email_job')::uuid AND handler = 'shop.confirm-email'
              AND job_id = 'order-' || (c->>'order_id') || '-email' AND payload = jsonb_build_object('order_id', c->'order_id')
              AND metadata = jsonb_build_object('request', ctx, 'order', jsonb_build_object('customer', lbl || '-committed'))
              AND enqueued_by = 'shop_app'::regrole)),
  ('the follow-up job: ENQUEUED, due in 3 days, metadata = durable context',
   EXISTS (SELECT FROM vq.job WHERE execution_id = (c->>'follow_up_job')::uuid AND handler = 'shop.follow-up'
              AND state = 'ENQUEUED' AND scheduled_at BETWEEN now() + interval '71 hours' AND now() + interval '73 hours'
              AND metadata = jsonb_build_object('request', ctx))),
  ('the outbox row: target, payload, headers kept, context captured',
   EXISTS (SELECT FROM vq.outbox WHERE id = (c->>'outbox_id')::bigint AND destination = 'shop.render-invoice'
              AND payload->'order_id' = c->'order_id' AND headers ? 'source'
              AND metadata->'context' = jsonb_build_object('request', ctx))),
  ('no job and no outbox row from the rolled-back transaction',
   NOT EXISTS (SELECT FROM vq.job WHERE metadata->'request'->>'id' = lbl || '-req-2')
   AND NOT EXISTS (SELECT FROM vq.outbox WHERE metadata->'context'->'request'->>'id' = lbl || '-req-2')
   AND o->'rolled_back'->>'error' = 'payment declined'),
  ('no durable context bound after the transactions', o->'context_after' = '{}')
) AS t(what, ok) WHERE NOT coalesce(ok, false);
SQL
)" -v out="$out" -v lang="$lang"
    ids="$(qs -v out="$out" <<'SQL'
SELECT c->>'email_job', c->>'outbox_id', c->>'order_id' FROM (SELECT :'out'::jsonb->'committed' AS c) x;
SQL
)"
    IFS='|' read -r EMAIL_JOB OUTBOX_ID ORDER_ID <<<"$ids"
    wait_state "$EMAIL_JOB" COMPLETED 10
    wait_for "SELECT status = 'PUBLISHED' FROM vq.outbox WHERE id = $OUTBOX_ID" 10 "outbox row $OUTBOX_ID PUBLISHED"
    check "after commit ($lang, order $ORDER_ID)" "$(cat <<'SQL'
WITH v AS (SELECT j.metadata AS m FROM vq.job j WHERE j.execution_id = :'email'::uuid)
SELECT what FROM v, LATERAL (VALUES
  ('the e-mail handler ran once with the job''s context',
   (SELECT count(*) = 1 AND bool_and(context = m) FROM shop.order_event WHERE order_id = :'order' AND kind = 'confirmation-email')),
  ('the relay made one shop.render-invoice job of the outbox row, metadata = its context, headers left out',
   (SELECT count(*) = 1 AND bool_and(j.metadata = o.metadata->'context' AND NOT j.payload ? 'source'
                                     AND j.enqueued_by = 'shop_app'::regrole)
      FROM vq.job j, vq.outbox o
     WHERE o.id = :'outbox' AND j.handler = 'shop.render-invoice' AND j.payload->'order_id' = to_jsonb(:'order'::bigint)))
) AS t(what, ok) WHERE NOT coalesce(ok, false);
SQL
)" -v email="$EMAIL_JOB" -v order="$ORDER_ID" -v outbox="$OUTBOX_ID"
}

N_ORDERS=0
log "1. orders, straight to the server"
for lang in "${LANGS[@]}"; do
    example "$lang" orders
    out="$(PGUSER=shop_app "${EXAMPLE_CMD[@]}" "$lang-direct")" || fail "orders ($lang) exited with an error"
    check_orders "$lang" "$out"
    N_ORDERS=$((N_ORDERS + 1))
done

if [[ -n "$PGBOUNCER" ]]; then
    log "2. orders through PgBouncer in transaction pooling mode"
    bouncer_start "$TMPD/pgbouncer" "$EX_BOUNCER_PORT" "shop_app postgres" "* = host=$PGHOST port=$PGPORT"
    for lang in "${LANGS[@]}"; do
        example "$lang" orders
        out="$(PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT" PGUSER=shop_app "${EXAMPLE_CMD[@]}" "$lang-bouncer")" ||
            fail "orders ($lang) through pgbouncer exited with an error"
        check_orders "$lang" "$out"
        N_ORDERS=$((N_ORDERS + 1))
    done
    # Both ran over the one server connection of the pool, as did every client below.
    # (wait_for: the backends of the direct runs may take a moment to exit)
    wait_for "SELECT count(*) = 1 FROM pg_stat_activity WHERE usename = 'shop_app' AND datname = current_database()
                 AND backend_type = 'client backend'" 5 "shop_app's only server connection to be the pool's"
    # Why the examples use the transaction's context: a session-level binding stays on the
    # server connection and reaches the next client of the pool.
    PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT" PGUSER=shop_app \
        q "SELECT vq_context_set('request', '{\"id\": \"leaked\"}')" >/dev/null
    assert_eq '{"request": {"id": "leaked"}}' "$(PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT" PGUSER=shop_app q "SELECT vq_context()")" \
        "context a new client sees after another bound one for its session (the hazard)"
    PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT" PGUSER=shop_app q "SELECT vq_context_clear()" >/dev/null
    bouncer_stop || fail "pgbouncer did not stop"
    BOUNCER_DIR=""
fi

# ---- 3. NOTIFY consumers ------------------------------------------------------------------------
log "3. NOTIFY consumers"
CONSUMED=0
for lang in "${LANGS[@]}"; do
    ids="$(PGUSER=shop_app q "SELECT string_agg(id::text, ' ' ORDER BY n) FROM (
              SELECT 1, vq_enqueue('shop.render-invoice', '{\"order_id\": 9001}', NULL, NULL, NULL, NULL, 'inv-$lang-ok')
              UNION ALL
              SELECT 2, vq_enqueue('shop.render-invoice', '{\"order_id\": 9002, \"fail_attempts\": 1}', NULL, NULL, NULL, NULL, 'inv-$lang-flaky')
              UNION ALL
              SELECT 3, vq_enqueue('shop.render-invoice', '{\"order_id\": 9003, \"fail\": \"always\"}', NULL, NULL, NULL, 2, 'inv-$lang-bad')
            ) AS e(n, id)")"
    read -r ID_OK ID_FLAKY ID_BAD <<<"$ids"
    example "$lang" consumer
    bg_start "consumer-$lang" env PGUSER=shop_consumer "${EXAMPLE_CMD[@]}"
    bg_wait_line "consumer-$lang" 'listening' 15
    wait_state "$ID_OK" COMPLETED 10
    wait_state "$ID_FLAKY" COMPLETED 10
    wait_state "$ID_BAD" DEAD_LETTER 10
    assert_eq "CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED" "$(transitions "$ID_OK")" "transitions of inv-$lang-ok"
    assert_eq "CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED,CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED" \
        "$(transitions "$ID_FLAKY")" "transitions of inv-$lang-flaky"
    assert_eq "CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED,CLAIMED:1:ENQUEUED>RUNNING,FAILED:1:RUNNING>DEAD_LETTER" \
        "$(transitions "$ID_BAD")" "transitions of inv-$lang-bad"
    assert_eq "renderer busy (attempt 0)|cannot render invoice for order 9003" \
        "$(q "SELECT (SELECT error FROM vq.job_transition WHERE execution_id = '$ID_FLAKY' AND kind = 'FAILED')
                     || '|' || (SELECT last_error FROM vq.job WHERE execution_id = '$ID_BAD')")" \
        "the errors the consumer failed the attempts with"
    assert_eq "$ID_OK:$lang,$ID_FLAKY:$lang" \
        "$(q "SELECT string_agg(execution_id || ':' || rendered_by, ',' ORDER BY order_id) FROM shop.invoice WHERE order_id > 9000
                AND execution_id IN ('$ID_OK', '$ID_FLAKY', '$ID_BAD')")" \
        "invoice rows (execution:consumer) committed with the replies; none for the dead letter"
    # The orders' invoice jobs (relayed from the outbox) wait, announced, for the first consumer.
    wait_for "SELECT count(*) = $N_ORDERS FROM vq.job WHERE handler = 'shop.render-invoice' AND payload ? 'total'
                 AND state = 'COMPLETED'" 10 "the $N_ORDERS orders' invoice jobs COMPLETED"
    assert_eq "$N_ORDERS" "$(q "SELECT count(*) FROM shop.invoice i JOIN vq.job j USING (execution_id)
                                  WHERE j.payload->'order_id' = to_jsonb(i.order_id) AND j.payload ? 'total'")" \
        "invoice rows of the orders' invoice jobs"
    bg_stop "consumer-$lang"
    grep -q 'stopped' "$TMPD/consumer-$lang.log" || fail "consumer ($lang) did not log its stop"
    CONSUMED=$((CONSUMED + 1))
done

# ---- 4. stats ----------------------------------------------------------------------------------
log "4. stats: vq.queue_stats and vq_metrics()"
# What this run leaves: per order a completed e-mail job, a scheduled follow-up and a completed
# invoice job; per consumer two completed invoice jobs and one dead letter.
EXPECT="shop:0:${N_ORDERS}:0:${N_ORDERS}:0:0,shop_invoices:0:0:0:$((N_ORDERS + 2 * CONSUMED)):${CONSUMED}:0"
for lang in "${LANGS[@]}"; do
    example "$lang" stats
    out="$(PGUSER=shop_app "${EXAMPLE_CMD[@]}")" || fail "stats ($lang) exited with an error"
    check "stats ($lang)" "$(cat <<'SQL'
WITH o AS (SELECT :'out'::jsonb AS o)
SELECT what FROM o, LATERAL (VALUES
  ('queues: the counts of vq.queue_stats',
   (SELECT jsonb_agg(q - 'oldest_due_seconds' - 'completed_last_minute' ORDER BY q->>'queue') FROM jsonb_array_elements(o->'queues') q)
   = (SELECT jsonb_agg(jsonb_build_object('queue', queue, 'paused', paused, 'due', due, 'scheduled', scheduled,
                                          'running', running, 'completed', completed, 'dead_letter', dead_letter,
                                          'cancelled', cancelled) ORDER BY queue) FROM vq.queue_stats)),
  ('queues shop and shop_invoices: due:scheduled:running:completed:dead_letter:cancelled = ' || :'expect',
   (SELECT string_agg(concat_ws(':', q->>'queue', q->>'due', q->>'scheduled', q->>'running', q->>'completed',
                                q->>'dead_letter', q->>'cancelled'), ',' ORDER BY q->>'queue')
      FROM jsonb_array_elements(o->'queues') q WHERE q->>'queue' LIKE 'shop%') = :'expect'),
  ('metrics: the vq_jobs and vq_outbox_rows lines of vq_metrics(), parsed',
   (SELECT jsonb_agg(m ORDER BY m->>'name', m->>'labels') FROM jsonb_array_elements(o->'metrics') m
     WHERE m->>'name' IN ('vq_jobs', 'vq_outbox_rows'))
   = (SELECT jsonb_agg(m ORDER BY m->>'name', m->>'labels') FROM (
        SELECT jsonb_build_object('name', 'vq_jobs', 'labels', jsonb_build_object('queue', queue, 'state', st, 'scope', scope), 'value', n) AS m
          FROM vq.queue_stats, LATERAL (VALUES ('due', due), ('scheduled', scheduled), ('running', running),
                ('completed', completed), ('dead_letter', dead_letter), ('cancelled', cancelled)) s(st, n)
        UNION ALL
        SELECT jsonb_build_object('name', 'vq_outbox_rows', 'labels', jsonb_build_object('status', status, 'scope', scope), 'value', n)
          FROM vq.outbox_counts()) x)),
  ('metrics: one vq_oldest_due_seconds and one vq_completed_last_minute per queue',
   (SELECT count(*) FILTER (WHERE m->>'name' = 'vq_oldest_due_seconds') = (SELECT count(*) FROM vq.queue)
       AND count(*) FILTER (WHERE m->>'name' = 'vq_completed_last_minute') = (SELECT count(*) FROM vq.queue)
      FROM jsonb_array_elements(o->'metrics') m))
) AS t(what, ok) WHERE NOT coalesce(ok, false);
SQL
)" -v out="$out" -v expect="$EXPECT" -c "SET ROLE shop_app"
done

# ---- 5. exporters --------------------------------------------------------------------------------
# scrape PORT: the raw HTTP response to GET /metrics.
scrape() {
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$1"
    printf 'GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&"$fd"
    timeout 10 cat <&"$fd" | tr -d '\r'
    exec {fd}>&-
}

log "5. Prometheus exporters"
for lang in "${LANGS[@]}"; do
    example "$lang" exporter
    bg_start "exporter-$lang" env PGUSER=shop_app "${EXAMPLE_CMD[@]}" 0   # 0: a port the system picks
    bg_wait_line "exporter-$lang" '^listening on http://127\.0\.0\.1:[0-9]+/metrics$' 15
    port="$(sed -nE 's|^listening on http://127\.0\.0\.1:([0-9]+)/metrics$|\1|p' "$TMPD/exporter-$lang.log")"
    resp="$(scrape "$port")"
    printf '%s\n' "$resp" >"$TMPD/scrape-$lang.txt"
    head -n 1 <<<"$resp" | grep -qE '^HTTP/1\.[01] 200 ' || fail "exporter ($lang): status line $(head -n 1 <<<"$resp")"
    grep -qi '^content-type: text/plain; version=0.0.4' <<<"$resp" || fail "exporter ($lang): no text format content type"
    body="$(sed '1,/^$/d' <<<"$resp")"
    # every line a comment or a well-formed sample; HELP and TYPE before each family's samples
    bad="$(awk '
        /^# (HELP|TYPE) / { if ($2 == "TYPE") typed[$3] = 1; next }
        { name = $0; sub(/[{ ].*/, "", name)
          if ($0 !~ /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? -?[0-9.]+([eE][-+]?[0-9]+)?$/)
              print "malformed: " $0
          else if (!typed[name]) print "no TYPE before: " $0 }' <<<"$body")"
    [[ -z "$bad" ]] || fail "exporter ($lang): $bad"
    assert_eq 4 "$(grep -c '^# TYPE vq_[a-z_]* gauge$' <<<"$body")" "exporter ($lang): TYPE lines (4 families)"
    grep -qx "vq_jobs{queue=\"shop_invoices\",state=\"dead_letter\",scope=\"own\"} $CONSUMED" <<<"$body" ||
        fail "exporter ($lang): no line vq_jobs{queue=\"shop_invoices\",state=\"dead_letter\",scope=\"own\"} $CONSUMED"
    # the samples are vq_metrics() (but for completions leaving the last minute meanwhile)
    expect="$(PGUSER=shop_app q "SELECT line FROM vq_metrics() AS line WHERE line NOT LIKE 'vq_completed_last_minute%' ORDER BY 1")"
    assert_eq "$expect" "$(grep -v -e '^#' -e '^vq_completed_last_minute' <<<"$body" | LC_ALL=C sort)" \
        "exporter ($lang): samples = vq_metrics()"
    bg_stop "exporter-$lang"
done

log "PASS examples (${LANGS[*]}${PGBOUNCER:+, with pgbouncer})"

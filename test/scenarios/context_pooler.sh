#!/usr/bin/env bash
# context_pooler.sh: durable context behind PgBouncer in transaction pooling mode.
#   A pgbouncer of its own (unix socket only), two pools of the scenario database: "ctxp" with
#   two server connections, "ctxp1" with one. Role APP connects through it.
#   1. Transaction-local form, concurrently: pgbench, 4 clients x 40 transactions over the 2
#      server connections. 3 transactions in 4 bind the client's own tenant with
#      vq_context_set('tenant', ..., is_local => true), then enqueue a job and publish an
#      outbox row (the payload names the client and the server backend); the others bind
#      nothing and enqueue / publish the same way. Every job and outbox row carries exactly
#      its own client's tenant, or none: 0 of N carry another client's (and the server
#      connections were shared: some backend served several clients).
#   2. The same deterministically on the one-connection pool: client X binds with is_local in
#      its transaction; client Y's next transaction (same server connection) carries nothing.
#   3. The session form's documented behaviour on that pool: client X binds with
#      vq_context_set('tenant', '"x"') (session form) in an autocommit statement; client Y's
#      job, on the same server connection, carries X's tenant (1 of 1); a RESET ALL (what a
#      pooler's server_reset_query runs in session pooling mode) removes it.
#   4. The session form concurrently (as 1, with the session form): how many of the jobs that
#      bound nothing carried a tenant is printed, not asserted (it depends on the interleaving).
# Roles are cluster-wide: APP carries this process id and is dropped on exit.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"

APP="vq_ctxp_app_$$"
WORK="$(mktemp -d /tmp/vq_sc_ctxp.XXXXXX)"
LATER="2999-01-01"            # run_at of every job (no colons: pgbench would read :00 as a variable)
CLIENTS=4 PER_CLIENT=40

cleanup() {
    local rc=$?
    set +e
    bouncer_stop
    drop_roles "$APP"
    ((rc != 0)) && [[ -s "$WORK/pgbouncer/pgbouncer.log" ]] && tail -n 20 "$WORK/pgbouncer/pgbouncer.log"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
# a timeout's signal must run cleanup too: pgbouncer runs as a daemon, outside our process group
trap 'exit 143' TERM
trap 'exit 130' INT

[[ -x "$(command -v pgbouncer || echo /usr/sbin/pgbouncer)" ]] || fail "pgbouncer is not installed"

log "setup: role $APP, a handler, a pgbouncer in transaction pooling mode"
qs >/dev/null <<SQL
CREATE ROLE "$APP" LOGIN;
CREATE FUNCTION public.ctxp_noop(p jsonb) RETURNS void LANGUAGE sql AS 'SELECT';
REVOKE EXECUTE ON FUNCTION public.ctxp_noop(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.ctxp_noop(jsonb) TO "$APP";
SELECT vq_register_handler('ctxp_noop', 'public.ctxp_noop(jsonb)');
SQL
bouncer_start "$WORK/pgbouncer" 56201 "$APP" \
    "ctxp = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_size=2" \
    "ctxp1 = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_size=1"

# via DB SQL: run SQL as APP through the pooler's database DB (one client connection).
via() {
    PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT" PGUSER="$APP" PGDATABASE="$1" q "$2"
}

# workload FORM IS_LOCAL: pgbench through the ctxp pool; jobs and outbox rows get payload form FORM.
workload() {
    local form="$1" is_local="$2" rc=0
    cat >"$WORK/bind.sql" <<EOF
BEGIN;
SELECT vq_context_set('tenant', to_jsonb('c' || :client_id), is_local => $is_local);
SELECT vq_enqueue('ctxp_noop', jsonb_build_object('form', '$form', 'client', 'c' || :client_id, 'backend', pg_backend_pid()), '$LATER');
SELECT vq_outbox_publish('ctxp_noop', jsonb_build_object('form', '$form', 'client', 'c' || :client_id, 'backend', pg_backend_pid()), '$LATER');
COMMIT;
EOF
    cat >"$WORK/plain.sql" <<EOF
BEGIN;
SELECT vq_enqueue('ctxp_noop', jsonb_build_object('form', '$form', 'client', 'none', 'backend', pg_backend_pid()), '$LATER');
SELECT vq_outbox_publish('ctxp_noop', jsonb_build_object('form', '$form', 'client', 'none', 'backend', pg_backend_pid()), '$LATER');
COMMIT;
EOF
    PGHOST="$BOUNCER_DIR" PGPORT="$BOUNCER_PORT" PGUSER="$APP" \
        "$VQ_PG_BIN/pgbench" -n -c "$CLIENTS" -j "$CLIENTS" -t "$PER_CLIENT" \
        -f "$WORK/bind.sql@3" -f "$WORK/plain.sql@1" ctxp >"$WORK/pgbench.out" 2>&1 || rc=$?
    ((rc == 0)) || fail "pgbench ($form) exited $rc: $(tail -n 20 "$WORK/pgbench.out")"
    grep -qE "^number of transactions actually processed: $((CLIENTS * PER_CLIENT))/$((CLIENTS * PER_CLIENT))\$" \
        "$WORK/pgbench.out" || fail "pgbench ($form) did not process every transaction: $(grep -E 'processed|failed' "$WORK/pgbench.out")"
}

# ROWS FORM: "kind|payload|tenant" of every job and outbox row of FORM, the tenant as bound.
ROWS="SELECT 'job' AS kind, payload, metadata ->> 'tenant' AS tenant FROM vq.job WHERE handler = 'ctxp_noop'
      UNION ALL
      SELECT 'outbox', payload, metadata -> 'context' ->> 'tenant' FROM vq.outbox WHERE destination = 'ctxp_noop'"

# ---------------------------------------------------------------------------
log "1. is_local => true, $CLIENTS concurrent clients x $PER_CLIENT transactions over 2 server connections"
workload local true
read -r n bound wrong served shared < <(q "
    SELECT count(*), count(*) FILTER (WHERE payload ->> 'client' <> 'none'),
           count(*) FILTER (WHERE tenant IS DISTINCT FROM nullif(payload ->> 'client', 'none')),
           count(DISTINCT payload ->> 'backend'),
           (SELECT count(*) FROM (SELECT payload ->> 'backend' FROM ($ROWS) r
                                   WHERE payload ->> 'form' = 'local' AND payload ->> 'client' <> 'none'
                                   GROUP BY 1 HAVING count(DISTINCT payload ->> 'client') > 1) s)
      FROM ($ROWS) r WHERE payload ->> 'form' = 'local'" | tr '|' ' ')
log "   $n jobs and outbox rows ($bound bound a tenant); $wrong carry another client's tenant or a stale one;"
log "   $served server backends served them, $shared of them for more than one client"
assert_eq $((2 * CLIENTS * PER_CLIENT)) "$n" "jobs and outbox rows of the local-form run"
((bound > 0 && bound < n)) || fail "expected some transactions with a binding and some without, got $bound of $n"
assert_eq 0 "$wrong" "jobs and outbox rows carrying another client's tenant (is_local => true)"
((served <= 2)) || fail "expected at most 2 server backends behind the pool, saw $served"
((shared >= 1)) || fail "no server backend served more than one client: the run did not share connections"

# ---------------------------------------------------------------------------
log "2. is_local => true on one server connection: the next client's transaction carries nothing"
via ctxp1 "BEGIN; SELECT vq_context_set('tenant', '\"x\"', is_local => true);
           SELECT vq_enqueue('ctxp_noop', '{\"form\": \"seq-local\", \"client\": \"x\"}', '$LATER'); COMMIT;" >/dev/null
y="$(via ctxp1 "SELECT vq_enqueue('ctxp_noop', '{\"form\": \"seq-local\", \"client\": \"y\"}', '$LATER')")"
assert_eq '{}' "$(q "SELECT metadata FROM vq.job WHERE execution_id = '$y'")" "metadata of Y's job after X's local binding"
assert_eq '{"tenant": "x"}' "$(q "SELECT metadata FROM vq.job WHERE payload = '{\"form\": \"seq-local\", \"client\": \"x\"}'")" \
    "metadata of X's own job"

# ---------------------------------------------------------------------------
log "3. the session form on one server connection: it stays with the connection (documented)"
via ctxp1 "SELECT vq_context_set('tenant', '\"x\"')" >/dev/null
y="$(via ctxp1 "SELECT vq_enqueue('ctxp_noop', '{\"form\": \"seq-session\", \"client\": \"y\"}', '$LATER')")"
assert_eq '{"tenant": "x"}' "$(q "SELECT metadata FROM vq.job WHERE execution_id = '$y'")" \
    "metadata of Y's job after X bound its tenant for the (server) session: 1 of 1 carries X's tenant"
via ctxp1 "RESET ALL" >/dev/null
assert_eq '{}' "$(via ctxp1 "SELECT vq_context()")" "context on that connection after RESET ALL"

# ---------------------------------------------------------------------------
log "4. the session form, $CLIENTS concurrent clients (printed, not asserted)"
workload session false
read -r plain leaked < <(q "
    SELECT count(*), count(*) FILTER (WHERE tenant IS NOT NULL)
      FROM ($ROWS) r WHERE payload ->> 'form' = 'session' AND payload ->> 'client' = 'none'" | tr '|' ' ')
log "   $leaked of the $plain jobs and outbox rows that bound nothing carried a tenant another client bound"
log "PASS"

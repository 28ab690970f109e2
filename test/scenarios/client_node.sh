#!/usr/bin/env bash
# client_node.sh: the Node.js client library (clients/node, npm package vq-job) against this
# server, with its own tests (clients/node/test/*.test.js, node --test), in a copy of the library:
#   0. the copy gets its dependency with `npm ci` (clients/node/package-lock.json); it installs
#      into an empty application (npm install --install-links), loads (index.d.ts included) and
#      runs a job;
#   1. a PgBouncer of its own in transaction pooling mode (pool_size 4) for the PgBouncer tests;
#   2. each test file, one after the other (their names say what they check): basic (completion,
#      logs, progress, wake-up by NOTIFY, enqueue in the caller's transaction), failure (FAILED
#      with the message, stack in the log, backoff, DEAD_LETTER, retryAt), cancel, lease (lease
#      extension, a stuck worker's lease lost: ABANDONED, timeout), stop (graceful stop releases
#      the jobs not started, stopTimeout, SIGTERM), competing (4 worker processes, one killed
#      mid-drain: prints the duplicates and the abandoned jobs), pgbouncer (LISTEN on a direct
#      connection; polling only), grants (a role without vq_grant_consumer takes nothing).
# Skipped (and said so) when node or npm is not installed; the PgBouncer tests are skipped
# without pgbouncer.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/../../scripts/lib.sh"

SRC="$VQ_REPO_ROOT/clients/node"
NODE_BOUNCER_PORT=56210       # names pgbouncer's socket, in a directory of its own: cannot collide
TMPD="$(mktemp -d /tmp/vq_client_node.XXXXXX)"

cleanup() {
    local rc=$?
    set +e
    bouncer_stop
    if ((rc != 0)); then
        [[ -s "$TMPD/npm.log" ]] && { echo "----- npm.log"; tail -n 30 "$TMPD/npm.log"; }
        [[ -s "$TMPD/pgbouncer/pgbouncer.log" ]] && { echo "----- pgbouncer.log"; tail -n 20 "$TMPD/pgbouncer/pgbouncer.log"; }
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT
# a timeout's signal must run cleanup too: pgbouncer runs as a daemon, outside our process group
trap 'exit 143' TERM
trap 'exit 130' INT

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "SKIP client_node: node or npm is not installed"
    exit 0
fi
log "node $(node --version), npm $(npm --version)"

# ---- 0. the library's copy and its dependency; it installs into an application -----------
log "0. npm ci in a copy of clients/node; npm install --install-links of it into an empty app"
LIB="$TMPD/vq-job"
mkdir "$LIB"
(cd "$SRC" && tar --exclude=./node_modules --exclude='./*.tgz' -cf - .) | (cd "$LIB" && tar -xf -)
(cd "$LIB" && npm ci --no-audit --no-fund --loglevel=error >"$TMPD/npm.log" 2>&1) ||
    fail "npm ci in the copy of clients/node failed: $(tail -n 20 "$TMPD/npm.log")"
mkdir "$TMPD/app"
echo '{"name": "app", "version": "1.0.0", "private": true}' >"$TMPD/app/package.json"
# (as clients/node/README.md says: a copy of the package, with its dependency)
(cd "$TMPD/app" && npm install --install-links --prefer-offline --no-audit --no-fund --loglevel=error "$LIB" >>"$TMPD/npm.log" 2>&1) ||
    fail "npm install --install-links of clients/node failed: $(tail -n 20 "$TMPD/npm.log")"
[[ -d "$TMPD/app/node_modules/vq-job" && ! -L "$TMPD/app/node_modules/vq-job" && ! -e "$TMPD/app/node_modules/vq-job/node_modules" &&
   ! -e "$TMPD/app/node_modules/vq-job/test" ]] || fail "the installed vq-job is not a copy of the package's files"
got="$(cd "$TMPD/app" && node -e "
    const v = require('vq-job');
    const fs = require('fs');
    console.log([typeof v.Worker, typeof v.enqueue, typeof v.enqueueMany,
                 fs.existsSync(require.resolve('vq-job/package.json').replace(/package.json\$/, 'index.d.ts'))].join(' '))")"
assert_eq "function function function true" "$got" "the installed package's exports and its index.d.ts"
# ... and works: one job enqueued and run from the application
handler="node_smoke_$$"
q "SELECT vq_create_queue('q_$handler', max_concurrent_jobs => 100);
   SELECT vq_register_notify_handler('$handler', 'ch_$handler', 'q_$handler')" >/dev/null
out="$(cd "$TMPD/app" && timeout 60 node -e "
    const { Worker, enqueue } = require('vq-job');
    const { Pool } = require('pg');
    (async () => {
      const pool = new Pool();
      let ran;
      const done = new Promise((resolve) => { ran = resolve; });
      const worker = new Worker({ handlers: { '$handler': async (payload, job) => { ran([payload, job.attempt]); } } });
      await worker.start();
      await enqueue(pool, '$handler', { hello: 'world' });
      const seen = await done;
      await worker.stop();
      await pool.end();
      console.log(JSON.stringify(seen));
    })().catch((e) => { console.error(e); process.exit(1); });")" || fail "the smoke run of the installed package failed"
assert_eq '[{"hello":"world"},0]' "$out" "payload and attempt the handler saw"
wait_for "SELECT count(*) = 1 FROM vq.job WHERE handler = '$handler' AND state = 'COMPLETED'" 10 "the smoke job COMPLETED"

# ---- 1. PgBouncer ------------------------------------------------------------------------------
PGBOUNCER="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
if [[ -x "$PGBOUNCER" ]]; then
    log "1. a pgbouncer in transaction pooling mode"
    bouncer_start "$TMPD/pgbouncer" "$NODE_BOUNCER_PORT" "$PGUSER" "$PGDATABASE = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_size=4"
    export VQ_TEST_BOUNCER_HOST="$BOUNCER_DIR" VQ_TEST_BOUNCER_PORT="$BOUNCER_PORT"
else
    log "1. SKIP the PgBouncer tests: pgbouncer is not installed"
fi

# ---- 2. the tests --------------------------------------------------------------------------------
log "2. node --test, one file after the other"
failed=()
for f in "$LIB"/test/*.test.js; do
    name="${f##*/}"
    t0="$(date +%s%N)"
    rc=0
    (cd "$LIB" && node --test "test/$name") >"$TMPD/$name.out" 2>&1 || rc=$?
    secs="$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')"
    summary="$(grep -E '^# (pass|fail|skipped) ' "$TMPD/$name.out" | tr '\n' ' ')"
    log "   $name: $( ((rc == 0)) && echo PASS || echo FAIL) in ${secs}s ($summary)"
    grep -E '^# runs when killed' "$TMPD/$name.out" | sed 's/^# /      /' || true
    if ((rc != 0)); then
        failed+=("$name")
        grep -vE '^\s+(at |\.\.\.|---)' "$TMPD/$name.out" | tail -n 60 | sed 's/^/      | /'
    fi
done
((${#failed[@]} == 0)) || fail "Node client tests failed: ${failed[*]}"
log "PASS client_node"

#!/usr/bin/env bash
# client_python.sh: the Python client library (clients/python, package vq_job) against this
# server, with its own tests (clients/python/tests/test_*.py, unittest, Debian's /usr/bin/python3
# and python3-psycopg):
#   0. pip installs a copy of the package (offline, no dependency: psycopg is Debian's) into a
#      directory of its own; from there it imports (py.typed included) and runs a job;
#   1. a PgBouncer of its own in transaction pooling mode (pool_size 4) for the PgBouncer tests
#      (VQ_TEST_BOUNCER);
#   2. the tests, with the source tree on PYTHONPATH (their names say what they check):
#      test_worker (completion and the job's attributes, failure retried after the backoff with
#      the traceback in the log, DEAD_LETTER, Retry, logs and progress, cancellation with and
#      without LISTEN, lease expiry of a stuck handler, graceful stop releasing the jobs not
#      started, polling, a backlog larger than a take), test_processes (SIGTERM; four competing
#      worker processes, one killed mid-drain: prints the duplicates and the abandoned jobs),
#      test_pgbouncer (polling through the pooler; LISTEN on a direct connection),
#      test_privileges (a role without vq_grant_consumer takes nothing), test_enqueue (in the
#      caller's transaction, options, enqueue_many, async). Worker and AsyncWorker both.
# Skipped (and said so) when /usr/bin/python3 has no psycopg; the PgBouncer tests are skipped
# without pgbouncer.
set -euo pipefail
# shellcheck source=test/scenarios/lib/common.sh
. "$(dirname "$0")/lib/common.sh"
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/../../scripts/lib.sh"

SRC="$VQ_REPO_ROOT/clients/python"
PY=/usr/bin/python3           # Debian's, which has python3-psycopg (not the first python3 on PATH)
PY_BOUNCER_PORT=56220         # names pgbouncer's socket, in a directory of its own: cannot collide
TMPD="$(mktemp -d /tmp/vq_client_python.XXXXXX)"

cleanup() {
    local rc=$?
    set +e
    bouncer_stop
    if ((rc != 0)); then
        [[ -s "$TMPD/pip.log" ]] && { echo "----- pip.log"; tail -n 30 "$TMPD/pip.log"; }
        [[ -s "$TMPD/pgbouncer/pgbouncer.log" ]] && { echo "----- pgbouncer.log"; tail -n 20 "$TMPD/pgbouncer/pgbouncer.log"; }
    fi
    rm -rf "$TMPD"
    exit "$rc"
}
trap cleanup EXIT
# a timeout's signal must run cleanup too: pgbouncer runs as a daemon, outside our process group
trap 'exit 143' TERM
trap 'exit 130' INT

if ! [[ -x "$PY" ]] || ! "$PY" -c 'import psycopg' 2>/dev/null; then
    log "SKIP client_python: $PY with psycopg (python3-psycopg) is not installed"
    exit 0
fi
log "$("$PY" --version), psycopg $("$PY" -c 'import psycopg; print(psycopg.__version__)')"

# ---- 0. pip install of a copy; import; one job ------------------------------------------
if "$PY" -m pip --version >/dev/null 2>&1 && "$PY" -c 'import setuptools' 2>/dev/null; then
    log "0. pip install of a copy of clients/python into a directory of its own; one job from there"
    mkdir "$TMPD/src"
    (cd "$SRC" && tar --exclude=__pycache__ --exclude=./build --exclude='*.egg-info' -cf - .) | (cd "$TMPD/src" && tar -xf -)
    "$PY" -m pip install --no-deps --no-build-isolation --no-index --disable-pip-version-check \
        --target "$TMPD/site" "$TMPD/src" >"$TMPD/pip.log" 2>&1 ||
        fail "pip install of clients/python failed: $(tail -n 20 "$TMPD/pip.log")"
    [[ -f "$TMPD/site/vq_job/py.typed" && -f "$TMPD/site/vq_job/aio.py" && ! -e "$TMPD/site/tests" ]] ||
        fail "the installed package lacks py.typed or a module, or carries the tests: $(ls -R "$TMPD/site" | head -20)"
    handler="py_smoke_$$"
    q "SELECT vq_create_queue('q_$handler', max_concurrent_jobs => 100);
       SELECT vq_register_notify_handler('$handler', 'ch_$handler', 'q_$handler')" >/dev/null
    out="$(cd "$TMPD" && PYTHONPATH="$TMPD/site" timeout 60 "$PY" - "$handler" <<'PYEOF'
import os, sys, threading, psycopg, vq_job
from vq_job import Worker, enqueue
handler = sys.argv[1]
seen = []
worker = Worker("", handlers={handler: lambda payload, job: seen.append((payload, job.attempt))}, poll_interval=0.2)
t = threading.Thread(target=worker.run)
t.start()
with psycopg.connect("", autocommit=True) as conn:
    enqueue(conn, handler, {"smoke": True})
while worker.stats["completed"] < 1 and t.is_alive():
    worker.ready.wait(0.05)
worker.stop(wait=True, timeout=30)
print(vq_job.__file__.startswith(os.environ["PYTHONPATH"] + "/"), seen)
PYEOF
)" || fail "the installed package did not run a job: $out"
    assert_eq "True [({'smoke': True}, 0)]" "$out" "the job run by the installed package"
else
    log "0. SKIP the pip install check: $PY has no pip or setuptools"
fi

# ---- 1. pgbouncer ------------------------------------------------------------------------
PGBOUNCER="$(command -v pgbouncer || echo /usr/sbin/pgbouncer)"
if [[ -x "$PGBOUNCER" ]]; then
    log "1. a pgbouncer in transaction pooling mode"
    bouncer_start "$TMPD/pgbouncer" "$PY_BOUNCER_PORT" "$PGUSER" \
        "pyb = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_size=4"
    export VQ_TEST_BOUNCER="host=$BOUNCER_DIR port=$BOUNCER_PORT dbname=pyb user=$PGUSER"
else
    log "1. SKIP the PgBouncer tests: pgbouncer is not installed"
fi

# ---- 2. the tests ------------------------------------------------------------------------
log "2. the tests (clients/python/tests)"
t0=$(now_ms)
(cd "$SRC/tests" && PYTHONPATH="$SRC:$SRC/tests" PYTHONDONTWRITEBYTECODE=1 \
    "$PY" -m unittest discover -s . -p 'test_*.py' -v 2>&1) || fail "the Python client's tests failed"
log "tests took $((($(now_ms) - t0) / 1000)) s"

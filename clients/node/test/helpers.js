'use strict';
// Helpers of the tests: a superuser pool (the libpq variables: PGHOST, PGPORT, PGUSER,
// PGDATABASE of a database with the extension), waiting with deadlines, job states.

const { Pool } = require('pg');

const admin = new Pool({ max: 4, application_name: 'vq-job tests' });
admin.on('error', () => {});

async function q(text, values) {
  return (await admin.query(text, values)).rows;
}

// The first column of the first row.
async function one(text, values) {
  const res = await admin.query({ text, values, rowMode: 'array' });
  return res.rows.length > 0 ? res.rows[0][0] : undefined;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Poll fn (sync or async) every `every` ms until it returns something truthy (returned); after
// `timeout` ms throw, naming `what` and the last value (or error) seen.
async function waitFor(fn, what, { timeout = 15000, every = 20 } = {}) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (err) {
      last = `(error) ${err.message}`;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
    await sleep(every);
  }
}

// "kind:attempt:from>to,..." of a job's transitions, in order (as test/scenarios/lib/common.sh;
// the transitions the job row implies have no id: by time, a take before what follows it).
async function transitions(id) {
  return one(`SELECT string_agg(kind || ':' || attempt_number || ':' || from_state || '>' || to_state, ','
                                ORDER BY id NULLS LAST, at, kind <> 'CLAIMED')
                FROM vq.job_transition WHERE execution_id = $1`, [id]);
}

async function job(id) {
  const rows = await q('SELECT state::text, attempt_number, last_error, scheduled_at, progress_total, progress_succeeded,' +
    ' progress_failed FROM vq.job WHERE execution_id = $1', [id]);
  return rows[0];
}

async function waitState(id, state, timeout = 15000) {
  return waitFor(async () => (await job(id)).state === state, `job ${id} to be ${state}`, { timeout })
    .catch(async (err) => { throw new Error(`${err.message}; job now ${JSON.stringify(await job(id))}`); });
}

let counter = 0;
// A name unique to this test process (handlers, queues, roles).
function uniq(prefix) {
  counter++;
  return `${prefix}_${process.pid}_${counter}`;
}

// Register an external handler on a queue of its own: returns { handler, queue, channel }.
async function externalHandler(prefix, { capacity = 10000, backoffMs = 100, strategy = 'FIXED', maxAttempts = 3 } = {}) {
  const handler = uniq(prefix);
  const queue = `q_${handler}`;
  const channel = `ch_${handler}`.replace(/[.-]/g, '_');
  await q(`SELECT vq_create_queue($1, max_concurrent_jobs => $2, backoff_strategy => $3, backoff_base_delay_ms => $4)`,
    [queue, capacity, strategy, backoffMs]);
  await q('SELECT vq_register_notify_handler($1, $2, $3, max_attempts => $4)', [handler, channel, queue, maxAttempts]);
  return { handler, queue, channel };
}

// A logger that keeps what it is told (and shows warnings and errors when VQ_TEST_VERBOSE is set).
function memoryLogger() {
  const lines = [];
  const at = (level) => (...a) => {
    lines.push(`${level} ${a.join(' ')}`);
    if (process.env.VQ_TEST_VERBOSE) console.error(`[${level}]`, ...a);
  };
  return { lines, logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } };
}

// A promise with its resolve function outside.
function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((res, rej) => { resolve = res; reject = rej; });
  return { promise, resolve, reject };
}

async function end() {
  await admin.end();
}

module.exports = { admin, q, one, sleep, waitFor, transitions, job, waitState, uniq, externalHandler, memoryLogger, deferred, end };

'use strict';
// Behind PgBouncer in transaction pooling mode (VQ_TEST_BOUNCER_HOST and VQ_TEST_BOUNCER_PORT
// name one that pools this database; skipped otherwise): the worker and enqueue go through it;
// wake-ups by LISTEN on a direct listen connection, or by polling only.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Worker, enqueue } = require('..');
const h = require('./helpers');

const host = process.env.VQ_TEST_BOUNCER_HOST;
const port = process.env.VQ_TEST_BOUNCER_PORT;
const skip = !host || !port ? 'no PgBouncer (VQ_TEST_BOUNCER_HOST, VQ_TEST_BOUNCER_PORT)' : false;
const bouncer = { host, port: Number(port), database: process.env.PGDATABASE, user: process.env.PGUSER };
const direct = () => {
  const e = process.env;
  return `postgresql://${encodeURIComponent(e.PGUSER)}@/${encodeURIComponent(e.PGDATABASE)}?host=${encodeURIComponent(e.PGHOST)}&port=${e.PGPORT}`;
};

test.after(() => h.end());

// Enqueue through the pooler, in a transaction of the application.
async function enqueueThroughBouncer(handler, payloads) {
  const app = new Client(bouncer);
  await app.connect();
  try {
    const { rows: [me] } = await app.query('SELECT pg_backend_pid() AS pid');
    assert.notEqual(app.processID, me.pid, 'the client goes through the pooler');
    await app.query('BEGIN');
    const ids = [];
    for (const p of payloads) ids.push(await enqueue(app, handler, p));
    await app.query('COMMIT');
    return ids;
  } finally {
    await app.end();
  }
}

test('through PgBouncer, LISTEN on a direct connection: woken at once; complete, fail, log, lease, cancel', { skip }, async () => {
  const { handler } = await h.externalHandler('bouncer.listen', { backoffMs: 3600000 });
  const seen = [];
  const worker = new Worker({
    config: bouncer,
    pipelines: 2,                    // (one listen connection wakes both)
    concurrency: 4,
    listenConnectionString: direct(),
    pollInterval: 60000,             // only a notification can wake it in time
    lease: 2000,
    handlers: {
      [handler]: async (payload, job) => {
        seen.push(payload.n);
        job.log('through the pooler', { n: payload.n });
        job.progress({ total: 2, succeeded: 1 });
        if (payload.n === 2) throw new Error('failed through the pooler');
        if (payload.n === 3) await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
      },
    },
  });
  await worker.start();
  try {
    assert.equal(worker.pooled, true, 'the pooler detected');
    assert.equal(worker.listening, true, 'LISTEN on the direct connection');
    await h.waitFor(() => worker.stats.takes >= 1, 'the first take');
    const [ok, bad, long] = await enqueueThroughBouncer(handler, [{ n: 1 }, { n: 2 }, { n: 3 }]);
    await h.waitState(ok, 'COMPLETED', 10000);
    await h.waitFor(async () => (await h.job(bad)).attempt_number === 1, 'the failure recorded', { timeout: 10000 });
    assert.equal(await h.transitions(ok), 'CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED');
    assert.equal(await h.transitions(bad), 'CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED');
    assert.equal((await h.job(bad)).last_error, 'failed through the pooler');
    await h.waitFor(async () => (await h.job(long)).state === 'RUNNING' && seen.includes(3), 'the long job running');
    await h.waitFor(async () => (await h.job(long)).progress_total === '2', 'its progress written');
    // its lease (2 s) is extended through the pooler; then cancel it: the notification comes on the direct connection
    const lease = () => h.one('SELECT lease_until FROM vq.job_active WHERE execution_id = $1', [long]);
    const first = await lease();
    await h.waitFor(async () => (await lease()) - first >= 1000, 'the lease extended', { timeout: 5000 });
    await h.one('SELECT vq_cancel($1)', [long]);
    await h.waitState(long, 'CANCELLED', 5000);
    assert.equal(await h.one('SELECT count(*)::int FROM vq.job_log WHERE execution_id = ANY($1)', [[ok, bad, long]]), 4,
      'three lines written by the handlers, one stack');
  } finally {
    await worker.stop();
  }
});

test('through PgBouncer without a listen connection: no LISTEN, polling', { skip }, async () => {
  const { handler } = await h.externalHandler('bouncer.poll');
  const { lines, logger } = h.memoryLogger();
  const worker = new Worker({ config: bouncer, pollInterval: 200, logger, handlers: { [handler]: async () => {} } });
  await worker.start();
  try {
    assert.equal(worker.pooled, true);
    assert.equal(worker.listening, false, 'no LISTEN through a transaction pooler');
    assert.ok(lines.some((l) => l.startsWith('info the main connection goes through a pooler: no LISTEN')), 'told why');
    const ids = await enqueueThroughBouncer(handler, [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
    for (const id of ids) await h.waitState(id, 'COMPLETED', 10000);
    assert.ok(worker.stats.takes >= 2);
  } finally {
    await worker.stop();
  }
});

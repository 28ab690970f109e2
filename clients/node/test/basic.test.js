'use strict';
// Completion, logs and progress, wake-up by notification, enqueue in the caller's transaction.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Worker, enqueue, enqueueMany } = require('..');
const h = require('./helpers');

test.after(() => h.end());

test('a handler that returns completes its job; its log lines and progress are written', async () => {
  const { handler } = await h.externalHandler('basic.done');
  const seen = [];
  const worker = new Worker({
    concurrency: 4,
    pollInterval: 60000,          // only a notification can wake it in time
    handlers: {
      [handler]: async (payload, job) => {
        seen.push({ payload, id: job.id, attempt: job.attempt, jobId: job.jobId, handler: job.handler, cancelled: job.cancelled });
        job.log('starting');
        job.log('WARN', 'careful', { k: 1 });
        job.log('ERROR', 'with fields', { n: [1, 2] });
        job.progress({ total: 10, succeeded: 7 });
        job.progress({ failed: 1 });
      },
    },
  });
  await worker.start();
  assert.equal(worker.listening, true, 'a direct connection LISTENs');
  assert.equal(worker.pooled, false);
  try {
    // (the worker's first take found nothing: only the notification wakes it before 60 s)
    await h.waitFor(() => worker.stats.takes >= 1, 'the first take');
    const jobId = h.uniq('basic');
    const id = await enqueue(h.admin, handler, { to: 'a@example.com' }, { jobId });
    await h.waitState(id, 'COMPLETED', 10000);
    assert.deepEqual(seen, [{ payload: { to: 'a@example.com' }, id, attempt: 0, jobId, handler, cancelled: false }]);
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED');
    const lines = await h.q('SELECT attempt_number, level, message, fields FROM vq.job_log WHERE execution_id = $1 ORDER BY id', [id]);
    assert.deepEqual(lines.map((l) => [l.attempt_number, l.level, l.message, l.fields]), [
      [0, 'INFO', 'starting', null],
      [0, 'WARN', 'careful', { k: 1 }],
      [0, 'ERROR', 'with fields', { n: [1, 2] }],
    ]);
    const j = await h.job(id);
    assert.deepEqual([j.progress_total, j.progress_succeeded, j.progress_failed], ['10', '7', '1']);
    await h.waitFor(() => worker.stats.completed === 1, 'the completion counted');
  } finally {
    await worker.stop();
  }
  await h.waitFor(async () => (await h.one(`SELECT count(*)::int FROM pg_stat_activity
      WHERE application_name LIKE 'vq-job worker%' AND datname = current_database()`)) === 0, 'the connections closed after stop');
});

test('a plain (not async) handler completes too; many jobs of two handlers in one worker', async () => {
  const a = await h.externalHandler('basic.a');
  const b = await h.externalHandler('basic.b');
  const ran = { a: 0, b: 0 };
  const worker = new Worker({
    concurrency: 7, batchSize: 5,
    handlers: { [a.handler]: () => { ran.a++; }, [b.handler]: async () => { ran.b++; } },
  });
  await worker.start();
  try {
    const idsA = await enqueueMany(h.admin, a.handler, Array.from({ length: 60 }, (_, i) => ({ i })));
    const idsB = await enqueueMany(h.admin, b.handler, Array.from({ length: 40 }, (_, i) => ({ i })));
    assert.equal(idsA.length, 60);
    assert.equal(idsB.length, 40);
    await h.waitFor(async () => (await h.one(
      "SELECT count(*)::int FROM vq.job WHERE handler = ANY($1) AND state = 'COMPLETED'", [[a.handler, b.handler]])) === 100,
    'the 100 jobs COMPLETED');
    assert.deepEqual(ran, { a: 60, b: 40 });
  } finally {
    await worker.stop();
  }
  assert.equal(worker.stats.completed, 100);
});

test('enqueue runs in the caller\'s transaction, with its options', async () => {
  const { handler, queue } = await h.externalHandler('basic.enq');
  const other = await h.externalHandler('basic.enq2');
  const client = new Client();
  await client.connect();
  try {
    await client.query('BEGIN');
    const rolledBack = await enqueue(client, handler, { n: 1 }, { jobId: h.uniq('enq-rolled-back') });
    await client.query('ROLLBACK');
    assert.equal(await h.one('SELECT count(*)::int FROM vq.job WHERE execution_id = $1', [rolledBack]), 0, 'rolled back: no job');

    await client.query('BEGIN');
    const runAt = new Date(Date.now() + 3600 * 1000);
    const jobId = h.uniq('enq-committed');
    const id = await enqueue(client, handler, { n: 2 }, {
      runAt, jobId, queue: other.queue, priority: 7, maxAttempts: 9, metadata: { tenant: 't1' },
    });
    assert.equal(await h.one('SELECT count(*)::int FROM vq.job WHERE execution_id = $1', [id]), 0, 'not visible before COMMIT');
    await client.query('COMMIT');
    const [row] = await h.q(`SELECT state::text, job_id, queue, priority, max_attempts, payload, metadata,
                                    abs(extract(epoch FROM scheduled_at) * 1000 - $2) < 1 AS at_run_at
                               FROM vq.job WHERE execution_id = $1`, [id, runAt.getTime()]);
    assert.deepEqual(row, { state: 'ENQUEUED', job_id: jobId, queue: other.queue, priority: 7, max_attempts: 9,
      payload: { n: 2 }, metadata: { tenant: 't1' }, at_run_at: true });

    // the job_id is an idempotency key among unfinished jobs: the same key gives the same job
    assert.equal(await enqueue(client, handler, { n: 3 }, { jobId }), id);
    // defaults: the handler's queue, no payload given
    const plain = await enqueue(client, handler);
    const [p] = await h.q('SELECT queue, payload FROM vq.job WHERE execution_id = $1', [plain]);
    assert.equal(p.queue, queue);
  } finally {
    await client.end();
  }
});

test('start() fails for a handler that is not an external one', async () => {
  const missing = new Worker({ handlers: { 'no.such.handler': async () => {} } });
  await assert.rejects(missing.start(), /"no\.such\.handler" is not registered/);
  const fnName = h.uniq('basic.fn');
  await h.q(`CREATE FUNCTION public."${fnName}"(p jsonb) RETURNS void LANGUAGE sql AS 'SELECT'`);
  await h.q(`SELECT vq_register_handler($1, $2)`, [fnName, `public."${fnName}"(jsonb)`]);
  const fn = new Worker({ handlers: { [fnName]: async () => {} } });
  await assert.rejects(fn.start(), /is a function handler/);
  assert.throws(() => new Worker({ handlers: {} }), /1 to 64 handlers/);
  assert.throws(() => new Worker({ handlers: { x: 1 } }), /must be a function/);
  assert.throws(() => new Worker({ handlers: { x() {} }, lease: 10 }), /lease/);
});

test('a worker whose connections are terminated reconnects, LISTENs again and goes on', async () => {
  const { handler } = await h.externalHandler('basic.reconnect');
  const errors = [];
  const ran = [];
  const worker = new Worker({
    applicationName: 'vq-job reconnect test', pollInterval: 60000,
    onError: (err) => errors.push(err.message),
    handlers: { [handler]: async (payload) => { ran.push(payload.n); } },
  });
  await worker.start();
  try {
    const first = await enqueue(h.admin, handler, { n: 1 });
    await h.waitState(first, 'COMPLETED');
    const killed = await h.one(`SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
                                 WHERE application_name = 'vq-job reconnect test' AND datname = current_database()`);
    assert.equal(killed, 2, 'the take and the reply connections');
    await h.waitFor(() => /the take connection was lost/.test(errors.join('\n')) &&
      /the reply connection was lost/.test(errors.join('\n')), 'the losses reported');
    // back: LISTEN again (a notification wakes it, the poll is a minute away), take, reply
    await h.waitFor(() => worker.listening, 'listening again');
    const second = await enqueue(h.admin, handler, { n: 2 });
    await h.waitState(second, 'COMPLETED', 10000);
    assert.deepEqual(ran, [1, 2]);
  } finally {
    await worker.stop();
  }
});

test('a worker of several pipelines: one LISTEN wakes them all, each takes, a cancellation finds its job', async () => {
  const { handler } = await h.externalHandler('basic.pipes');
  let blocked = null;
  const worker = new Worker({
    pipelines: 3, concurrency: 6, batchSize: 2, applicationName: 'vq-job pipelines test', pollInterval: 60000,
    handlers: {
      [handler]: async (payload, job) => {
        if (payload.block) {
          blocked = job.id;
          await new Promise((resolve) => job.signal.addEventListener('abort', resolve));
          throw job.signal.reason;
        }
        await h.sleep(5);
      },
    },
  });
  assert.equal(worker.pipelines, 3);
  assert.equal(new Worker({ concurrency: 500, handlers: { x() {} } }).pipelines, 2, 'two by default for a large concurrency');
  assert.equal(new Worker({ handlers: { x() {} } }).pipelines, 1);
  await worker.start();
  try {
    assert.equal(worker.listening, true);
    assert.equal(await h.one(`SELECT count(*)::int FROM pg_stat_activity WHERE application_name = 'vq-job pipelines test'
                                AND datname = current_database()`), 6, 'a take and a reply connection per pipeline');
    await h.waitFor(() => worker.stats.takes >= 3, 'the first takes');
    const ids = await enqueueMany(h.admin, handler, Array.from({ length: 60 }, (_, i) => ({ i })));
    await h.waitFor(async () => (await h.one("SELECT count(*)::int FROM vq.job WHERE execution_id = ANY($1) AND state = 'COMPLETED'",
      [ids])) === 60, 'the 60 jobs COMPLETED (woken by notification: the poll is a minute away)');
    assert.ok(worker._parts.filter((p) => p.stats.taken > 0).length >= 2, 'more than one pipeline took jobs');
    const id = await enqueue(h.admin, handler, { block: true });
    await h.waitFor(() => blocked === id, 'the blocking job to start');
    await h.one('SELECT vq_cancel($1)', [id]);
    await h.waitState(id, 'CANCELLED', 5000);
    assert.equal(worker.stats.completed, 60);
  } finally {
    await worker.stop();
  }
});

test('a worker on the application\'s pool holds two of its clients until stop()', async () => {
  const { handler } = await h.externalHandler('basic.pool');
  const { Pool } = require('pg');
  const pool = new Pool({ max: 4 });
  const worker = new Worker({ pool, handlers: { [handler]: async () => {} } });
  await worker.start();
  try {
    assert.equal(pool.totalCount - pool.idleCount, 2, 'two clients checked out');
    const id = await enqueue(pool, handler, {});
    await h.waitState(id, 'COMPLETED');
  } finally {
    await worker.stop();
  }
  assert.equal(pool.totalCount - pool.idleCount, 0, 'given back');
  await pool.end();
});

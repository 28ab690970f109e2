'use strict';
// Leases: extended while a handler runs; a worker that cannot extend (its event loop blocked)
// loses the job: the server abandons the attempt (ABANDONED, retried), the worker sees the loss
// (job.lost, job.signal) and sends no reply; a handler past the worker's `timeout` is asked to
// stop and its lease left to expire.
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const { Worker, enqueue } = require('..');
const h = require('./helpers');

test.after(() => h.end());

// SQL through psql, synchronously (from a handler that blocks the event loop).
function psqlSync(sql) {
  const r = spawnSync('psql', ['-XAtq', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`psql: ${r.stderr}`);
  return r.stdout.trim();
}

test('a long job keeps its lease: extended at half the lease while the handler runs', async () => {
  const { handler } = await h.externalHandler('lease.long');
  const gate = h.deferred();
  const started = h.deferred();
  const worker = new Worker({ lease: 1000, handlers: { [handler]: async (p, job) => { started.resolve(job); await gate.promise; } } });
  await worker.start();
  try {
    const id = await enqueue(h.admin, handler, {});
    await started.promise;
    const first = await h.one('SELECT lease_until FROM vq.job_active WHERE execution_id = $1', [id]);
    // three lease lengths later, still RUNNING at attempt 0, the lease moved on
    await h.waitFor(async () => (await h.one('SELECT lease_until FROM vq.job_active WHERE execution_id = $1', [id])) -
      first >= 2000, 'the lease extended by 2 s or more', { timeout: 8000 });
    const j = await h.job(id);
    assert.deepEqual([j.state, j.attempt_number], ['RUNNING', 0]);
    gate.resolve();
    await h.waitState(id, 'COMPLETED');
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED');
  } finally {
    await worker.stop();
  }
});

test('a stuck worker loses its lease: ABANDONED by the server, retried; the late result is not sent', async () => {
  const { handler } = await h.externalHandler('lease.stuck', { backoffMs: 100 });
  const { lines, logger } = h.memoryLogger();
  const seen = {};
  const worker = new Worker({
    lease: 1000, concurrency: 2, logger,
    handlers: {
      [handler]: async (payload, job) => {
        if (job.attempt > 0) return;           // the retry completes
        // Block the event loop (no lease extension can run) until the server abandoned the attempt.
        const deadline = Date.now() + 20000;
        while (psqlSync(`SELECT attempt_number > 0 FROM vq.job WHERE execution_id = '${job.id}'`) !== 't') {
          if (Date.now() > deadline) throw new Error('the attempt was not abandoned within 20 s');
          spawnSync('sleep', ['0.05']);
        }
        seen.cancelledRightAfter = job.cancelled;
        // The worker learns it (vq_extend_leases, or the retry taken): the signal aborts.
        await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
        seen.lost = job.lost;
        seen.reason = job.cancelReason;
        // returns normally: its completion must not be sent
      },
    },
  });
  await worker.start();
  try {
    const id = await enqueue(h.admin, handler, {});
    await h.waitState(id, 'COMPLETED', 20000);
    await h.waitFor(() => seen.lost !== undefined, 'the stuck handler to learn its job was lost');
    assert.equal(seen.cancelledRightAfter, false);
    assert.deepEqual([seen.lost, seen.reason], [true, 'lost']);
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,ABANDONED:0:RUNNING>ENQUEUED,' +
      'CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED');
    await h.waitFor(() => lines.includes(`debug job ${id} attempt 0: the lease was lost, its result is not sent`),
      'the late result dropped');
    assert.equal(worker.stats.ignored, 0, 'no reply was sent for the lost attempt');
    assert.equal(worker.stats.lost, 1);
  } finally {
    await worker.stop();
  }
});

test('a handler past the timeout is asked to stop; its lease runs out: ABANDONED, retried', async () => {
  const { handler } = await h.externalHandler('lease.timeout', { backoffMs: 100 });
  const seen = {};
  const worker = new Worker({
    lease: 1000, timeout: 1500, concurrency: 2, stopTimeout: 200,
    handlers: {
      [handler]: async (payload, job) => {
        if (job.attempt > 0) return;
        job.signal.addEventListener('abort', () => { seen.reason = job.cancelReason; }, { once: true });
        await new Promise(() => {});          // never settles
      },
    },
  });
  await worker.start();
  try {
    const id = await enqueue(h.admin, handler, {});
    await h.waitState(id, 'COMPLETED', 20000);
    assert.equal(seen.reason, 'timeout');
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,ABANDONED:0:RUNNING>ENQUEUED,' +
      'CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED');
    const abandoned = await h.q("SELECT at FROM vq.job_transition WHERE execution_id = $1 AND kind IN ('CLAIMED', 'ABANDONED') ORDER BY id NULLS LAST, at", [id]);
    assert.ok(abandoned[1].at - abandoned[0].at >= 1500, 'not abandoned before the timeout');
  } finally {
    await worker.stop();          // (the handler that never settles: after stopTimeout)
  }
});

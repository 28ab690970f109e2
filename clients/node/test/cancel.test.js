'use strict';
// vq_cancel of a job a worker holds: job.cancelled / job.signal (by NOTIFY "cancel <id>", or by
// vq_extend_leases' cancel_requested when the worker polls), and the job ends CANCELLED.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Worker, enqueue, JobCancelledError } = require('..');
const h = require('./helpers');

test.after(() => h.end());

// A handler that waits until its job is cancelled, then throws the abort reason.
function untilCancelled(record) {
  return async (payload, job) => {
    record.started = job.id;
    await new Promise((resolve) => job.signal.addEventListener('abort', resolve, { once: true }));
    record.cancelled = job.cancelled;
    record.reason = job.cancelReason;
    record.error = job.signal.reason;
    throw job.signal.reason;
  };
}

test('vq_cancel of a running job: job.cancelled and job.signal (NOTIFY), the job ends CANCELLED', async () => {
  const { handler } = await h.externalHandler('cancel.notify');
  const seen = {};
  const worker = new Worker({ lease: 60000, handlers: { [handler]: untilCancelled(seen) } });
  await worker.start();
  try {
    const id = await enqueue(h.admin, handler, {});
    await h.waitFor(() => seen.started === id, 'the handler to start');
    assert.equal(await h.one('SELECT vq_cancel($1)', [id]) !== undefined, true);
    await h.waitState(id, 'CANCELLED', 5000);      // (a lease extension comes only after 30 s)
    assert.equal(seen.cancelled, true);
    assert.equal(seen.reason, 'cancel');
    assert.ok(seen.error instanceof JobCancelledError);
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,CANCELLED:0:RUNNING>CANCELLED');
    assert.equal((await h.job(id)).last_error, 'cancelled while running: vq_cancel asked the job to stop');
  } finally {
    await worker.stop();
  }
});

test('without LISTEN the cancellation comes with the lease extension (vq_extend_leases)', async () => {
  const { handler } = await h.externalHandler('cancel.poll');
  const seen = {};
  const worker = new Worker({ listen: false, pollInterval: 100, lease: 2000, handlers: { [handler]: untilCancelled(seen) } });
  await worker.start();
  assert.equal(worker.listening, false);
  try {
    const id = await enqueue(h.admin, handler, {});
    await h.waitFor(() => seen.started === id, 'the handler to start');
    await h.one('SELECT vq_cancel($1)', [id]);
    await h.waitState(id, 'CANCELLED', 10000);
    assert.equal(seen.reason, 'cancel');
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,CANCELLED:0:RUNNING>CANCELLED');
  } finally {
    await worker.stop();
  }
});

test('a job cancelled after it was taken and before it started never runs', async () => {
  const { handler } = await h.externalHandler('cancel.queued');
  const started = [];
  const gate = h.deferred();
  const { lines, logger } = h.memoryLogger();
  const worker = new Worker({
    concurrency: 1, prefetch: 1, logger,
    handlers: { [handler]: async (payload) => { started.push(payload.n); if (payload.n === 1) await gate.promise; } },
  });
  await worker.start();
  try {
    const first = await enqueue(h.admin, handler, { n: 1 });
    await h.waitFor(() => started.length === 1, 'the first job to start');
    const second = await enqueue(h.admin, handler, { n: 2 });
    await h.waitFor(async () => (await h.job(second)).state === 'RUNNING', 'the second job taken (prefetched)');
    assert.equal(worker.stats.held, 2);
    await h.one('SELECT vq_cancel($1)', [second]);
    await h.waitFor(() => lines.includes(`debug job ${second} attempt 0: asked to stop (cancel)`), 'the worker to see the request');
    gate.resolve();
    await h.waitState(first, 'COMPLETED');
    await h.waitState(second, 'CANCELLED');
    assert.deepEqual(started, [1], 'the cancelled job did not start');
    assert.equal(await h.transitions(second), 'CLAIMED:0:ENQUEUED>RUNNING,CANCELLED:0:RUNNING>CANCELLED');
  } finally {
    await worker.stop();
  }
});

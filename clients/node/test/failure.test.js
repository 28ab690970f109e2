'use strict';
// A handler that throws: FAILED with the error's message, the stack in the job's log, retried
// after the queue's backoff, DEAD_LETTER after max_attempts; retry at a time the handler chose.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Worker, enqueue } = require('..');
const h = require('./helpers');

test.after(() => h.end());

test('a throwing handler fails the attempt; retried with backoff; dead-lettered after max_attempts', async () => {
  const BACKOFF = 300;
  const { handler } = await h.externalHandler('fail.always', { backoffMs: BACKOFF, strategy: 'FIXED', maxAttempts: 3 });
  const flaky = await h.externalHandler('fail.once', { backoffMs: BACKOFF, strategy: 'FIXED', maxAttempts: 3 });
  const worker = new Worker({
    concurrency: 4,
    handlers: {
      [handler]: async (payload, job) => { throw new Error(`boom ${job.attempt}`); },
      [flaky.handler]: async (payload, job) => {
        if (job.attempt === 0) throw 'not an Error';   // eslint-disable-line no-throw-literal
      },
    },
  });
  await worker.start();
  try {
    const id = await enqueue(h.admin, handler, { n: 1 });
    const flakyId = await enqueue(h.admin, flaky.handler, { n: 2 });
    await h.waitState(id, 'DEAD_LETTER', 20000);
    await h.waitState(flakyId, 'COMPLETED', 20000);

    assert.equal(await h.transitions(id), [
      'CLAIMED:0:ENQUEUED>RUNNING', 'FAILED:0:RUNNING>ENQUEUED',
      'CLAIMED:1:ENQUEUED>RUNNING', 'FAILED:1:RUNNING>ENQUEUED',
      'CLAIMED:2:ENQUEUED>RUNNING', 'FAILED:2:RUNNING>DEAD_LETTER'].join(','));
    const failed = await h.q(`SELECT attempt_number, error, at FROM vq.job_transition
                               WHERE execution_id = $1 AND kind = 'FAILED' ORDER BY id`, [id]);
    assert.deepEqual(failed.map((t) => t.error), ['boom 0', 'boom 1', 'boom 2'], 'the errors are the messages thrown');
    const claims = await h.q(`SELECT attempt_number, at FROM vq.job_transition
                               WHERE execution_id = $1 AND kind = 'CLAIMED' ORDER BY id`, [id]);
    for (const a of [1, 2]) {
      const gap = claims[a].at - failed[a - 1].at;
      assert.ok(gap >= BACKOFF - 50, `attempt ${a} taken ${gap} ms after the failure of attempt ${a - 1} (backoff ${BACKOFF} ms)`);
    }
    const j = await h.job(id);
    assert.equal(j.last_error, 'boom 2');
    assert.equal(j.attempt_number, 2);
    // the stacks, as ERROR lines of each attempt
    const lines = await h.q("SELECT attempt_number, level, message FROM vq.job_log WHERE execution_id = $1 ORDER BY id", [id]);
    assert.deepEqual(lines.map((l) => [l.attempt_number, l.level]), [[0, 'ERROR'], [1, 'ERROR'], [2, 'ERROR']]);
    for (const l of lines) {
      assert.match(l.message, new RegExp(`^Error: boom ${l.attempt_number}\\n\\s+at .*failure\\.test\\.js`), 'a stack trace');
    }

    assert.equal(await h.transitions(flakyId), 'CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED,' +
      'CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED');
    assert.equal(await h.one("SELECT error FROM vq.job_transition WHERE execution_id = $1 AND kind = 'FAILED'", [flakyId]),
      'not an Error', 'a thrown non-Error, as text');
    assert.equal(await h.one('SELECT count(*)::int FROM vq.job_log WHERE execution_id = $1', [flakyId]), 0,
      'no stack, no log line');
  } finally {
    await worker.stop();
  }
  assert.equal(worker.stats.failed, 4);
  assert.equal(worker.stats.completed, 1);
});

test('an error with retryAt retries the job at that time (the attempt consumed)', async () => {
  const { handler } = await h.externalHandler('fail.retry', { backoffMs: 3600000, maxAttempts: 5 });
  let retryAt = null;
  const worker = new Worker({
    handlers: {
      [handler]: async (payload, job) => {
        if (job.attempt === 0) {
          retryAt = new Date(Date.now() + 700);
          throw Object.assign(new Error('rate limited'), { retryAt });
        }
      },
    },
  });
  await worker.start();
  try {
    const id = await enqueue(h.admin, handler, {});
    await h.waitFor(async () => (await h.job(id)).attempt_number === 1, 'attempt 1');
    const j = await h.job(id);
    assert.equal(j.scheduled_at.getTime(), retryAt.getTime(), 'scheduled at retryAt (not after the hour of backoff)');
    await h.waitState(id, 'COMPLETED', 10000);
    assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED,' +
      'CLAIMED:1:ENQUEUED>RUNNING,COMPLETED:1:RUNNING>COMPLETED');
    assert.equal(await h.one("SELECT error FROM vq.job_transition WHERE execution_id = $1 AND kind = 'FAILED'", [id]), 'rate limited');
  } finally {
    await worker.stop();
  }
});

'use strict';
// worker.stop(): jobs taken and not started go back (no attempt consumed), jobs in flight finish
// and are replied; after stopTimeout the attempts still running are failed; stopOnSignals.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { spawn } = require('node:child_process');
const { Worker, enqueue, enqueueMany } = require('..');
const h = require('./helpers');

test.after(() => h.end());

test('graceful stop: taken-not-started jobs released (attempt unchanged), in-flight ones finish and reply', async () => {
  const { handler } = await h.externalHandler('stop.graceful');
  const gate = h.deferred();
  const started = [];
  const worker = new Worker({
    concurrency: 2, prefetch: 3,
    handlers: { [handler]: async (payload) => { started.push(payload.n); await gate.promise; } },
  });
  await worker.start();
  let stopped = false;
  try {
    const ids = await enqueueMany(h.admin, handler, [1, 2, 3, 4, 5].map((n) => ({ n })));
    await h.waitFor(async () => started.length === 2 &&
      (await h.one("SELECT count(*)::int FROM vq.job WHERE execution_id = ANY($1) AND state = 'RUNNING'", [ids])) === 5,
    '2 handlers running and 5 jobs taken');
    assert.deepEqual(worker.stats.held, 5);
    const running = new Set(started);
    const runningIds = ids.filter((_, i) => running.has(i + 1));
    const waitingIds = ids.filter((_, i) => !running.has(i + 1));

    const stopping = worker.stop().then(() => { stopped = true; });
    // the 3 taken and not started are given back at once: ENQUEUED, attempt 0, no transition
    await h.waitFor(async () => (await h.one(
      "SELECT count(*)::int FROM vq.job WHERE execution_id = ANY($1) AND state = 'ENQUEUED' AND attempt_number = 0",
      [waitingIds])) === 3, 'the 3 jobs not started released');
    for (const id of waitingIds) assert.equal(await h.transitions(id), null, 'a release records nothing');
    assert.equal(stopped, false, 'stop() waits for the jobs in flight');
    assert.equal(await h.one("SELECT count(*)::int FROM vq.job WHERE execution_id = ANY($1) AND state = 'RUNNING'", [runningIds]), 2);

    gate.resolve();
    await stopping;
    for (const id of runningIds) {
      assert.equal((await h.job(id)).state, 'COMPLETED');
      assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED');
    }
    assert.equal(worker.stats.released, 3);
    assert.deepEqual(started.sort(), [...running].sort(), 'no job started after stop()');

    // another worker runs the released jobs at their first attempt
    const again = new Worker({ handlers: { [handler]: async () => {} } });
    await again.start();
    try {
      for (const id of waitingIds) await h.waitState(id, 'COMPLETED');
      for (const id of waitingIds) assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED');
    } finally {
      await again.stop();
    }
  } finally {
    gate.resolve();
    await worker.stop();
  }
});

test('stop() after stopTimeout fails the attempts still running (retried) and resolves', async () => {
  const { handler } = await h.externalHandler('stop.timeout', { backoffMs: 3600000 });
  const seen = {};
  const started = h.deferred();
  const worker = new Worker({
    stopTimeout: 300,
    handlers: {
      [handler]: async (payload, job) => {
        job.signal.addEventListener('abort', () => { seen.reason = job.cancelReason; });
        started.resolve();
        await new Promise(() => {});
      },
    },
  });
  await worker.start();
  const id = await enqueue(h.admin, handler, {});
  await started.promise;
  const t0 = Date.now();
  await worker.stop();
  const took = Date.now() - t0;
  assert.ok(took >= 300 && took < 5000, `stop() took ${took} ms (stopTimeout 300 ms)`);
  assert.equal(seen.reason, 'stop');
  const j = await h.job(id);
  assert.deepEqual([j.state, j.attempt_number, j.last_error],
    ['ENQUEUED', 1, 'the worker stopped before the handler finished (stopTimeout 300 ms)']);
  assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,FAILED:0:RUNNING>ENQUEUED');
});

test('stopOnSignals: SIGTERM lets the job in flight finish, then the process exits by itself', async () => {
  const { handler } = await h.externalHandler('stop.signal');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vq-node-'));
  const out = path.join(dir, 'runs.txt');
  fs.writeFileSync(out, '');
  const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'worker.js'), handler, out, '{}'],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  let stdout = '';
  child.stdout.on('data', (d) => { stdout += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  try {
    await h.waitFor(() => stdout.includes('ready'), 'the worker process to start');
    const id = await enqueue(h.admin, handler, { sleepMs: 1000 });
    await h.waitFor(async () => (await h.job(id)).state === 'RUNNING', 'the job taken');
    child.kill('SIGTERM');
    const { code, signal } = await exited;
    assert.deepEqual([code, signal], [0, null], 'exit status 0, not killed by the signal');
    assert.match(stdout, /exit 0 completed=1/);
    assert.equal((await h.job(id)).state, 'COMPLETED');
    assert.equal(fs.readFileSync(out, 'utf8').trim().split('\n').length, 1);
  } finally {
    child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

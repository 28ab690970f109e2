'use strict';
// Who may take: a worker of a role that neither enqueued the jobs nor was granted the handler
// (vq_grant_consumer) takes nothing; once granted, it takes and completes them.
const test = require('node:test');
const assert = require('node:assert/strict');
const { Client } = require('pg');
const { Worker, enqueue } = require('..');
const h = require('./helpers');

const producer = h.uniq('vq_node_producer');
const outsider = h.uniq('vq_node_outsider');
const consumer = h.uniq('vq_node_consumer');

test.after(async () => {
  for (const r of [producer, outsider, consumer]) {
    await h.q(`DELETE FROM vq.job_active WHERE enqueued_by IN (SELECT oid FROM pg_roles WHERE rolname = $1)`, [r]).catch(() => {});
    await h.q(`DROP OWNED BY "${r}" CASCADE`).catch(() => {});
    await h.q(`DROP ROLE IF EXISTS "${r}"`).catch(() => {});
  }
  await h.end();
});

test('a role without the consumer grant takes nothing of another role\'s jobs; granted, it takes them', async () => {
  const { handler } = await h.externalHandler('grants');
  for (const r of [producer, outsider, consumer]) await h.q(`CREATE ROLE "${r}" LOGIN`);
  await h.q('SELECT vq_grant_producer($1, $2)', [handler, producer]);

  const app = new Client({ user: producer });
  await app.connect();
  const ids = [];
  try {
    for (let i = 0; i < 3; i++) ids.push(await enqueue(app, handler, { i }));
  } finally {
    await app.end();
  }

  const ranByOutsider = [];
  const stranger = new Worker({ config: { user: outsider }, pollInterval: 50, handlers: { [handler]: async (p) => { ranByOutsider.push(p); } } });
  await stranger.start();
  try {
    const takes = stranger.stats.takes;
    await h.waitFor(() => stranger.stats.takes >= takes + 5, 'five takes by the role without a grant');
    assert.equal(stranger.stats.taken, 0);
    assert.deepEqual(ranByOutsider, []);
    assert.equal(await h.one("SELECT count(*)::int FROM vq.job WHERE execution_id = ANY($1) AND state = 'ENQUEUED' AND attempt_number = 0",
      [ids]), 3, 'the jobs still ENQUEUED, no attempt consumed');
  } finally {
    await stranger.stop();
  }

  await h.q('SELECT vq_grant_consumer($1, $2)', [handler, consumer]);
  const ran = [];
  const granted = new Worker({ config: { user: consumer }, handlers: { [handler]: async (p, job) => { ran.push(job.id); } } });
  await granted.start();
  try {
    for (const id of ids) await h.waitState(id, 'COMPLETED');
    assert.deepEqual(ran.sort(), [...ids].sort());
    for (const id of ids) assert.equal(await h.transitions(id), 'CLAIMED:0:ENQUEUED>RUNNING,COMPLETED:0:RUNNING>COMPLETED');
    assert.equal(await h.one('SELECT count(DISTINCT enqueued_by::text)::int FROM vq.job WHERE execution_id = ANY($1)', [ids]), 1);
  } finally {
    await granted.stop();
  }
});

'use strict';
// enqueue / enqueueMany: run on the caller's client or pool, so that they join the caller's
// transaction (a pool runs each call in a transaction of its own).

const lit = require('./literal');
const { toIso } = require('./worker');

// vq_enqueue's arguments are positional, in this order (part of its contract):
// handler, payload, run_at, queue, priority, max_attempts, job_id[, metadata, unique_for].
const ENQUEUE_SQL = 'SELECT vq_enqueue($1::text, $2::jsonb, $3::timestamptz, $4::text, $5::int, $6::int, $7::text) AS id';
const ENQUEUE_MORE_SQL = 'SELECT vq_enqueue($1::text, $2::jsonb, $3::timestamptz, $4::text, $5::int, $6::int, $7::text, $8::jsonb, $9::interval) AS id';
// handler, payloads, run_at, queue, priority, max_attempts, job_ids, metadata
const ENQUEUE_MANY_SQL = 'SELECT vq_enqueue_many($1::text, $2::jsonb[], $3::timestamptz, $4::text, $5::int, $6::int, $7::text[], $8::jsonb) AS ids';

function checkDb(db) {
  if (!db || typeof db.query !== 'function') throw new TypeError('vq-job: enqueue needs a pg Client, PoolClient or Pool');
}

function optional(v) {
  return v === undefined ? null : v;
}

function runAtValue(runAt) {
  return runAt === undefined || runAt === null ? null : toIso(runAt);
}

function intervalValue(v) {
  if (v === undefined || v === null) return null;
  return typeof v === 'number' ? lit.interval(v) : String(v);
}

// enqueue(db, handler, payload, { runAt, jobId, queue, priority, maxAttempts, metadata, uniqueFor }):
// the new job's execution_id.
async function enqueue(db, handler, payload, options = {}) {
  checkDb(db);
  const { runAt, jobId, queue, priority, maxAttempts, metadata, uniqueFor } = options || {};
  const values = [handler, payload === undefined || payload === null ? null : lit.jsonText(payload), runAtValue(runAt),
    optional(queue), optional(priority), optional(maxAttempts), optional(jobId)];
  let text = ENQUEUE_SQL;
  if ((metadata !== undefined && metadata !== null) || (uniqueFor !== undefined && uniqueFor !== null)) {
    text = ENQUEUE_MORE_SQL;
    values.push(metadata === undefined || metadata === null ? null : lit.jsonText(metadata), intervalValue(uniqueFor));
  }
  const res = await db.query({ text, values });
  return res.rows[0].id;
}

// enqueueMany(db, handler, payloads, { runAt, jobIds, queue, priority, maxAttempts, metadata }):
// one job per payload in one statement; their execution_ids in order.
async function enqueueMany(db, handler, payloads, options = {}) {
  checkDb(db);
  if (!Array.isArray(payloads)) throw new TypeError('vq-job: enqueueMany needs an array of payloads');
  const { runAt, jobIds, queue, priority, maxAttempts, metadata } = options || {};
  const values = [handler, lit.quotedArray(payloads.map((p) => (p === undefined || p === null ? null : lit.jsonText(p)))),
    runAtValue(runAt), optional(queue), optional(priority), optional(maxAttempts),
    jobIds === undefined || jobIds === null ? null : lit.quotedArray(jobIds),
    metadata === undefined || metadata === null ? null : lit.jsonText(metadata)];
  const res = await db.query({ text: ENQUEUE_MANY_SQL, values, rowMode: 'array' });
  return res.rows[0][0];
}

module.exports = { enqueue, enqueueMany };

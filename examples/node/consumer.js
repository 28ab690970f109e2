#!/usr/bin/env node
// consumer.js: the worker of the external handler shop.render-invoice, with the vq-job library
// (clients/node).
//
//   node consumer.js
//
// The Worker LISTENs on the handler's channel and takes due jobs in batches (vq_take_jobs), runs
// renderInvoice for each and replies for many at once (vq_reply_jobs): a handler that returns
// completes the job, one that throws fails the attempt with the error's message (retried with
// the queue's backoff, then dead-lettered). A job is replied after its handler returned, so a
// worker that dies in between leaves it to be run again (at least once): the invoice row is
// written idempotently (one per execution_id). Connects with the libpq variables, directly
// (through a transaction pooler, give it a direct listenConnectionString). Prints "listening"
// when ready; stops gracefully on SIGTERM or SIGINT (jobs in flight finish and are replied).
'use strict';

const { Pool } = require('pg');
const { Worker } = require('vq-job');

const HANDLER = 'shop.render-invoice';

const log = (msg) => console.log(`consumer.js: ${msg}`);

// The work itself. A payload can ask to fail, to show retries and dead letters.
function renderInvoice(payload, attempt) {
  if (payload.fail === 'always') {
    throw new Error(`cannot render invoice for order ${payload.order_id}`);
  }
  if (attempt < (payload.fail_attempts || 0)) {
    throw new Error(`renderer busy (attempt ${attempt})`);
  }
  return `invoice for order ${payload.order_id}`;
}

async function main() {
  const pool = new Pool({ max: 4 });
  const worker = new Worker({
    concurrency: 4,
    logger: { info: log, warn: log, error: log },
    handlers: {
      [HANDLER]: async (payload, job) => {
        try {
          renderInvoice(payload, job.attempt);
        } catch (err) {
          log(`${job.id} attempt ${job.attempt} failed: ${err.message}`);
          throw err;
        }
        await pool.query(`INSERT INTO shop.invoice (order_id, execution_id, rendered_by) VALUES ($1, $2, $3)
                          ON CONFLICT (execution_id) DO NOTHING`, [payload.order_id, job.id, 'node']);
        job.log(`rendered the invoice of order ${payload.order_id}`);
        log(`${job.id} attempt ${job.attempt} completed`);
      },
    },
  });
  await worker.start();
  // SIGTERM / SIGINT: stop taking, finish and reply the jobs in flight, close the connections.
  worker.stopOnSignals(['SIGTERM', 'SIGINT']);
  log('listening');
  await worker.stopped;
  await pool.end();
  log('stopped');
}

main().catch((err) => {
  console.error(`consumer.js: ${err.message}`);
  process.exit(1);
});

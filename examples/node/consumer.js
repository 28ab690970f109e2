#!/usr/bin/env node
// consumer.js: an external consumer of the NOTIFY handler shop.render-invoice.
//
//   node consumer.js
//
// LISTENs on the handler's channel; each announcement names a job ({"execution_id", "attempt"})
// and nothing else, so the job and its payload are taken with vq_take, which checks who asks.
// vq_pull catches up at start and every few seconds (jobs announced while no consumer
// listened). The invoice row and vq_complete commit together: if the reply is ignored (the
// attempt timed out meanwhile) the invoice is rolled back too. A render error is replied with
// vq_fail, which retries with the queue's backoff or dead-letters the job.
// Connects with the libpq variables, directly (LISTEN needs a session: not through a
// transaction pooler). Prints "listening" when ready; stops on SIGTERM or SIGINT.
'use strict';

const { Client } = require('pg');

const HANDLER = 'shop.render-invoice';
const CHANNEL = 'shop_invoice';
const PULL_EVERY_MS = 5000;
const PULL_BATCH = 10;
const COLUMNS = 'execution_id, attempt, payload, cancel_requested';

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

// Run one taken job and reply.
async function handle(client, job) {
  const { execution_id: id, attempt, payload } = job;
  if (job.cancel_requested) {
    // vq_cancel asked this job to stop: any reply records it CANCELLED.
    await client.query('SELECT vq_fail($1, $2, $3)', [id, 'cancelled before rendering', attempt]);
    return;
  }
  try {
    renderInvoice(payload, attempt);
  } catch (err) {
    const { rows: [r] } = await client.query('SELECT vq_fail($1, $2, $3) AS accepted', [id, err.message, attempt]);
    log(`${id} attempt ${attempt} failed: ${err.message}${r.accepted ? '' : ' (reply ignored)'}`);
    return;
  }
  await client.query('BEGIN');
  try {
    await client.query('INSERT INTO shop.invoice (order_id, execution_id, rendered_by) VALUES ($1, $2, $3)',
      [payload.order_id, id, 'node']);
    const { rows: [r] } = await client.query('SELECT vq_complete($1, $2) AS accepted', [id, attempt]);
    await client.query(r.accepted ? 'COMMIT' : 'ROLLBACK');
    log(`${id} attempt ${attempt} ${r.accepted ? 'completed' : 'reply ignored, invoice rolled back'}`);
  } catch (err) {
    await client.query('ROLLBACK');
    await client.query('SELECT vq_fail($1, $2, $3)', [id, err.message, attempt]);
    log(`${id} attempt ${attempt} failed: ${err.message}`);
  }
}

async function main() {
  const client = new Client();
  await client.connect();

  const announced = [];
  let wake = () => {};
  let stopping = false;
  client.on('notification', (msg) => {
    try {
      const { execution_id: id, attempt } = JSON.parse(msg.payload);
      announced.push({ id, attempt });
    } catch (err) {
      log(`ignoring a notification that is not an announcement: ${JSON.stringify(msg.payload)}`);
    }
    wake();
  });
  for (const sig of ['SIGTERM', 'SIGINT']) {
    process.on(sig, () => { stopping = true; wake(); });
  }

  // LISTEN before the first pull, so that no job falls between the two.
  await client.query(`LISTEN ${client.escapeIdentifier(CHANNEL)}`);
  log('listening');
  let nextPull = 0;
  while (!stopping) {
    if (Date.now() >= nextPull) {
      let rows;
      do {
        ({ rows } = await client.query(`SELECT ${COLUMNS} FROM vq_pull($1, $2)`, [HANDLER, PULL_BATCH]));
        for (const job of rows) await handle(client, job);
      } while (rows.length === PULL_BATCH && !stopping);
      nextPull = Date.now() + PULL_EVERY_MS;
    }
    while (announced.length > 0 && !stopping) {
      const { id, attempt } = announced.shift();
      // No row: another consumer took it, or it is not ours to take.
      const { rows } = await client.query(`SELECT ${COLUMNS} FROM vq_take($1, $2, $3)`, [id, attempt, HANDLER]);
      for (const job of rows) await handle(client, job);
    }
    if (!stopping && announced.length === 0) {
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, Math.max(0, nextPull - Date.now()));
        wake = () => { clearTimeout(timer); resolve(); };
      });
      wake = () => {};
    }
  }
  await client.end();
  log('stopped');
}

main().catch((err) => {
  console.error(`consumer.js: ${err.message}`);
  process.exit(1);
});

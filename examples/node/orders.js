#!/usr/bin/env node
// orders.js: an order saved and its jobs enqueued in one transaction, an outbox publish in the
// same transaction, and a transaction that fails after enqueuing and leaves nothing.
//
//   node orders.js [LABEL]
//
// Connects with the libpq variables (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD), straight
// to PostgreSQL or through PgBouncer in transaction pooling mode: nothing here relies on session
// state. Prints one JSON line: what was committed, what was rolled back, and the durable context
// a later transaction sees (always {}).
'use strict';

const { Client } = require('pg');

// vq_enqueue's arguments are positional, in this order (part of its contract):
// handler, payload, run_at, queue, priority, max_attempts, job_id, metadata.
const ENQUEUE = 'SELECT vq_enqueue($1, $2::jsonb, $3::timestamptz, NULL, NULL, NULL, $4, $5::jsonb) AS id';
const PUBLISH = 'SELECT vq_outbox_publish($1, $2::jsonb, NULL, $3::jsonb) AS id';
const THREE_DAYS_MS = 3 * 24 * 3600 * 1000;

class PaymentDeclined extends Error {}

// Save an order and enqueue what follows from it, all in one transaction.
async function placeOrder(client, { customer, total, requestId, declinePayment = false }) {
  await client.query('BEGIN');
  try {
    // Durable context for this transaction only (is_local => true, as SET LOCAL): every job
    // enqueued and every outbox row published below carries it, and it ends with the
    // transaction, so it never reaches the next client of a pooled server connection.
    // (The session form, without is_local, would: not through a transaction pooler.)
    await client.query("SELECT vq_context_set('request', $1, is_local => true)",
      [JSON.stringify({ id: requestId, client: 'node' })]);

    const { rows: [order] } = await client.query(
      'INSERT INTO shop.orders (customer, total) VALUES ($1, $2) RETURNING id', [customer, total]);
    const payload = JSON.stringify({ order_id: Number(order.id) });

    // Per-call metadata is merged with the bound context (another namespace than the context's).
    const email = await client.query(ENQUEUE, ['shop.confirm-email', payload, null,
      `order-${order.id}-email`, JSON.stringify({ order: { customer } })]);
    const followUp = await client.query(ENQUEUE, ['shop.follow-up', payload,
      new Date(Date.now() + THREE_DAYS_MS).toISOString(), `order-${order.id}-follow-up`, null]);
    // The outbox row becomes a job of the NOTIFY handler after commit (the relay enqueues it);
    // its headers stay on the outbox row.
    const outbox = await client.query(PUBLISH, ['shop.render-invoice',
      JSON.stringify({ order_id: Number(order.id), total }), JSON.stringify({ source: 'orders.js' })]);

    if (declinePayment) {
      throw new PaymentDeclined('payment declined');
    }
    await client.query('COMMIT');
    return {
      order_id: Number(order.id),
      email_job: email.rows[0].id,
      follow_up_job: followUp.rows[0].id,
      outbox_id: Number(outbox.rows[0].id),
    };
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
}

async function main() {
  const label = process.argv[2] || 'node';
  const client = new Client();
  await client.connect();
  try {
    const committed = await placeOrder(client,
      { customer: `${label}-committed`, total: '42.50', requestId: `${label}-req-1` });

    let rolledBack = null;
    try {
      await placeOrder(client, { customer: `${label}-rolled-back`, total: '13.00',
        requestId: `${label}-req-2`, declinePayment: true });
    } catch (err) {
      if (!(err instanceof PaymentDeclined)) throw err;
      rolledBack = { customer: `${label}-rolled-back`, error: err.message };
    }

    const { rows: [after] } = await client.query('SELECT vq_context() AS context');
    console.log(JSON.stringify({ label, committed, rolled_back: rolledBack, context_after: after.context }));
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(`orders.js: ${err.message}`);
  process.exit(1);
});

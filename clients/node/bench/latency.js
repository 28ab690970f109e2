#!/usr/bin/env node
// bench/latency.js: enqueue-commit -> handler-start latency of an idle worker.
//
//   node bench/latency.js [JOBS=300] [GAP_MS=20]
//
// Connects with the libpq variables (a superuser: registers handler bench.latency on queue
// bench). One job at a time, GAP_MS apart, enqueued by a client of this process (autocommit);
// the handler runs in this process too, so both ends are read on one clock:
//   ack  = handler start - the moment the enqueue's COMMIT was acknowledged;
//   call = handler start - the moment the enqueue was sent.
'use strict';
const { Client } = require('pg');
const { Worker, enqueue } = require('..');

const [JOBS = 300, GAP = 20] = process.argv.slice(2).map(Number);
const WARM = 20;
const now = () => performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  const i = (s.length - 1) * p, lo = Math.floor(i), hi = Math.ceil(i);
  return s[lo] + (s[hi] - s[lo]) * (i - lo);
};

async function main() {
  const admin = new Client();
  await admin.connect();
  await admin.query(`DO $$ BEGIN
      IF NOT EXISTS (SELECT FROM vq.queue WHERE name = 'bench') THEN
        PERFORM vq_create_queue('bench', max_concurrent_jobs => 1000000);
      END IF;
      IF NOT EXISTS (SELECT FROM vq.handler WHERE name = 'bench.latency') THEN
        PERFORM vq_register_notify_handler('bench.latency', 'bench_latency', 'bench');
      END IF; END $$`);
  const starts = new Map();
  const worker = new Worker({ concurrency: 10, handlers: { 'bench.latency': (payload) => { starts.set(payload.i, now()); } } });
  await worker.start();
  const sent = [];
  for (let i = 0; i < JOBS + WARM; i++) {
    const call = now();
    await enqueue(admin, 'bench.latency', { i });
    const ack = now();
    if (i >= WARM) sent.push({ i, call, ack });
    await sleep(GAP);
  }
  const deadline = now() + 10000;
  while (!sent.every((s) => starts.has(s.i)) && now() < deadline) await sleep(10);
  await worker.stop();
  await admin.end();
  const ok = sent.filter((s) => starts.has(s.i));
  const ack = ok.map((s) => starts.get(s.i) - s.ack);
  const call = ok.map((s) => starts.get(s.i) - s.call);
  const f = (x) => x.toFixed(3);
  console.log(`jobs=${sent.length} started=${ok.length} gap_ms=${GAP} ` +
    `ack_p50=${f(pct(ack, 0.5))} ack_p95=${f(pct(ack, 0.95))} ack_p99=${f(pct(ack, 0.99))} ` +
    `call_p50=${f(pct(call, 0.5))} call_p99=${f(pct(call, 0.99))} (ms)`);
}
main().catch((e) => { console.error(e); process.exit(1); });

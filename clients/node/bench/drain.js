#!/usr/bin/env node
// bench/drain.js: the drain of a backlog of no-op jobs through a Worker, timed.
//
//   node bench/drain.js [JOBS=50000] [CONCURRENCY=1000] [BATCH=1000] [ROUNDS=1]
//
// Connects with the libpq variables (a superuser: it registers handler bench.noop on queue
// bench, capacity 1,000,000). Per round: JOBS jobs in one vq_enqueue_many (committed before the
// worker starts), then a worker drains them; prints jobs/s from the first take to the last reply.
'use strict';
const { Client } = require('pg');
const { Worker } = require('..');

const [JOBS = 50000, CONCURRENCY = 1000, BATCH = 1000, ROUNDS = 1] = process.argv.slice(2).map(Number);

async function main() {
  const admin = new Client();
  await admin.connect();
  await admin.query(`DO $$ BEGIN
      IF NOT EXISTS (SELECT FROM vq.queue WHERE name = 'bench') THEN
        PERFORM vq_create_queue('bench', max_concurrent_jobs => 1000000);
      END IF;
      IF NOT EXISTS (SELECT FROM vq.handler WHERE name = 'bench.noop') THEN
        PERFORM vq_register_notify_handler('bench.noop', 'bench_noop', 'bench');
      END IF; END $$`);
  for (let round = 1; round <= ROUNDS; round++) {
    await admin.query(`SELECT count(*) FROM unnest(vq_enqueue_many('bench.noop', array_fill('{"n": 1}'::jsonb, ARRAY[${JOBS}])))`);
    let first = 0;
    let resolve;
    const finished = new Promise((r) => { resolve = r; });
    const worker = new Worker({
      concurrency: CONCURRENCY, batchSize: BATCH,
      handlers: { 'bench.noop': async () => { if (first === 0) first = performance.now(); } },
    });
    await worker.start();
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    // finished when the server has every reply
    const poll = setInterval(() => { if (worker.stats.completed >= JOBS) { clearInterval(poll); resolve(); } }, 1);
    await finished;
    const t1 = performance.now();
    const cpu = process.cpuUsage(cpu0);
    await worker.stop();
    const left = (await admin.query("SELECT count(*)::int AS n FROM vq.job_active WHERE handler = 'bench.noop'")).rows[0].n;
    const s = worker.stats;
    console.log(`round ${round}: ${JOBS} jobs in ${((t1 - t0) / 1000).toFixed(3)} s = ${Math.round(JOBS / ((t1 - t0) / 1000))} jobs/s` +
      ` (takes ${s.takes}, reply calls ${s.replyCalls}, left ${left}, concurrency ${CONCURRENCY}, batch ${BATCH};` +
      ` node CPU ${((cpu.user + cpu.system) / 1000 / (t1 - t0) * 100).toFixed(0)}% = ${((cpu.user + cpu.system) / JOBS).toFixed(1)} us/job)`);
  }
  await admin.end();
}
main().catch((e) => { console.error(e); process.exit(1); });

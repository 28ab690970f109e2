#!/usr/bin/env node
// stats.js: read vq.queue_stats and vq_metrics() and print them as one JSON object:
//   {"queues": [{"queue", "paused", "due", "scheduled", "running", "completed", "dead_letter",
//                "cancelled", "oldest_due_seconds", "completed_last_minute"}, ...],
//    "metrics": [{"name", "labels": {...}, "value"}, ...]}
//
//   node stats.js
//
// Both count the jobs of the roles the caller is a member of (scope 'own'), or every job for a
// member of pg_monitor (scope 'all'): run it as the application role, or as a monitoring role.
'use strict';

const { Client } = require('pg');

const STATS = `
  SELECT queue, paused, due, scheduled, running, completed, dead_letter, cancelled,
         extract(epoch FROM oldest_due_age)::float8 AS oldest_due_seconds, completed_last_minute
    FROM vq.queue_stats ORDER BY queue`;
const COUNTS = ['due', 'scheduled', 'running', 'completed', 'dead_letter', 'cancelled', 'completed_last_minute'];

// One line of vq_metrics(): name{label="value",...} number.
const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function parseMetric(line) {
  const m = LINE.exec(line);
  if (!m) throw new Error(`not a metric line: ${line}`);
  const labels = {};
  for (const [, name, value] of (m[2] || '').matchAll(LABEL)) {
    labels[name] = value.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
  }
  return { name: m[1], labels, value: Number(m[3]) };
}

async function main() {
  const client = new Client();
  await client.connect();
  try {
    const stats = await client.query(STATS);
    // count() is a bigint, which node-postgres returns as a string.
    const queues = stats.rows.map((r) => {
      const q = { ...r };
      for (const c of COUNTS) q[c] = Number(r[c]);
      return q;
    });
    const lines = await client.query('SELECT line FROM vq_metrics() AS line');
    const metrics = lines.rows.map((r) => parseMetric(r.line));
    console.log(JSON.stringify({ queues, metrics }));
  } finally {
    await client.end();
  }
}

main().catch((err) => {
  console.error(`stats.js: ${err.message}`);
  process.exit(1);
});

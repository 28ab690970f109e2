#!/usr/bin/env node
// exporter.js: a tiny Prometheus exporter: GET /metrics answers vq_metrics() in the text
// exposition format, each family with its HELP and TYPE lines.
//
//   node exporter.js [PORT] [HOST]        (defaults 9464, 127.0.0.1; port 0: any free port)
//
// Connects with the libpq variables. vq_metrics() counts every job when the exporter's role is a
// member of pg_monitor (scope="all"), else the jobs of its roles (scope="own"). Scrape config: static_configs: [{targets: ['HOST:PORT']}].
// Prints "listening on http://HOST:PORT/metrics" when ready; stops on SIGTERM or SIGINT.
'use strict';

const http = require('http');
const { Pool } = require('pg');

const HELP = {
  vq_jobs: 'Jobs by queue and state (due, scheduled, running, completed, dead_letter, cancelled).',
  vq_oldest_due_seconds: 'How long the oldest due job of the queue has waited.',
  vq_completed_last_minute: 'Jobs of the queue completed in the last minute.',
  vq_outbox_rows: 'Outbox rows by status.',
};

// vq_metrics() lines grouped by family, each family after its HELP and TYPE lines.
function exposition(lines) {
  const families = new Map();
  for (const line of lines) {
    const name = line.split(/[{ ]/, 1)[0];
    if (!families.has(name)) families.set(name, []);
    families.get(name).push(line);
  }
  let out = '';
  for (const [name, samples] of families) {
    out += `# HELP ${name} ${HELP[name] || 'vq_job metric.'}\n# TYPE ${name} gauge\n`;
    out += samples.join('\n') + '\n';
  }
  return out;
}

const port = Number(process.argv[2] || 9464);
const host = process.argv[3] || '127.0.0.1';
const pool = new Pool({ max: 2 });

const server = http.createServer(async (req, res) => {
  if (req.method !== 'GET' || req.url !== '/metrics') {
    res.writeHead(404, { 'Content-Type': 'text/plain' }).end('try /metrics\n');
    return;
  }
  try {
    const { rows } = await pool.query('SELECT line FROM vq_metrics() AS line');
    res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4; charset=utf-8' })
      .end(exposition(rows.map((r) => r.line)));
  } catch (err) {
    // Prometheus marks the target down; the reason is in the body and the exporter's log.
    console.error(`exporter.js: scrape failed: ${err.message}`);
    res.writeHead(503, { 'Content-Type': 'text/plain' }).end(`scrape failed: ${err.message}\n`);
  }
});

function stop() {
  server.close(() => pool.end().then(() => process.exit(0)));
  server.closeIdleConnections(); // keep-alive connections would hold close() (Node 18)
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
server.listen(port, host, () => console.log(`listening on http://${host}:${server.address().port}/metrics`));

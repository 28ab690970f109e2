#!/usr/bin/env node
// test/compare/driver.js — the client side of scripts/compare: enqueues, workers and the latency
// probe of vq_job, graphile-worker and pg-boss, each through its own client library on node-postgres.
//
//   node driver.js setup    SYSTEM                      install the peer's schema and its queue 'noop'
//   node driver.js enqueue  SYSTEM CLIENTS JOBS         one job per transaction, CLIENTS at once
//   node driver.js batch    SYSTEM JOBS BATCH           JOBS jobs in transactions of BATCH, one client
//   node driver.js load     SYSTEM JOBS                 JOBS no-op jobs in one transaction (SQL)
//   node driver.js drain    SYSTEM JOBS SETTING         load JOBS, then run them with SETTING, time it
//   node driver.js latency  SYSTEM JOBS GAP_MS POLL_MS  idle worker; JOBS jobs GAP_MS apart
//   node driver.js worker   SYSTEM SETTING OUTFILE      run no-op jobs until SIGTERM; per job one line
//                                                       "created_ms start_ms" into OUTFILE
//   node driver.js enqueue-sql SYSTEM / load-sql SYSTEM N   print the SQL that enqueues one / N jobs
//   node driver.js windows FILE BACKLOG T0_MS WINDOW_S SECS  steady-load windows (see windows())
// SYSTEM: vq (vq_job through SQL; its handlers run in the server), graphile (graphile-worker),
// pgboss (pg-boss), vqnode (vq_job's external handler 'ext' run by clients/node's Worker: drain,
// latency, worker, load-sql). The connection comes from the PG* environment variables. Every
// command prints one line "key=value ..." on stdout.
// SETTING: "c=10,lq=500,bd=0" (graphile: concurrency, local queue size, completeJobBatchDelay ms)
//          "w=2,b=1000,p=0.5"  (pg-boss: work() calls, batchSize, pollingIntervalSeconds)
//          "c=2000,b=1000,p=2" (vqnode: concurrency, batchSize, pipelines; unset = the library's default)
'use strict';

const fs = require('fs');
const { Pool } = require('pg');

const QUEUE = 'noop';
const EXT = 'ext';      // vq_job's external handler (test/compare/vq_setup.sql), in queue bench_ext
const PAYLOAD = { n: 1 };
const log = (...a) => console.error('[driver]', ...a);
const now = () => performance.timeOrigin + performance.now();   // epoch ms, sub-ms resolution
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const conn = () => {
    const host = process.env.PGHOST, port = process.env.PGPORT, db = process.env.PGDATABASE;
    return `postgresql://${encodeURIComponent(process.env.PGUSER || 'postgres')}@/${db}?host=${encodeURIComponent(host)}&port=${port}`;
};
const pool = (max) => {
    const p = new Pool({ connectionString: conn(), max });
    p.on('error', (e) => log('pool error', e.message));
    p.on('connect', (c) => c.on('error', (e) => log('client error', e.message)));
    return p;
};
const parseSetting = (s) => Object.fromEntries((s || '').split(',').filter(Boolean).map((kv) => {
    const [k, v] = kv.split('=');
    return [k, Number(v)];
}));
const pct = (xs, p) => {
    if (!xs.length) return NaN;
    const s = [...xs].sort((a, b) => a - b);
    const i = (s.length - 1) * p, lo = Math.floor(i), hi = Math.ceil(i);
    return s[lo] + (s[hi] - s[lo]) * (i - lo);
};
const fx = (x, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const out = (o) => console.log(Object.entries(o).map(([k, v]) => `${k}=${v}`).join(' '));

// --- the peers' libraries, loaded only when used -----------------------------------------
const graphile = () => require('graphile-worker');
const vqjob = () => require('vq-job');     // clients/node, installed as a copy (test/compare/.npmrc)
const PgBoss = () => require('pg-boss');
const bossOptions = (extra) => ({
    connectionString: conn(), supervise: false, schedule: false, migrate: false,
    ...extra,
});

// SQL that loads N no-op jobs in one statement, per system (what a backlog is made of).
const loadSql = {
    vq: (n) => `SELECT count(*) FROM unnest(vq_enqueue_many('${QUEUE}', array_fill('{"n": 1}'::jsonb, ARRAY[${n}])))`,
    graphile: (n) => `SELECT count(*) FROM graphile_worker.add_jobs(ARRAY(SELECT ROW('${QUEUE}', '{"n": 1}'::json,
                        NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec FROM generate_series(1, ${n})))`,
    pgboss: (n) => `INSERT INTO pgboss.job (name, data) SELECT '${QUEUE}', '{"n": 1}'::jsonb FROM generate_series(1, ${n})`,
    vqnode: (n) => `SELECT count(*) FROM unnest(vq_enqueue_many('${EXT}', array_fill('{"n": 1}'::jsonb, ARRAY[${n}])))`,
};
// SQL that enqueues one no-op job (the SQL path of the enqueue workload, run by pgbench).
const enqueueSql = {
    vq: `SELECT vq_enqueue('${QUEUE}', '{"n": 1}'::jsonb)`,
    graphile: `SELECT graphile_worker.add_job('${QUEUE}', '{"n": 1}'::json)`,
    pgboss: `INSERT INTO pgboss.job (name, data) VALUES ('${QUEUE}', '{"n": 1}'::jsonb)`,
};
// SQL: are all jobs finished?
const doneSql = {
    graphile: `SELECT NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS done`,
    pgboss: `SELECT NOT EXISTS (SELECT 1 FROM pgboss.job WHERE name = '${QUEUE}' AND state < 'completed') AS done`,
    // (a job leaves vq.job_active when it ends)
    vqnode: `SELECT NOT EXISTS (SELECT 1 FROM vq.job_active WHERE handler = '${EXT}') AS done`,
};

async function setup(system) {
    if (system === 'graphile') {
        await graphile().runMigrations({ connectionString: conn(), logger: quietLogger() });
    } else if (system === 'pgboss') {
        const boss = new (PgBoss())(bossOptions({ migrate: true }));
        boss.on('error', (e) => log('pg-boss error', e.message));
        await boss.start();
        await boss.createQueue(QUEUE);
        await boss.stop({ graceful: false, wait: true });
    }
    out({ setup: system });
}

function quietLogger() {
    const { Logger } = graphile();
    return new Logger(() => (level, message) => {
        if (level === 'error' || level === 'warning') log('graphile', level, message);
    });
}

// An enqueue function (one job per call, committed when the promise resolves) on a pool of
// `max` connections, through each system's client API. Returns { add, addMany, close }.
// (vq_job's client API is SQL: vq_enqueue / vq_enqueue_many called through node-postgres.)
async function enqueuer(system, max, handler = QUEUE) {
    if (system === 'vqnode') {
        const p = pool(max);
        const { enqueue: add } = vqjob();
        return { add: () => add(p, EXT, PAYLOAD), close: () => p.end() };
    }
    if (system === 'vq') {
        const p = pool(max);
        return {
            add: async () => (await p.query(`SELECT vq_enqueue($1, $2::jsonb) AS id`, [handler, PAYLOAD])).rows[0].id,
            addMany: async (n) => p.query(`SELECT count(*) FROM unnest(vq_enqueue_many($1, $2::jsonb[]))`,
                [QUEUE, Array(n).fill(JSON.stringify(PAYLOAD))]),
            close: () => p.end(),
        };
    }
    if (system === 'graphile') {
        const p = pool(max);
        const utils = await graphile().makeWorkerUtils({ pgPool: p, logger: quietLogger() });
        return {
            add: async () => (await utils.addJob(QUEUE, PAYLOAD)).id,
            addMany: async (n) => utils.addJobs(Array.from({ length: n }, () => ({ identifier: QUEUE, payload: PAYLOAD }))),
            close: async () => { await utils.release(); await p.end(); },
        };
    }
    const boss = new (PgBoss())(bossOptions({ max }));
    boss.on('error', (e) => log('pg-boss error', e.message));
    await boss.start();
    return {
        add: async () => boss.send(QUEUE, PAYLOAD),
        addMany: async (n) => boss.insert(Array.from({ length: n }, () => ({ name: QUEUE, data: PAYLOAD }))),
        close: () => boss.stop({ graceful: false, wait: true }),
    };
}

async function enqueue(system, clients, jobs) {
    const e = await enqueuer(system, clients);
    await Promise.all(Array.from({ length: clients }, () => e.add()));   // connect every client
    let left = jobs;
    const t0 = now();
    await Promise.all(Array.from({ length: clients }, async () => {
        while (left > 0) { left--; await e.add(); }
    }));
    const secs = (now() - t0) / 1000;
    await e.close();
    out({ jobs, clients, secs: fx(secs), rate: Math.round(jobs / secs) });
}

async function batch(system, jobs, size) {
    const e = await enqueuer(system, 1);
    await e.addMany(1);   // connect, prepare
    const t0 = now();
    for (let done = 0; done < jobs; done += size) await e.addMany(Math.min(size, jobs - done));
    const secs = (now() - t0) / 1000;
    await e.close();
    out({ jobs, batch: size, secs: fx(secs), rate: Math.round(jobs / secs) });
}

async function load(system, jobs) {
    const p = pool(1);
    const t0 = now();
    await p.query(loadSql[system](jobs));
    const secs = (now() - t0) / 1000;
    await p.end();
    out({ jobs, secs: fx(secs) });
}

// A running worker of a peer. onJob(job) is called at each handler start with
// { id, created } (created: epoch ms of the job's creation, when the system reports it).
async function startWorker(system, s, onJob) {
    if (system === 'vqnode') {
        const opts = {
            connectionString: conn(), handlers: { [EXT]: async (_payload, job) => { onJob({ id: job.id }); } },
            logger: { warn: (...a) => log('vq-job', ...a), error: (...a) => log('vq-job', ...a) },
        };
        if (s.c) opts.concurrency = s.c;
        if (s.b) opts.batchSize = s.b;
        if (s.p) opts.pipelines = s.p;
        const w = new (vqjob().Worker)(opts);
        await w.start();
        return { stop: () => w.stop(), stats: () => w.stats };
    }
    if (system === 'graphile') {
        const preset = { worker: {} };
        if (s.lq > 0) preset.worker.localQueue = { size: s.lq };
        if (s.bd !== undefined) preset.worker.completeJobBatchDelay = s.bd;
        const runner = await graphile().run({
            connectionString: conn(), concurrency: s.c || 1, noHandleSignals: true,
            pollInterval: s.p || 2000, maxPoolSize: Math.max(10, (s.c || 1) + 2), logger: quietLogger(), preset,
            taskList: { [QUEUE]: async (_payload, helpers) => onJob({ id: String(helpers.job.id), created: +helpers.job.created_at }) },
        });
        return { stop: () => runner.stop() };
    }
    const boss = new (PgBoss())(bossOptions({ max: Math.max(10, (s.w || 1) + 2) }));
    boss.on('error', (e) => log('pg-boss error', e.message));
    await boss.start();
    const opts = { batchSize: s.b || 1, includeMetadata: true };
    if (s.p) opts.pollingIntervalSeconds = s.p;
    for (let i = 0; i < (s.w || 1); i++) {
        await boss.work(QUEUE, opts, async (jobs) => {
            for (const j of jobs) onJob({ id: j.id, created: +j.createdOn });
        });
    }
    return { stop: () => boss.stop({ graceful: true, wait: true, timeout: 5000 }) };
}

// The server's clock minus ours (ms), from the probe with the lowest round trip of 20.
async function clockOffset(p) {
    const offs = [];
    for (let i = 0; i < 20; i++) {
        const a = now();
        const r = await p.query(`SELECT extract(epoch FROM clock_timestamp()) * 1000 AS t`);
        const b = now();
        offs.push({ rtt: b - a, off: Number(r.rows[0].t) - (a + b) / 2 });
    }
    offs.sort((x, y) => x.rtt - y.rtt);
    return offs[0].off;
}

// vq_job, the external handler run by clients/node's Worker: JOBS jobs loaded (committed) first;
// rate = JOBS / (the last finished_at - the moment worker.start() is called), on the server's
// clock (ours is aligned with it by clockOffset). Also from the first handler start, as the peers
// are counted (first_rate).
async function drainVqNode(jobs, setting) {
    const s = parseSetting(setting);
    const p = pool(1);
    await p.query(loadSql.vqnode(jobs));
    await p.query(`ANALYZE vq.job`);
    await p.query('CHECKPOINT');
    const offset = await clockOffset(p);
    let started = 0, first = 0, allStarted;
    const allStartedP = new Promise((r) => { allStarted = r; });
    const timeout = setTimeout(() => { log(`drain: only ${started} of ${jobs} jobs started within 300 s`); process.exit(1); }, 300000);
    const t0 = now();
    const w = await startWorker('vqnode', s, () => {
        if (started++ === 0) first = now();
        if (started === jobs) allStarted();
    });
    await allStartedP;
    while (!(await p.query(doneSql.vqnode)).rows[0].done) await sleep(5);
    clearTimeout(timeout);
    const stats = w.stats();
    await w.stop();
    const r = (await p.query(`SELECT count(*) FILTER (WHERE state = 'COMPLETED')::int AS n,
                                     extract(epoch FROM max(finished_at)) * 1000 AS last
                                FROM vq.job WHERE handler = '${EXT}'`)).rows[0];
    await p.end();
    if (r.n !== jobs || started !== jobs) {
        log(`drain: ${r.n} of ${jobs} jobs COMPLETED, ${started} handler calls`);
        process.exitCode = 1;
    }
    const last = Number(r.last) - offset;    // on our clock
    const secs = (last - t0) / 1000;
    out({
        jobs, setting, secs: fx(secs), rate: Math.round(jobs / secs), first_rate: Math.round(jobs / ((last - first) / 1000)),
        first_start_ms: fx(first - t0, 1), takes: stats.takes, reply_calls: stats.replyCalls, clock_offset_ms: fx(offset),
    });
}

async function drain(system, jobs, setting) {
    if (system === 'vqnode') return drainVqNode(jobs, setting);
    const s = parseSetting(setting);
    const p = pool(1);
    await p.query(loadSql[system](jobs));
    await p.query('CHECKPOINT');
    let started = 0, first = 0, last = 0;
    let allStarted;
    const allStartedP = new Promise((r) => { allStarted = r; });
    const w = await startWorker(system, s, () => {
        const t = now();
        if (started++ === 0) first = t;
        if (started === jobs) { last = t; allStarted(); }
    });
    const timeout = setTimeout(() => { log(`drain: only ${started} of ${jobs} jobs started within 300 s`); process.exit(1); }, 300000);
    await allStartedP;
    // The last completions may still be on their way (batched completion): poll until committed.
    while (!(await p.query(doneSql[system])).rows[0].done) await sleep(5);
    const end = now();
    clearTimeout(timeout);
    await w.stop();
    await p.end();
    const secs = (end - first) / 1000;
    out({ jobs, setting, secs: fx(secs), rate: Math.round(jobs / secs), all_started_ms: fx(last - first, 1) });
}

// Latency: an idle worker; JOBS jobs enqueued one at a time GAP_MS apart through the client API.
// call = before the enqueue call, ack = when it returned (committed); start = handler start.
async function latency(system, jobs, gap, pollMs) {
    const starts = new Map();
    let w = null, offset = 0, p = null;
    if (system === 'vq') {
        p = pool(1);
        // The handler stamps clock_timestamp(); measure the server clock against ours.
        offset = await clockOffset(p);
        await p.query('TRUNCATE compare.started');
    } else if (system === 'vqnode') {
        // clients/node's Worker, idle (LISTEN), in this process: the handler reads our clock.
        w = await startWorker(system, { c: 10 }, (j) => starts.set(String(j.id), now()));
    } else {
        // pg-boss fetches once per polling interval (it sleeps the rest of the interval even
        // after a full fetch), so its worker takes up to 100 jobs a fetch to keep up at all.
        const s = system === 'graphile' ? { c: 1, p: pollMs || 2000 } : { w: 1, b: 100, p: pollMs ? pollMs / 1000 : undefined };
        w = await startWorker(system, s, (j) => starts.set(j.id, now()));
    }
    // vq_job: the handler 'rec' stamps its start into compare.started (test/compare/vq_setup.sql).
    const e = await enqueuer(system, 1, system === 'vq' ? 'rec' : QUEUE);
    const sent = [];
    const warm = Math.min(20, jobs);
    for (let i = 0; i < jobs + warm; i++) {
        const call = now();
        const id = await e.add();
        const ack = now();
        if (i >= warm) sent.push({ id: String(id), call, ack });
        await sleep(gap);
    }
    const deadline = now() + 30000;
    if (system === 'vq') {
        for (;;) {
            const r = await p.query(`SELECT execution_id::text AS id, extract(epoch FROM started) * 1000 AS t FROM compare.started`);
            for (const row of r.rows) starts.set(row.id, Number(row.t) - offset);
            if (sent.every((x) => starts.has(x.id)) || now() > deadline) break;
            await sleep(100);
        }
        await p.end();
    } else {
        while (!sent.every((x) => starts.has(x.id)) && now() < deadline) await sleep(50);
        await w.stop();
    }
    await e.close();
    const ok = sent.filter((x) => starts.has(x.id));
    const fromAck = ok.map((x) => starts.get(x.id) - x.ack);
    const fromCall = ok.map((x) => starts.get(x.id) - x.call);
    out({
        jobs: sent.length, started: ok.length, gap_ms: gap, poll_ms: pollMs || 'default',
        ack_p50: fx(pct(fromAck, 0.5)), ack_p95: fx(pct(fromAck, 0.95)), ack_p99: fx(pct(fromAck, 0.99)),
        call_p50: fx(pct(fromCall, 0.5)), call_p95: fx(pct(fromCall, 0.95)), call_p99: fx(pct(fromCall, 0.99)),
        clock_offset_ms: fx(offset),
    });
    if (ok.length !== sent.length) process.exitCode = 1;
}

// Steady load: run the workers until SIGTERM, one line per job start.
// vqnode: the job's creation time is not among what a take returns: the worker keeps
// "execution_id start_ms" and, once stopped, reads created_at from vq.job (the server's clock,
// aligned with ours by clockOffset) and writes the same lines as the peers.
async function worker(system, setting, file) {
    const s = parseSetting(setting);
    const lines = [];
    let p = null, offset = 0;
    if (system === 'vqnode') {
        p = pool(1);
        offset = await clockOffset(p);
    }
    const record = system === 'vqnode' ? (j) => lines.push([j.id, now()])
        : (j) => lines.push(`${j.created.toFixed(3)} ${now().toFixed(3)}\n`);
    const w = await startWorker(system, s, record);
    const flush = () => { if (lines.length) fs.appendFileSync(file, lines.splice(0).join('')); };
    const timer = system === 'vqnode' ? null : setInterval(flush, 1000);
    fs.writeFileSync(file, '');
    out({ worker: system, setting, ready: 1 });
    await new Promise((r) => process.once('SIGTERM', r));
    if (timer) clearInterval(timer);
    await w.stop();
    if (system === 'vqnode') {
        const created = new Map();
        const r = await p.query({ text: `SELECT execution_id, extract(epoch FROM created_at) * 1000 AS c FROM vq.job WHERE handler = '${EXT}'`, rowMode: 'array' });
        for (const [id, c] of r.rows) created.set(id, Number(c) - offset);
        await p.end();
        const missing = lines.filter(([id]) => !created.has(id)).length;
        if (missing) log(`worker: ${missing} started jobs not found in vq.job`);
        fs.writeFileSync(file, lines.filter(([id]) => created.has(id))
            .map(([id, t]) => `${created.get(id).toFixed(3)} ${t.toFixed(3)}\n`).join(''));
        log(`worker: ${lines.length} jobs started; clock offset ${fx(offset)} ms; stats ${JSON.stringify(w.stats())}`);
    } else {
        flush();
    }
}

// Steady-load windows: FILE has "created_ms start_ms" per started job, BACKLOG "epoch_ms count"
// samples; one line per WINDOW_S window from T0_MS: "end_s started p50_ms p99_ms backlog".
function windows(file, backlogFile, t0, win, secs) {
    const jobs = fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' ').map(Number));
    const samples = fs.readFileSync(backlogFile, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' ').map(Number));
    for (let end = win; end <= secs + 1e-9; end += win) {
        const lo = t0 + (end - win) * 1000, hi = t0 + end * 1000;
        const lat = jobs.filter(([, s]) => s >= lo && s < hi).map(([c, s]) => s - c);
        const before = samples.filter(([t]) => t <= hi);
        const backlog = before.length ? before[before.length - 1][1] : '-';
        console.log([end, lat.length, fx(pct(lat, 0.5), 1), fx(pct(lat, 0.99), 1), backlog].join(' '));
    }
}

async function main() {
    const [cmd, system, ...a] = process.argv.slice(2);
    if (cmd === 'windows') return windows(system, a[0], +a[1], +a[2], +a[3]);
    if (!['vq', 'graphile', 'pgboss', 'vqnode'].includes(system)) throw new Error(`unknown system '${system}'`);
    switch (cmd) {
        case 'setup': return setup(system);
        case 'enqueue-sql': return console.log(`${enqueueSql[system]};`);
        case 'load-sql': return console.log(`${loadSql[system](+a[0]).replace(/\s+/g, ' ')};`);
        case 'enqueue': return enqueue(system, +a[0], +a[1]);
        case 'batch': return batch(system, +a[0], +a[1]);
        case 'load': return load(system, +a[0]);
        case 'drain': return drain(system, +a[0], a[1]);
        case 'latency': return latency(system, +a[0], +a[1], +a[2] || 0);
        case 'worker': return worker(system, a[0], a[1]);
        default: throw new Error(`unknown command '${cmd}'`);
    }
}

main().then(() => process.exit(process.exitCode || 0), (err) => { log(err.stack || err); process.exit(1); });

'use strict';
// Four worker processes drain 2,000 jobs; one is killed (SIGKILL) mid-drain. Every job completes;
// a job whose handler ran twice (a duplicate) ran first in the killed worker, at an attempt the
// server then abandoned (its lease expired) and that is recorded: no two runs of one attempt.
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const fs = require('node:fs');
const os = require('node:os');
const { spawn } = require('node:child_process');
const { enqueueMany } = require('..');
const h = require('./helpers');

test.after(() => h.end());

const JOBS = 2000;
const WORKERS = 4;

test(`${WORKERS} competing worker processes, one killed mid-drain: every job completes, duplicates accounted for`, async (t) => {
  const { handler } = await h.externalHandler('compete', { backoffMs: 100, maxAttempts: 5 });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'vq-node-'));
  const children = [];
  try {
    for (let i = 0; i < WORKERS; i++) {
      const out = path.join(dir, `runs-${i}.txt`);
      fs.writeFileSync(out, '');
      const child = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'worker.js'), handler, out,
        JSON.stringify({ concurrency: 20, lease: 2000, sleepMs: 20 })], { stdio: ['ignore', 'pipe', 'inherit'] });
      const c = { child, out, stdout: '', exited: null };
      child.stdout.on('data', (d) => { c.stdout += d; });
      c.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
      children.push(c);
    }
    await h.waitFor(() => children.every((c) => c.stdout.includes('ready')), 'the workers to start');
    const runs = () => children.map((c) => fs.readFileSync(c.out, 'utf8').split('\n').filter(Boolean));

    const ids = await enqueueMany(h.admin, handler, Array.from({ length: JOBS }, (_, i) => ({ i })));
    // kill one mid-drain, once it ran some jobs and a fifth of the jobs ran
    const victim = children[0];
    await h.waitFor(() => { const r = runs(); return r[0].length >= 20 && r.flat().length >= JOBS / 5; }, 'a fifth of the drain',
      { every: 5 });
    victim.child.kill('SIGKILL');
    const atKill = runs().flat().length;
    assert.ok(atKill < JOBS, `killed mid-drain (${atKill} runs of ${JOBS} jobs done)`);
    const killed = await victim.exited;
    assert.equal(killed.signal, 'SIGKILL');

    await h.waitFor(async () => (await h.one(
      "SELECT count(*)::int FROM vq.job WHERE handler = $1 AND state = 'COMPLETED'", [handler])) === JOBS,
    `the ${JOBS} jobs COMPLETED`, { timeout: 60000, every: 100 });

    for (const c of children.slice(1)) c.child.kill('SIGTERM');
    for (const c of children.slice(1)) assert.deepEqual(await c.exited, { code: 0, signal: null }, 'a clean stop on SIGTERM');

    // Every run: "id attempt pid". The killed worker's pid:
    const victimPid = String(victim.child.pid);
    const all = runs().flat().map((l) => l.split(' '));
    const byJob = new Map();
    for (const [id, attempt, pid] of all) {
      if (!byJob.has(id)) byJob.set(id, []);
      byJob.get(id).push({ attempt: Number(attempt), pid });
    }
    const rows = await h.q(`SELECT execution_id AS id, attempt_number AS attempt,
                                   (SELECT array_agg(attempt_number ORDER BY attempt_number) FROM vq.job_transition t
                                     WHERE t.execution_id = j.execution_id AND t.kind = 'ABANDONED') AS abandoned,
                                   (SELECT count(*)::int FROM vq.job_transition t
                                     WHERE t.execution_id = j.execution_id AND t.kind NOT IN ('CLAIMED', 'ABANDONED', 'COMPLETED')) AS other
                              FROM vq.job j WHERE handler = $1`, [handler]);
    assert.equal(rows.length, JOBS);
    let duplicates = 0;
    let abandonedJobs = 0;
    for (const r of rows) {
      const ran = byJob.get(r.id) || [];
      const abandoned = r.abandoned || [];
      if (abandoned.length > 0) abandonedJobs++;
      assert.equal(r.other, 0, `job ${r.id}: no failure or other transition`);
      // the run that completed it, at its last attempt (a retry: by a worker that lived)
      assert.ok(ran.some((x) => x.attempt === r.attempt && (r.attempt === 0 || x.pid !== victimPid)),
        `job ${r.id}: completed by a run at attempt ${r.attempt}: ${JSON.stringify(ran)}`);
      // one run per attempt at most
      assert.equal(new Set(ran.map((x) => x.attempt)).size, ran.length, `job ${r.id}: two runs of one attempt: ${JSON.stringify(ran)}`);
      // attempts before the last were abandoned (the killed worker's leases), and only those
      assert.deepEqual(abandoned, Array.from({ length: r.attempt }, (_, i) => i), `job ${r.id}: abandoned attempts`);
      for (const x of ran) {
        if (x.attempt < r.attempt) assert.equal(x.pid, victimPid, `job ${r.id}: an abandoned attempt ran in a worker that lived`);
      }
      if (ran.length > 1) duplicates++;
    }
    t.diagnostic(`runs when killed: ${atKill}; jobs whose handler ran twice (duplicates): ${duplicates}; ` +
      `jobs with an attempt abandoned (the killed worker's leases): ${abandonedJobs}`);
    assert.ok(abandonedJobs >= duplicates);
    assert.ok(abandonedJobs >= 1, 'the killed worker held jobs');
    assert.equal(all.length, JOBS + duplicates, 'runs = jobs + duplicates');
  } finally {
    for (const c of children) c.child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

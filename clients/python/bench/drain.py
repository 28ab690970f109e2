#!/usr/bin/python3
"""drain.py: how fast a vq_job Python worker drains a backlog of no-op jobs.

    PYTHONPATH=clients/python /usr/bin/python3 clients/python/bench/drain.py [--async] [--jobs N]
        [--concurrency C] [--batch B]

Connects with the libpq variables; registers the external handler bench_noop (queue bench_py,
room for 10,000 jobs in flight), enqueues N jobs (default 50,000), then times a worker from
start to the moment every job is COMPLETED. Prints one JSON line.
"""
import argparse
import asyncio
import json
import os
import sys
import threading
import time

import psycopg

import vq_job

HANDLER = "bench_noop"
QUEUE = "bench_py"


def setup(conn, n):
    conn.execute("""DO $$ BEGIN
        IF NOT EXISTS (SELECT FROM vq.queue WHERE name = 'bench_py') THEN
            PERFORM vq_create_queue('bench_py', max_concurrent_jobs => 10000);
        END IF;
        IF NOT EXISTS (SELECT FROM vq.handler WHERE name = 'bench_noop') THEN
            PERFORM vq_register_notify_handler('bench_noop', 'bench_noop', 'bench_py');
        END IF; END $$""")
    left = conn.execute("SELECT count(*) FROM vq.job_active WHERE handler = %s", [HANDLER]).fetchone()[0]
    if left:
        sys.exit(f"drain.py: {left} jobs of {HANDLER} are still active; use a fresh database")
    step = int(os.environ.get("VQ_ENQ_STEP", "10000"))
    for i in range(0, n, step):
        conn.execute("SELECT vq_enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[%s]))", [HANDLER, min(step, n - i)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--async", dest="use_async", action="store_true")
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--concurrency", type=int, default=100)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--reply-batch", type=int, default=vq_job._protocol.REPLY_CHUNK)
    a = ap.parse_args()
    with psycopg.connect("", autocommit=True) as conn:
        setup(conn, a.jobs)
        count = [0]
        done = threading.Event()
        opts = dict(concurrency=a.concurrency, batch_size=a.batch, reply_batch_size=a.reply_batch)
        if os.environ.get("VQ_LEASE"): opts["lease"] = float(os.environ["VQ_LEASE"])
        if os.environ.get("VQ_NOLISTEN"): opts["listen"] = False
        if a.use_async:
            async def noop(payload, job):
                count[0] += 1
            worker = vq_job.AsyncWorker("", handlers={HANDLER: noop}, **opts)

            async def go():
                task = asyncio.create_task(worker.run())
                while worker.stats["completed"] < a.jobs:
                    await asyncio.sleep(0.005)
                t = time.perf_counter()
                await worker.stop()
                await task
                return t
            t0 = time.perf_counter()
            t1 = asyncio.run(go())
        else:
            def noop(payload, job):
                count[0] += 1
            worker = vq_job.Worker("", handlers={HANDLER: noop}, **opts)
            th = threading.Thread(target=worker.run)
            t0 = time.perf_counter()
            th.start()
            trace = []
            while worker.stats["completed"] < a.jobs:
                time.sleep(0.005)
                if os.environ.get("VQ_TRACE"):
                    trace.append((round(time.perf_counter() - t0, 2), worker.stats["taken"], worker.stats["completed"]))
            if trace:
                print(trace[::20], file=sys.stderr)
            t1 = time.perf_counter()
            worker.stop(wait=True)
            th.join()
        left = conn.execute("SELECT count(*) FROM vq.job_active WHERE handler = %s", [HANDLER]).fetchone()[0]
    print(json.dumps({"worker": "AsyncWorker" if a.use_async else "Worker", "jobs": a.jobs,
                      "concurrency": a.concurrency, "batch": worker.batch_size, "seconds": round(t1 - t0, 3),
                      "jobs_per_s": round(a.jobs / (t1 - t0)), "handler_calls": count[0], "active_left": left,
                      "stats": worker.stats}))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""drain.py: how fast a vq_job Python worker drains a backlog of no-op jobs.

    PYTHONPATH=clients/python /usr/bin/python3 clients/python/bench/drain.py [--async] [--jobs N]
        [--concurrency C] [--batch B] [--prefetch P]

Connects with the libpq variables, to a database with the extension where nothing else runs.
Registers the external handler bench_py_noop on a queue of its own (room for 10,000 jobs in
flight), enqueues N no-op jobs (default 50,000) and commits, then times one Worker (or
AsyncWorker) from run() until every job is COMPLETED. Prints one JSON line: jobs/s, seconds,
the worker's stats and the CPU seconds of this process.
"""
import argparse
import asyncio
import json
import os
import sys
import threading
import time

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import vq_job  # noqa: E402

HANDLER = "bench_py_noop"
QUEUE = "bench_py"


def setup(conn: psycopg.Connection, n: int) -> None:
    conn.execute("""DO $$ BEGIN
        IF NOT EXISTS (SELECT FROM vq.queue WHERE name = 'bench_py') THEN
            PERFORM vq_create_queue('bench_py', max_concurrent_jobs => 10000);
        END IF;
        IF NOT EXISTS (SELECT FROM vq.handler WHERE name = 'bench_py_noop') THEN
            PERFORM vq_register_notify_handler('bench_py_noop', 'bench_py_noop', 'bench_py');
        END IF; END $$""")
    left = conn.execute("SELECT count(*) FROM vq.job_active WHERE handler = %s", [HANDLER]).fetchone()[0]
    if left:
        sys.exit(f"drain.py: {left} jobs of {HANDLER} are still active")
    with conn.transaction():
        for i in range(0, n, 10000):
            conn.execute("SELECT vq_enqueue_many(%s, array_fill('{}'::jsonb, ARRAY[%s]))", [HANDLER, min(10000, n - i)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--async", dest="use_async", action="store_true", help="AsyncWorker (default: Worker)")
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--concurrency", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--prefetch", type=int, default=0)
    a = ap.parse_args()
    opts = dict(concurrency=a.concurrency, batch_size=a.batch, prefetch=a.prefetch)
    with psycopg.connect("", autocommit=True) as conn:
        setup(conn, a.jobs)
    calls = [0]
    if a.use_async:
        async def noop_async(payload: object, job: vq_job.Job) -> None:
            calls[0] += 1

        worker = vq_job.AsyncWorker("", handlers={HANDLER: noop_async}, **opts)

        async def go() -> float:
            task = asyncio.create_task(worker.run())
            while worker.stats["completed"] < a.jobs and not task.done():
                await asyncio.sleep(0.005)
            t = time.perf_counter()
            await worker.stop()
            await task
            return t
        cpu0, t0 = time.process_time(), time.perf_counter()
        t1 = asyncio.run(go())
    else:
        def noop(payload: object, job: vq_job.Job) -> None:
            calls[0] += 1

        worker = vq_job.Worker("", handlers={HANDLER: noop}, **opts)   # type: ignore[assignment]
        runner = threading.Thread(target=worker.run)
        cpu0, t0 = time.process_time(), time.perf_counter()
        runner.start()
        while worker.stats["completed"] < a.jobs and runner.is_alive():
            time.sleep(0.005)
        t1 = time.perf_counter()
        worker.stop(wait=True)
        runner.join()
    cpu = time.process_time() - cpu0
    with psycopg.connect("", autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM vq.job_active WHERE handler = %s", [HANDLER]).fetchone()[0]
    stats = worker.stats
    print(json.dumps({"worker": type(worker).__name__, "jobs": a.jobs, "concurrency": a.concurrency,
                      "batch": worker.batch_size, "seconds": round(t1 - t0, 3),
                      "jobs_per_s": round(a.jobs / (t1 - t0)), "python_cpu_s": round(cpu, 2),
                      "handler_calls": calls[0], "left_active": left, "stats": stats}))
    if stats["completed"] != a.jobs or calls[0] != a.jobs or left:
        sys.exit("drain.py: not every job was completed once")


if __name__ == "__main__":
    main()

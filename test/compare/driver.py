#!/usr/bin/python3
"""test/compare/driver.py: the Python side of scripts/compare, vq_job's external handler 'ext'
(test/compare/vq_setup.sql) run by clients/python's Worker (threads) or AsyncWorker (asyncio).

    /usr/bin/python3 driver.py drain JOBS SETTING

SETTING: "Worker:c=100" or "AsyncWorker:c=200,b=500" (the class; c = concurrency, b = batch_size;
unset = the library's default). JOBS no-op jobs are loaded (committed) first, then the worker
runs them; rate = JOBS / (the last finished_at - the moment the worker's run() is called), on the
server's clock (ours is aligned with it by the lowest-round-trip probe of 20, as driver.js does).
first_rate counts from the first handler start instead, as the peers are counted. Connects with
the PG* environment variables; prints one line "key=value ...". Uses the vq_job package of the
repository's clients/python (Debian's python3-psycopg 3.1).
"""
import asyncio
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))

import psycopg  # noqa: E402

import vq_job  # noqa: E402

EXT = "ext"
LOAD_SQL = "SELECT count(*) FROM unnest(vq_enqueue_many(%s, array_fill('{\"n\": 1}'::jsonb, ARRAY[%s])))"
DONE_SQL = "SELECT NOT EXISTS (SELECT 1 FROM vq.job_active WHERE handler = %s)"   # a job leaves it when it ends
RESULT_SQL = """SELECT count(*) FILTER (WHERE state = 'COMPLETED'), extract(epoch FROM max(finished_at)) * 1000
                  FROM vq.job WHERE handler = %s"""


def now_ms():
    return time.time_ns() / 1e6


def log(*a):
    print("[driver.py]", *a, file=sys.stderr, flush=True)


def clock_offset(conn):
    """The server's clock minus ours (ms), from the probe with the lowest round trip of 20."""
    best = None
    for _ in range(20):
        a = now_ms()
        t = float(conn.execute("SELECT extract(epoch FROM clock_timestamp()) * 1000").fetchone()[0])
        b = now_ms()
        if best is None or b - a < best[0]:
            best = (b - a, t - (a + b) / 2)
    return best[1]


def parse_setting(setting):
    kind, _, rest = setting.partition(":")
    if kind not in ("Worker", "AsyncWorker"):
        raise SystemExit(f"driver.py: unknown worker class {kind!r} in setting {setting!r}")
    opts = {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        name = {"c": "concurrency", "b": "batch_size"}.get(k)
        if name is None:
            raise SystemExit(f"driver.py: unknown key {k!r} in setting {setting!r}")
        opts[name] = int(v)
    return kind, opts


class Counter:
    """Handler starts: their number, the first one's time; an event once all have started."""

    def __init__(self, jobs):
        self.jobs = jobs
        self.lock = threading.Lock()
        self.started = 0
        self.first = 0.0
        self.all_started = threading.Event()

    def hit(self):
        with self.lock:
            self.started += 1
            if self.started == 1:
                self.first = now_ms()
            if self.started == self.jobs:
                self.all_started.set()


def drain_sync(jobs, opts, conn, counter):
    def noop(payload, job):
        counter.hit()

    worker = vq_job.Worker("", handlers={EXT: noop}, **opts)
    th = threading.Thread(target=worker.run, name="worker")
    t0 = now_ms()
    th.start()
    if not counter.all_started.wait(300):
        log(f"drain: only {counter.started} of {jobs} jobs started within 300 s")
        os._exit(1)
    while not conn.execute(DONE_SQL, [EXT]).fetchone()[0]:
        time.sleep(0.005)
    worker.stop(wait=True, timeout=60)
    th.join(60)
    return t0, worker


def drain_async(jobs, opts, counter):
    async def noop(payload, job):
        counter.hit()

    async def go():
        worker = vq_job.AsyncWorker("", handlers={EXT: noop}, **opts)
        async with await psycopg.AsyncConnection.connect("", autocommit=True) as poll:
            t0 = now_ms()
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + 300
            while counter.started < jobs:
                if task.done():
                    task.result()    # raises what stopped it
                    raise RuntimeError("the worker stopped before running every job")
                if time.monotonic() > deadline:
                    log(f"drain: only {counter.started} of {jobs} jobs started within 300 s")
                    os._exit(1)
                await asyncio.sleep(0.005)
            while not (await (await poll.execute(DONE_SQL, [EXT])).fetchone())[0]:
                await asyncio.sleep(0.005)
            await worker.stop()
            await asyncio.wait_for(task, 60)
            return t0, worker

    return asyncio.run(go())


def drain(jobs, setting):
    kind, opts = parse_setting(setting)
    with psycopg.connect("", autocommit=True) as conn:
        conn.execute(LOAD_SQL, [EXT, jobs])
        conn.execute("ANALYZE vq.job")
        conn.execute("CHECKPOINT")
        offset = clock_offset(conn)
        counter = Counter(jobs)
        if kind == "Worker":
            t0, worker = drain_sync(jobs, opts, conn, counter)
        else:
            t0, worker = drain_async(jobs, opts, counter)
        done, last = conn.execute(RESULT_SQL, [EXT]).fetchone()
    last = float(last) - offset      # on our clock
    secs = (last - t0) / 1000
    stats = getattr(worker, "stats", {}) or {}
    print(" ".join(f"{k}={v}" for k, v in [
        ("jobs", jobs), ("setting", setting), ("secs", f"{secs:.3f}"), ("rate", round(jobs / secs)),
        ("first_rate", round(jobs / ((last - counter.first) / 1000))),
        ("first_start_ms", f"{counter.first - t0:.1f}"),
        ("takes", stats.get("takes", "-")), ("clock_offset_ms", f"{offset:.3f}")]))
    if done != jobs or counter.started != jobs:
        log(f"drain: {done} of {jobs} jobs COMPLETED, {counter.started} handler calls")
        return 1
    return 0


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "drain":
        raise SystemExit("usage: driver.py drain JOBS SETTING")
    return drain(int(sys.argv[2]), sys.argv[3])


if __name__ == "__main__":
    sys.exit(main())

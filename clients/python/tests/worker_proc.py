"""A worker process for the tests (test_processes.py):

    worker_proc.py sync|async HANDLER TABLE [--concurrency N] [--lease S] [--sleep S]

Runs a Worker or AsyncWorker for HANDLER; its handler inserts (execution_id, attempt, pid) into
TABLE (committed before the handler returns, so before the worker replies), then sleeps
--sleep seconds. Stops gracefully on SIGTERM (stop_on_signals). Prints "ready" once the worker
takes jobs, and "stopped <stats as JSON>" when run() has returned. Connects with the libpq
variables.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time

import psycopg
from psycopg import sql

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from vq_job import AsyncWorker, Worker  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["sync", "async"])
    ap.add_argument("handler")
    ap.add_argument("table")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--lease", type=float, default=60)
    ap.add_argument("--sleep", type=float, default=0)
    a = ap.parse_args()
    insert = sql.SQL("INSERT INTO {} (execution_id, attempt, pid) VALUES (%s, %s, %s)").format(
        sql.Identifier(*a.table.split(".")))
    pid = os.getpid()

    def announce(worker: object) -> None:
        ev = worker.ready   # type: ignore[attr-defined]
        while not ev.is_set():
            time.sleep(0.01)
        print("ready", flush=True)

    if a.mode == "sync":
        local = threading.local()

        def handle(payload: object, job: object) -> None:
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = psycopg.connect("", autocommit=True)
            conn.execute(insert, [job.id, job.attempt, pid])   # type: ignore[attr-defined]
            if a.sleep:
                time.sleep(a.sleep)

        worker = Worker("", handlers={a.handler: handle}, concurrency=a.concurrency, lease=a.lease)
        worker.stop_on_signals()
        threading.Thread(target=announce, args=(worker,), daemon=True).start()
        worker.run()
    else:
        async def go() -> AsyncWorker:
            conn = await psycopg.AsyncConnection.connect("", autocommit=True)
            lock = asyncio.Lock()

            async def handle(payload: object, job: object) -> None:
                async with lock:
                    await conn.execute(insert, [job.id, job.attempt, pid])   # type: ignore[attr-defined]
                if a.sleep:
                    await asyncio.sleep(a.sleep)

            w = AsyncWorker("", handlers={a.handler: handle}, concurrency=a.concurrency, lease=a.lease)
            w.stop_on_signals()

            async def announce_async() -> None:
                await w.ready.wait()
                print("ready", flush=True)
            t = asyncio.create_task(announce_async())
            await w.run()
            t.cancel()
            await conn.close()
            return w
        worker = asyncio.run(go())   # type: ignore[assignment]
    print("stopped " + json.dumps(worker.stats), flush=True)


if __name__ == "__main__":
    main()

"""Helpers for the vq_job client tests: they run against the server the libpq variables name
(PGHOST, PGPORT, PGUSER, PGDATABASE), as a superuser, in a database that has the extension
(test/scenarios/client_python.sh provides one)."""
from __future__ import annotations

import asyncio
import itertools
import os
import select
import threading
import time
import unittest
from typing import Any, Callable, Dict, List, Optional, Tuple

import psycopg

from vq_job import AsyncWorker, Worker

_names = itertools.count()


def unique(prefix: str) -> str:
    """A name no other test (or test process) uses."""
    return f"{prefix}_{os.getpid()}_{next(_names)}"


def connect(conninfo: str = "", **kw: Any) -> psycopg.Connection:
    return psycopg.connect(conninfo, autocommit=True, **kw)


class DB:
    """A superuser connection for set-up and checks."""

    def __init__(self) -> None:
        self.conn = connect()

    def close(self) -> None:
        self.conn.close()

    def all(self, query: str, params: Any = None) -> List[tuple]:
        return self.conn.execute(query, params).fetchall()

    def one(self, query: str, params: Any = None) -> Any:
        row = self.conn.execute(query, params).fetchone()
        return None if row is None else row[0] if len(row) == 1 else row

    def handler(self, max_attempts: int = 3, backoff_ms: int = 200, capacity: int = 1000) -> str:
        """A new external handler (channel: its name) on a queue with a FIXED backoff of
        backoff_ms and room for capacity jobs in flight."""
        name = unique("pyt")
        self.conn.execute("SELECT vq_register_notify_handler(%s, %s, %s, max_attempts => %s)",
                          [name, name, queue(backoff_ms, capacity), max_attempts])
        return name

    def state(self, execution_id: str) -> Tuple[str, int, Optional[str]]:
        return self.conn.execute("SELECT state::text, attempt_number, last_error FROM vq.job WHERE execution_id = %s",
                                 [execution_id]).fetchone()

    def transitions(self, execution_id: str) -> List[str]:
        """kind:attempt of the job's transitions, in order."""
        return [f"{k}:{a}" for k, a in self.conn.execute(
            "SELECT kind, attempt_number FROM vq.job_transition WHERE execution_id = %s ORDER BY id",
            [execution_id]).fetchall()]

    def queue_of(self, handler: str) -> str:
        return self.one("SELECT queue FROM vq.handler_settings WHERE name = %s", [handler])

    def states(self, handler: str) -> Dict[str, int]:
        return dict(self.conn.execute("SELECT state::text, count(*) FROM vq.job WHERE handler = %s GROUP BY 1",
                                      [handler]).fetchall())


_queues: Dict[Tuple[int, int], str] = {}


def queue(backoff_ms: int, capacity: int) -> str:
    """A queue with these settings, shared by the tests of this process. The first time, it is
    warmed up: until the executors have seen a new queue, workers that LISTEN for its jobs are
    not told when they become due (see README.md, "Server notes"), and the tests check the
    wake-ups."""
    key = (backoff_ms, capacity)
    if key in _queues:
        return _queues[key]
    name = unique("pyq")
    probe = f"{name}_probe"
    with connect() as conn, connect() as listen:
        conn.execute("SELECT vq_create_queue(%s, max_concurrent_jobs => %s, backoff_strategy => 'FIXED',"
                     " backoff_base_delay_ms => %s, sleep_delay_ms => 200)", [name, capacity, backoff_ms])
        conn.execute("SELECT vq_register_notify_handler(%s, %s, %s)", [probe, probe, name])
        listen.execute(f'LISTEN "{probe}"')
        deadline = time.monotonic() + 20
        while True:
            rows = conn.execute("SELECT execution_id, attempt FROM vq_take_jobs(%s, 100)", [[probe]]).fetchall()
            if rows:
                conn.execute("SELECT count(*) FROM vq_reply_jobs(%s, %s)", [[r[0] for r in rows], [r[1] for r in rows]])
                continue
            conn.execute("SELECT vq_enqueue(%s, '{}')", [probe])
            end = time.monotonic() + 0.3
            told = False
            while not told and time.monotonic() < end:
                if select.select([listen.fileno()], [], [], max(0.0, end - time.monotonic()))[0]:
                    listen.pgconn.consume_input()
                    while listen.pgconn.notifies() is not None:
                        told = True
            if told:
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"queue {name}: no wake-up notification within 20 s")
        for _ in range(2):
            rows = conn.execute("SELECT execution_id, attempt FROM vq_take_jobs(%s, 100)", [[probe]]).fetchall()
            if rows:
                conn.execute("SELECT count(*) FROM vq_reply_jobs(%s, %s)", [[r[0] for r in rows], [r[1] for r in rows]])
    _queues[key] = name
    return name


def wait_until(check: Callable[[], Any], timeout: float, what: str, poll: float = 0.02) -> Any:
    """Poll check() until it returns something true; fail after timeout naming what (and the
    last value seen)."""
    deadline = time.monotonic() + timeout
    value: Any = None
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {value!r})")
        time.sleep(poll)


class Runner:
    """A Worker or AsyncWorker running in a thread of its own (for the async one, with an event
    loop of its own), so that the tests themselves stay synchronous."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.error: Optional[BaseException] = None
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            if isinstance(self.worker, AsyncWorker):
                self.loop = asyncio.new_event_loop()
                try:
                    self.loop.run_until_complete(self.worker.run())
                finally:
                    self.loop.close()
            else:
                self.worker.run()
        except BaseException as err:   # noqa: B902 - reported by stop()
            self.error = err

    def wait_ready(self, timeout: float = 10) -> None:
        ev = self.worker.ready
        wait_until(lambda: ev.is_set() or not self.thread.is_alive(), timeout, "the worker to be ready")
        if self.error:
            raise self.error

    def request_stop(self) -> None:
        if isinstance(self.worker, AsyncWorker):
            wait_until(lambda: self.loop is not None, 5, "the event loop")
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self.worker.stop)
        else:
            self.worker.stop()

    def stop(self, timeout: float = 30) -> None:
        """Stop gracefully; fail unless run() returns within timeout (re-raise what it raised)."""
        self.request_stop()
        self.join(timeout)

    def join(self, timeout: float = 30) -> None:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the worker did not stop within {timeout}s")
        if self.error:
            raise self.error


class Flavor:
    """The worker class a test class runs, and handlers adapted to it: tests write handlers as
    plain functions; for AsyncWorker they become ``async def`` (``blocking`` ones run in a
    thread, so that they do not stop the event loop)."""

    worker_class: Any = Worker

    def handler(self, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        return fn

    def blocking(self, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        return fn


class SyncFlavor(Flavor):
    worker_class = Worker
    name = "Worker"


class AsyncFlavor(Flavor):
    worker_class = AsyncWorker
    name = "AsyncWorker"

    def handler(self, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        async def handle(payload: Any, job: Any) -> Any:
            return fn(payload, job)
        return handle

    def blocking(self, fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
        async def handle(payload: Any, job: Any) -> Any:
            return await asyncio.to_thread(fn, payload, job)
        return handle


class WorkerTestCase(unittest.TestCase):
    """Base of the tests that run against both workers (subclasses set flavor)."""

    flavor: Flavor = SyncFlavor()

    def setUp(self) -> None:
        self.db = DB()
        self.runners: List[Runner] = []

    def tearDown(self) -> None:
        for r in self.runners:
            if r.thread.is_alive():
                try:
                    r.stop(10)
                except BaseException:   # noqa: B902 - already failing
                    pass
        self.db.close()

    def start(self, handlers: Dict[str, Callable[..., Any]], conninfo: str = "", ready: bool = True,
              **options: Any) -> Runner:
        options.setdefault("poll_interval", 30)     # wake-ups come from LISTEN, not from polling
        worker = self.flavor.worker_class(conninfo, handlers=handlers, **options)
        runner = Runner(worker)
        self.runners.append(runner)
        if ready:
            runner.wait_ready()
        return runner

"""AsyncWorker: runs external handlers' jobs as asyncio tasks (``async def`` handlers)."""
from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from collections import deque
from typing import Any, Awaitable, Callable, Deque, Dict, Iterable, List, Mapping, Optional

import psycopg
from psycopg import sql

from . import _protocol as P
from ._core import WorkerCore, logger
from .job import Job

AsyncHandler = Callable[[Any, Job], Awaitable[Any]]

RECONNECT_MIN = 0.5
RECONNECT_MAX = 10.0
REFILL_WAIT = 0.005


class AsyncWorker(WorkerCore):
    """Takes the jobs of ``handlers`` (registered external handlers) and runs each in an asyncio
    task, at most ``concurrency`` at once::

        worker = AsyncWorker("dbname=app", handlers={"send-email": send_email}, concurrency=10)
        worker.stop_on_signals()     # optional: SIGTERM / SIGINT stop it gracefully
        await worker.run()           # returns after stop()

    A handler is ``async def handler(payload, job)``: returning completes the job; raising fails
    the attempt with the exception's message (its traceback goes to the job's log as an ERROR
    line); raising :class:`vq_job.Retry` has it due again at a time of your choice. Same options
    as :class:`vq_job.Worker`.
    """

    def __init__(self, conninfo: str = "", handlers: Optional[Mapping[str, AsyncHandler]] = None,
                 concurrency: int = 10, **options: Any) -> None:
        super().__init__(conninfo, handlers, concurrency, **options)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[int] = None
        self._tasks: Dict[Job, "asyncio.Task[None]"] = {}
        self._waiting: Deque[Job] = deque()          # taken, waiting for a free handler (prefetch)
        self._take_conn: Optional[psycopg.AsyncConnection] = None
        self._reply_conn: Optional[psycopg.AsyncConnection] = None
        self._listen_conn: Optional[psycopg.AsyncConnection] = None
        self._listen_fd = -1
        self._channels: List[str] = []
        self._signals: List[int] = []
        self._wake_event: Optional[asyncio.Event] = None
        self._flush_event: Optional[asyncio.Event] = None
        self._done: Optional["asyncio.Future[None]"] = None
        self._flusher_exit = False
        #: set once the worker listens (when it does) and is about to take its first jobs
        self.ready = asyncio.Event()

    # ---- public ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Take and run jobs until :meth:`stop`; then give back the jobs taken and not started,
        wait for the running handlers (up to ``stop_timeout``; then their tasks are cancelled),
        reply for them, and return. Raises if the connections cannot be opened at start, a
        handler is not a registered external handler, or the server refuses the take."""
        if self._started:
            raise RuntimeError("an AsyncWorker runs once")
        self._started = True
        loop = self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._wake_event = asyncio.Event()
        self._flush_event = asyncio.Event()
        if self._done is None:
            self._done = loop.create_future()
        flusher = None
        try:
            for s in self._signals:
                loop.add_signal_handler(s, self._on_signal, s)
            self._take_conn = await self._open(self.conninfo)
            self._reply_conn = await self._open(self.conninfo)
            await self._start_listening()
            flusher = loop.create_task(self._flusher_main())
            logger.info("async worker started: handlers %s, concurrency %d%s", ", ".join(self.handlers),
                        self.concurrency, "" if self.listening else ", polling")
            self.ready.set()
            if not self._stopping:
                await self._take_loop()
        finally:
            self._stopping = True
            await self._finish_handlers()
            if flusher is not None:
                self._flusher_exit = True
                self._flush_event.set()
                try:
                    await flusher
                except Exception:
                    logger.exception("the reply task failed")
            self._stop_listening()
            for c in (self._take_conn, self._listen_conn, self._reply_conn):
                if c is not None:
                    await c.close()
            for s in self._signals:
                loop.remove_signal_handler(s)
            if not self._done.done():
                self._done.set_result(None)
            logger.info("async worker stopped: %s", self.stats)

    def stop(self) -> "asyncio.Future[None]":
        """Ask the worker to stop gracefully: take nothing more, give back the jobs not started
        (no attempt consumed), let running handlers finish (up to ``stop_timeout``), reply.
        Returns a future done once run() has returned: ``await worker.stop()`` waits,
        ``worker.stop()`` only asks. Call it from the event loop's thread (from another thread:
        ``loop.call_soon_threadsafe(worker.stop)``)."""
        self._stopping = True
        if self._wake_event is not None:
            self._wake_event.set()
        if self._done is None:
            self._done = asyncio.get_event_loop().create_future()
            if not self._started:
                self._done.set_result(None)
        return asyncio.shield(self._done)

    def stop_on_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> Callable[[], None]:
        """Stop gracefully on the first of these signals while run() runs (with
        ``loop.add_signal_handler``; removed when run() returns). A second signal while stopping
        exits the process at once with status 128 + its number. The function returned removes
        the handlers sooner."""
        self._signals = list(signals)
        if self._loop is not None:
            for s in self._signals:
                self._loop.add_signal_handler(s, self._on_signal, s)
        return self._remove_signals

    # ---- internals ---------------------------------------------------------------------------
    def _remove_signals(self) -> None:
        if self._loop is not None:
            for s in self._signals:
                self._loop.remove_signal_handler(s)
        self._signals = []

    def _on_signal(self, signum: int) -> None:
        if self._stopping:
            os._exit(128 + signum)
        logger.info("signal %d: stopping", signum)
        self.stop()

    def _new_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _set_event(self, ev: Any) -> None:
        if self._loop is not None and threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(ev.set)
        else:
            ev.set()

    def _wake_flusher(self) -> None:
        ev = self._flush_event
        if ev is not None and not ev.is_set():
            if threading.get_ident() != self._thread and self._loop is not None:
                self._loop.call_soon_threadsafe(ev.set)   # (job.log from a thread of the handler's)
            else:
                ev.set()

    async def _open(self, conninfo: str) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(conninfo, **self._connect_kwargs(conninfo))

    async def _start_listening(self) -> None:
        """Find out whether the take connection goes through a pooler; LISTEN on the handlers'
        channels on a connection of its own (before the first take)."""
        conn = self._take_conn
        assert conn is not None and self._loop is not None
        if not self._channels:
            cur = await conn.execute(P.CHANNELS_SQL, [self._handler_names])
            self._channels = self._check_handlers(await cur.fetchall())
        cur = await conn.execute("SELECT pg_backend_pid()")
        backend = await cur.fetchone()
        self._settle_listening(backend is None or backend[0] != conn.info.backend_pid)
        if not self.listening:
            return
        listen = self._listen_conn = await self._open(
            self.conninfo if self.listen_conninfo is None else self.listen_conninfo)
        for ch in self._channels:
            await listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ch)))
        self._listen_fd = listen.fileno()
        self._loop.add_reader(self._listen_fd, self._on_listen_readable)

    def _stop_listening(self) -> None:
        if self._listen_fd >= 0 and self._loop is not None:
            self._loop.remove_reader(self._listen_fd)
        self._listen_fd = -1

    def _on_listen_readable(self) -> None:
        conn = self._listen_conn
        if conn is None:
            return
        try:
            pgconn = conn.pgconn
            pgconn.consume_input()
            while True:
                n = pgconn.notifies()
                if n is None:
                    break
                self._on_notify(n.extra.decode("utf-8", "replace"))
        except psycopg.Error as err:
            self._stop_listening()
            if not self._stopping:
                logger.warning("listening connection lost (%s): reconnecting", str(err).strip())
                assert self._loop is not None
                self._loop.create_task(self._relisten())
            return
        if self._due and self._wake_event is not None:
            self._wake_event.set()

    async def _relisten(self) -> None:
        delay = RECONNECT_MIN
        while not self._stopping:
            if self._listen_conn is not None:
                await self._listen_conn.close()
                self._listen_conn = None
            try:
                await self._start_listening()
                self._due = True
                if self._wake_event is not None:
                    self._wake_event.set()
                return
            except psycopg.OperationalError as err:
                logger.warning("cannot LISTEN again (%s); again in %.1fs", str(err).strip(), delay)
                await self._sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, unless stop() comes first."""
        ev = self._wake_event
        assert ev is not None
        if self._stopping:
            return
        try:
            await asyncio.wait_for(ev.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _reconnect_take(self) -> None:
        delay = RECONNECT_MIN
        while not self._stopping:
            if self._take_conn is not None:
                await self._take_conn.close()
            try:
                self._take_conn = await self._open(self.conninfo)
                logger.info("reconnected")
                self._due = True
                return
            except psycopg.OperationalError as err:
                logger.warning("cannot reconnect (%s); again in %.1fs", str(err).strip(), delay)
                await self._sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

    async def _take(self, n: int) -> List[Job]:
        assert self._take_conn is not None
        cur = await self._take_conn.execute(P.TAKE_SQL, [self._handler_names, n, self.lease])
        row = await cur.fetchone()
        return self._new_jobs(row[0]) if row else []

    async def _take_loop(self) -> None:
        ev = self._wake_event
        assert ev is not None
        next_poll = 0.0
        backlog = False
        refill_by = 0.0
        while not self._stopping:
            now = time.monotonic()
            if now >= next_poll:
                self._due = True
            until: Optional[float] = next_poll
            if self._due:
                if backlog and not refill_by:
                    refill_by = now + REFILL_WAIT
                need = self._refill if backlog and now < refill_by else 1
                free = self.capacity - self._inflight
                enough = free >= need
                self._want_room = 0 if enough else need
                if not enough:
                    until = refill_by if need > 1 else None
                else:
                    refill_by = 0.0
                    asked = min(free, self.batch_size)
                    self._due = False
                    try:
                        jobs = await self._take(asked)
                    except psycopg.OperationalError as err:
                        if self._stopping:
                            break
                        logger.warning("take failed (%s): reconnecting", str(err).strip())
                        await self._reconnect_take()
                        continue
                    self._inflight += len(jobs)
                    self._waiting.extend(jobs)
                    self._start_jobs()
                    backlog = len(jobs) == asked
                    if backlog:
                        self._due = True
                        await asyncio.sleep(0)     # (the handlers start)
                        continue
                    next_poll = time.monotonic() + self.poll_interval
                    if self._due:
                        continue
                    until = next_poll
            ev.clear()
            if self._stopping or (self._due and not self._want_room):
                continue
            try:
                if until is None:
                    await ev.wait()
                else:
                    await asyncio.wait_for(ev.wait(), max(0.0, until - time.monotonic()))
            except asyncio.TimeoutError:
                pass

    def _start_jobs(self) -> None:
        """Start the waiting jobs while fewer than concurrency handlers run."""
        assert self._loop is not None
        create_task = self._loop.create_task
        tasks = self._tasks
        waiting = self._waiting
        while waiting and len(tasks) < self.concurrency:
            job = waiting.popleft()
            if job.lost:
                continue
            tasks[job] = create_task(self._run_job(job))

    async def _run_job(self, job: Job) -> None:
        try:
            if self._stopping:
                self._release(job)
            else:
                job._started_at = time.monotonic()
                self._running.add(job)
                try:
                    result = self.handlers[job.handler](job.payload, job)
                    if inspect.isawaitable(result):
                        await result
                except BaseException as exc:   # noqa: B902 - any exception fails the attempt
                    self._failed(job, exc)
                else:
                    if job._done or job.lost:
                        self._discard(job)
                    else:
                        job._done = True
                        self._replies.append((job, P.COMPLETE, None, None))
                self._running.discard(job)
        finally:
            del self._tasks[job]
            if self._waiting:
                self._start_jobs()
            ev = self._flush_event
            if ev is not None and not ev.is_set():
                ev.set()

    async def _finish_handlers(self) -> None:
        """At stop: jobs not started are given back, running handlers get stop_timeout to finish
        (then they are failed and their tasks cancelled)."""
        while self._waiting:
            job = self._waiting.popleft()
            if not job.lost:
                self._release(job)
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks.values()), timeout=self.stop_timeout)
            if pending:
                self._give_up_running()
                for t in pending:
                    t.cancel()
                await asyncio.wait(pending, timeout=5)

    def _room(self, n: int) -> None:
        if n <= 0:
            return
        self._inflight -= n
        if self._want_room and self.capacity - self._inflight >= self._want_room:
            self._want_room = 0
            assert self._wake_event is not None
            self._wake_event.set()

    # ---- the flusher: replies, logs, progress, leases ----------------------------------------
    async def _flusher_main(self) -> None:
        ev = self._flush_event
        assert ev is not None
        next_check = time.monotonic() + self._extend_every
        while True:
            exiting = self._flusher_exit
            if not exiting and not self._pending():
                try:
                    await asyncio.wait_for(ev.wait(), max(0.0, next_check - time.monotonic()))
                except asyncio.TimeoutError:
                    pass
            ev.clear()
            try:
                await self._flush()
                now = time.monotonic()
                if now >= next_check and not exiting:
                    await self._extend_leases(now)
                    next_check = now + (min(self._extend_every, 1.0) if self.timeout else self._extend_every)
            except psycopg.OperationalError as err:
                if not await self._reconnect_reply(err, exiting):
                    self._drop_pending()
                    return
                continue
            except Exception:
                logger.exception("sending replies failed; the jobs concerned are retried when their leases expire")
                self._drop_pending()
            if exiting and not self._pending():
                return

    async def _flush(self) -> None:
        conn = self._reply_conn
        assert conn is not None
        if self._logs:
            for chunk in P.chunks(self._take_logs(), 1000):
                await conn.execute(P.LOG_SQL, P.log_params(chunk))
        if self._progress:
            for chunk in P.chunks(self._take_progress(), 1000):
                await conn.execute(P.PROGRESS_SQL, P.progress_params(chunk))
        while self._replies:
            batch = self._take_replies()
            stmt, params = P.reply_params(batch)
            try:
                cur = await conn.execute(stmt, params)
                ignored = await cur.fetchall()
            except BaseException:
                self._replies.extendleft(reversed(batch))
                raise
            self._room(self._replied(batch, ignored))

    async def _extend_leases(self, now: float) -> None:
        jobs = self._leases_to_extend(now)
        conn = self._reply_conn
        assert conn is not None
        for chunk in P.chunks(jobs, 1000):
            cur = await conn.execute(P.EXTEND_SQL, [P.plain_array(j.id for j in chunk),
                                                    P.plain_array(j.attempt for j in chunk), self.lease])
            self._extended(chunk, await cur.fetchall(), now)

    async def _reconnect_reply(self, err: Exception, exiting: bool) -> bool:
        delay = RECONNECT_MIN
        tries = 0
        logger.warning("reply connection failed (%s): reconnecting", str(err).strip())
        while True:
            if self._reply_conn is not None:
                await self._reply_conn.close()
            try:
                self._reply_conn = await self._open(self.conninfo)
                return True
            except psycopg.OperationalError as e:
                tries += 1
                if (exiting or self._flusher_exit) and tries >= 3:
                    logger.error("cannot reconnect to reply (%s): giving up", str(e).strip())
                    return False
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

"""AsyncWorker: runs external handlers' jobs as asyncio tasks (``async def`` handlers)."""
from __future__ import annotations

import asyncio
import inspect
import signal
import time
from typing import Any, Awaitable, Callable, Iterable, List, Mapping, Optional, Set

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
    """Takes the jobs of ``handlers`` (registered external handlers) and runs each as an asyncio
    task, at most ``concurrency`` at once::

        worker = AsyncWorker("dbname=app", handlers={"send-email": send_email}, concurrency=10)
        worker.stop_on_signals()     # optional: SIGTERM / SIGINT stop it gracefully
        await worker.run()           # returns after stop()

    A handler is ``async def handler(payload, job)``: returning completes the job; raising fails
    the attempt with the exception's message (its traceback goes to the job's log as an ERROR
    line); raising :class:`vq_job.Retry` retries it at a chosen time. Same options as
    :class:`vq_job.Worker`. Connections: one takes, one replies, and one LISTENs (on
    ``listen_conninfo`` when given; none with ``listen=False``).
    """

    def __init__(self, conninfo: str = "", handlers: Optional[Mapping[str, AsyncHandler]] = None,
                 concurrency: int = 10, **options: Any) -> None:
        super().__init__(conninfo, handlers, concurrency, **options)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._inflight = 0                       # taken, reply not yet applied
        self._want_room = False
        self._refill = max(1, min(self.batch_size, self.concurrency) // 2)
        self._tasks: Set["asyncio.Task[None]"] = set()
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

    # ---- public ------------------------------------------------------------------------------
    async def run(self) -> None:
        """Take and run jobs until :meth:`stop`; then wait for the running handlers, reply for
        them, give back the jobs taken but not started, and return. Raises if the connections
        cannot be opened at start or the server refuses the take."""
        if self._started:
            raise RuntimeError("an AsyncWorker runs once")
        self._started = True
        loop = self._loop = asyncio.get_running_loop()
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
            logger.info("async worker started: handlers %s, concurrency %d", ", ".join(self.handlers),
                        self.concurrency)
            await self._take_loop()
        finally:
            self._stopping = True
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
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
        """Ask the worker to stop gracefully: take nothing more, let running handlers finish,
        reply, give back the jobs not started (no attempt consumed). Returns a future done once
        run() has returned: ``await worker.stop()`` waits, ``worker.stop()`` only asks. Call it
        from the event loop's thread (from another thread:
        ``loop.call_soon_threadsafe(worker.stop)``)."""
        self._stopping = True
        if self._wake_event is not None:
            self._wake_event.set()
        if self._done is None:
            self._done = asyncio.get_event_loop().create_future()
        return asyncio.shield(self._done) if self._started else self._ready_future()

    def stop_on_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Stop gracefully on the first of these signals while run() runs (installed with
        ``loop.add_signal_handler``, removed when run() returns). A second signal during the
        graceful stop gets the default behaviour (SIGINT: KeyboardInterrupt)."""
        self._signals = list(signals)

    # ---- internals ---------------------------------------------------------------------------
    def _ready_future(self) -> "asyncio.Future[None]":
        fut: "asyncio.Future[None]" = asyncio.get_event_loop().create_future()
        fut.set_result(None)
        return fut

    def _on_signal(self, signum: int) -> None:
        logger.info("signal %d: stopping", signum)
        loop = self._loop
        assert loop is not None
        for s in self._signals:
            loop.remove_signal_handler(s)
        self._signals = []
        self.stop()

    def _new_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _wake_flusher(self) -> None:
        ev = self._flush_event
        if ev is not None and not ev.is_set():
            ev.set()

    async def _open(self, conninfo: str) -> psycopg.AsyncConnection:
        return await psycopg.AsyncConnection.connect(conninfo, **self._connect_kwargs(conninfo))

    async def _start_listening(self) -> None:
        """LISTEN on the handlers' channels, on a connection of its own (before the first take)."""
        if not self.listen:
            return
        assert self._take_conn is not None and self._loop is not None
        if not self._channels:
            cur = await self._take_conn.execute(P.CHANNELS_SQL, [self._handler_names])
            self._channels = sorted({ch for _, ch in await cur.fetchall() if ch})
        conn = self._listen_conn = await self._open(self.listen_conninfo or self.conninfo)
        for ch in self._channels:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ch)))
        self._listen_fd = conn.fileno()
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
        assert ev is not None and self._loop is not None
        create_task = self._loop.create_task
        tasks = self._tasks
        discard = tasks.discard
        run_job = self._run_job
        next_poll = 0.0
        backlog = False
        refill_by = 0.0
        while not self._stopping:
            now = time.monotonic()
            if now >= next_poll:
                self._due = True
            until = next_poll
            if self._due:
                free = self.concurrency - self._inflight
                enough = free >= self._refill or (free > 0 and (not backlog or now >= refill_by))
                self._want_room = not enough
                if not enough:
                    if not refill_by:
                        refill_by = now + REFILL_WAIT
                    until = refill_by if free > 0 else now + REFILL_WAIT
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
                    for job in jobs:
                        t = create_task(run_job(job))
                        tasks.add(t)
                        t.add_done_callback(discard)
                    backlog = len(jobs) == asked
                    if backlog:
                        self._due = True
                        await asyncio.sleep(0)     # let the handlers start
                        continue
                    next_poll = time.monotonic() + self.poll_interval
                    if self._due:
                        continue
                    until = next_poll
            ev.clear()
            if self._stopping or (self._due and not self._want_room):
                continue
            timeout = max(0.0, until - time.monotonic())
            try:
                await asyncio.wait_for(ev.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def _run_job(self, job: Job) -> None:
        if self._stopping:
            self._release(job)
        else:
            job._started_at = time.monotonic()
            try:
                result = self.handlers[job.handler](job.payload, job)
                if inspect.isawaitable(result):
                    await result
            except BaseException as exc:   # noqa: B902 - any exception fails the attempt
                self._failed(job, exc)
            else:
                self._replies.append((job, P.COMPLETE, None, None))
        ev = self._flush_event
        if ev is not None and not ev.is_set():
            ev.set()

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
                if now >= next_check:
                    await self._extend_leases(now)
                    next_check = now + (min(self._extend_every, 1.0) if self.job_timeout else self._extend_every)
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
            self._replied(batch, ignored)
            self._room(len(batch))

    def _room(self, n: int) -> None:
        self._inflight -= n
        if self._want_room and self.concurrency - self._inflight >= self._refill:
            self._want_room = False
            assert self._wake_event is not None
            self._wake_event.set()

    async def _extend_leases(self, now: float) -> None:
        jobs = self._leases_to_extend(now)
        conn = self._reply_conn
        assert conn is not None
        for chunk in P.chunks(jobs, 1000):
            cur = await conn.execute(P.EXTEND_SQL, [P.plain_array(j.id for j in chunk),
                                                    P.plain_array(j.attempt for j in chunk), self.lease])
            self._extended(chunk, await cur.fetchall(), now)

    def _drop_pending(self) -> None:
        dropped = len(self._replies)
        for job, *_ in self._replies:
            self._held.pop(job.id, None)
        self._room(dropped)
        self._replies.clear()
        self._logs.clear()
        self._progress.clear()
        if dropped:
            logger.error("%d replies could not be sent: those jobs are retried when their leases expire", dropped)

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

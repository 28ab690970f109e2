"""Worker: runs external handlers' jobs in threads (plain functions as handlers)."""
from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Iterable, List, Mapping, Optional

import psycopg
from psycopg import sql

from . import _protocol as P
from ._core import WorkerCore, logger
from .job import Job

Handler = Callable[[Any, Job], Any]

RECONNECT_MIN = 0.5
RECONNECT_MAX = 10.0
REFILL_WAIT = 0.005      # with a backlog, wait this long for room for a good batch
STALL = 0.002            # jobs wait and none started for this long: wake more handler threads
BLOCKING = 0.0001        # a handler that waits (does not run) this long is a waiting one
YIELD_EVERY = 0.0005     # a thread running handlers back to back lets others have the GIL this often


class Worker(WorkerCore):
    """Takes the jobs of ``handlers`` (registered external handlers) and runs them in threads::

        worker = Worker("dbname=app", handlers={"send-email": send_email}, concurrency=10)
        worker.stop_on_signals()     # optional: SIGTERM / SIGINT stop it gracefully
        worker.run()                 # returns after stop()

    A handler is ``def handler(payload, job)``: returning completes the job; raising fails the
    attempt with the exception's message (its traceback goes to the job's log as an ERROR line);
    raising :class:`vq_job.Retry` has it due again at a time of your choice. See README.md for
    the options.
    """

    def __init__(self, conninfo: str = "", handlers: Optional[Mapping[str, Handler]] = None,
                 concurrency: int = 10, **options: Any) -> None:
        super().__init__(conninfo, handlers, concurrency, **options)
        self._lock = threading.Lock()
        # The handler threads (up to concurrency, started as needed). Taken jobs wait in
        # _to_start; a woken thread runs them one after the other while there are any. Handlers
        # that compute (most jobs wait less than BLOCKING seconds: wall time less CPU time) run
        # back to back in one thread, without a thread switch per job: threads would only take
        # turns holding the GIL. For handlers that wait (I/O), a take wakes a thread per job.
        # And if jobs wait while every busy thread has been in its handler for STALL seconds,
        # the take loop wakes (or starts) a thread per waiting job.
        self._to_start: Deque[Job] = deque()
        self._cv = threading.Condition(self._lock)
        self._idle = 0                   # threads waiting for jobs
        self._busy = 0                   # threads running a handler
        self._threads_exit = False
        self._threads: List[threading.Thread] = []
        self._stall = STALL
        self._waiting = 0.0              # share of the jobs whose handler waited, moving average
        self._flush_event = threading.Event()
        self._flusher_exit = False
        self._done = threading.Event()
        self._wake_r = self._wake_w = -1
        self._take_conn: Optional[psycopg.Connection] = None
        self._listen_conn: Optional[psycopg.Connection] = None
        self._reply_conn: Optional[psycopg.Connection] = None
        self._channels: List[str] = []
        self._old_signals: dict = {}
        #: set once the worker listens (when it does) and is about to take its first jobs
        self.ready = threading.Event()

    # ---- public ------------------------------------------------------------------------------
    def run(self) -> None:
        """Take and run jobs until :meth:`stop`; then give back the jobs taken and not started,
        wait for the running handlers (up to ``stop_timeout``), reply for them, and return.
        Raises if the connections cannot be opened at start, a handler is not a registered
        external handler, or the server refuses the take."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        flusher = None
        try:
            self._take_conn = self._open(self.conninfo)
            self._reply_conn = self._open(self.conninfo)
            self._start_listening()
            flusher = threading.Thread(target=self._flusher_main, name="vq_job replies", daemon=True)
            flusher.start()
            logger.info("worker started: handlers %s, concurrency %d%s", ", ".join(self.handlers),
                        self.concurrency, "" if self.listening else ", polling")
            self.ready.set()
            self._take_loop()
        finally:
            self._stopping = True
            self._finish_handlers()
            if flusher is not None:
                self._flusher_exit = True
                self._flush_event.set()
                flusher.join()
            for c in (self._take_conn, self._listen_conn, self._reply_conn):
                if c is not None:
                    c.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1
            self._restore_signals()
            self._done.set()
            logger.info("worker stopped: %s", self.stats)

    def stop(self, wait: bool = False, timeout: Optional[float] = None) -> bool:
        """Ask the worker to stop gracefully: take nothing more, give back the jobs not started
        (no attempt consumed), let running handlers finish (up to ``stop_timeout``), reply. Returns
        at once unless ``wait`` (then once run() has returned, or after ``timeout``): whether run()
        has returned. Safe from signal handlers, handlers and other threads (do not wait from a
        handler)."""
        self._stopping = True
        self._wake()
        if wait:
            return self._done.wait(timeout)
        return self._done.is_set()

    def stop_on_signals(self, signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> Callable[[], None]:
        """Stop gracefully on the first of these signals (call from the main thread). A second
        signal while stopping exits the process at once with status 128 + its number. The
        previous handlers are back when run() returns; the function returned puts them back
        sooner."""
        def handle(signum: int, frame: Any) -> None:
            if self._stopping:
                os._exit(128 + signum)
            logger.info("signal %d: stopping", signum)
            self.stop()
        for s in signals:
            self._old_signals[s] = signal.signal(s, handle)
        return self._restore_signals

    # ---- internals ---------------------------------------------------------------------------
    def _restore_signals(self) -> None:
        old, self._old_signals = self._old_signals, {}
        for s, h in old.items():
            try:
                signal.signal(s, h)
            except (ValueError, TypeError):   # not the main thread
                pass

    def _new_event(self) -> threading.Event:
        return threading.Event()

    def _wake_flusher(self) -> None:
        if not self._flush_event.is_set():
            self._flush_event.set()

    def _wake(self) -> None:
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _open(self, conninfo: str) -> psycopg.Connection:
        return psycopg.connect(conninfo, **self._connect_kwargs(conninfo))

    def _notify_handler(self, n: psycopg.Notify) -> None:
        self._on_notify(n.payload)

    def _start_listening(self) -> None:
        """Find out whether the take connection goes through a pooler; LISTEN on the handlers'
        channels (before the first take), on it or on listen_conninfo."""
        conn = self._take_conn
        assert conn is not None
        if not self._channels:
            self._channels = self._check_handlers(conn.execute(P.CHANNELS_SQL, [self._handler_names]).fetchall())
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()
        self._settle_listening(backend is None or backend[0] != conn.info.backend_pid)
        if not self.listening:
            return
        if self.listen_conninfo is not None:
            conn = self._listen_conn = self._open(self.listen_conninfo)
        conn.add_notify_handler(self._notify_handler)
        for ch in self._channels:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ch)))

    def _reconnect_take(self) -> None:
        """After a connection failure: new take (and listen) connections, LISTEN again."""
        delay = RECONNECT_MIN
        while not self._stopping:
            for c in (self._take_conn, self._listen_conn):
                if c is not None:
                    c.close()
            self._take_conn = self._listen_conn = None
            try:
                self._take_conn = self._open(self.conninfo)
                self._start_listening()
                logger.info("reconnected")
                self._due = True
                return
            except psycopg.OperationalError as err:
                logger.warning("cannot reconnect (%s); again in %.1fs", str(err).strip(), delay)
                self._sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

    def _sleep(self, seconds: float) -> None:
        """Sleep, unless stop() comes first."""
        if not self._stopping:
            select.select([self._wake_r], [], [], seconds)
            self._drain_wake()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except OSError:
            pass

    def _take(self, n: int) -> List[Job]:
        assert self._take_conn is not None
        cur = self._take_conn.execute(P.TAKE_SQL, [self._handler_names, n, self.lease])
        row = cur.fetchone()
        return self._new_jobs(row[0]) if row else []

    def _take_loop(self) -> None:
        next_poll = 0.0
        backlog = False          # the last take was full: more jobs are due
        refill_by = 0.0          # with a backlog, take once there is room for _refill jobs, or by then
        while not self._stopping:
            now = time.monotonic()
            if now >= next_poll:
                self._due = True
            until: Optional[float] = next_poll
            if self._due:
                # with a backlog, wait a moment for room for a good batch rather than take a few
                if backlog and not refill_by:
                    refill_by = now + REFILL_WAIT
                need = self._refill if backlog and now < refill_by else 1
                with self._lock:
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
                        jobs = self._take(asked)
                    except psycopg.OperationalError as err:
                        if self._stopping:
                            break
                        logger.warning("take failed (%s): reconnecting", str(err).strip())
                        self._reconnect_take()
                        continue
                    if jobs:
                        self._dispatch(jobs)
                    backlog = len(jobs) == asked
                    if backlog:
                        self._due = True      # there may be more: take again once there is room
                        continue
                    next_poll = time.monotonic() + self.poll_interval
                    if self._due:             # a notification came during the take
                        continue
                    until = next_poll
            if self._to_start:
                stall_check = self._unstall()
                until = stall_check if until is None else min(until, stall_check)
            self._wait(until)

    def _dispatch(self, jobs: List[Job]) -> None:
        """Hand taken jobs to the handler threads."""
        with self._cv:
            self._inflight += len(jobs)
            self._to_start.extend(jobs)
            if self._waiting >= 0.5:
                self._wake_threads(len(self._to_start))
            elif self._busy == 0:
                self._wake_threads(1)

    def _wake_threads(self, n: int) -> None:
        """Wake n idle handler threads, starting new ones when too few are idle (self._cv held)."""
        n = min(n, self.concurrency - self._busy)
        if self._idle:
            self._cv.notify(min(n, self._idle))
            n -= self._idle
        while n > 0 and len(self._threads) < self.concurrency:
            t = threading.Thread(target=self._thread_main, name=f"vq_job handler {len(self._threads)}",
                                 daemon=True)
            t.start()
            self._threads.append(t)
            n -= 1

    def _unstall(self) -> float:
        """If jobs wait while every busy thread has been in its handler for STALL seconds (they
        are long handlers), wake a thread for each waiting job. Returns when to look again."""
        now = time.monotonic()
        running = list(self._running)
        if not running or len(running) < self._busy:
            return now + self._stall        # (a thread is between jobs, or just woken: it takes the next)
        since = max(j._started_at for j in running)
        if now - since < self._stall:
            return since + self._stall
        with self._cv:
            if self._to_start:
                self._wake_threads(len(self._to_start))
        return now + self._stall

    def _wait(self, until: Optional[float]) -> None:
        """Until a notification, room (when asked for), stop(), or the time until."""
        conn = None
        if self.listening:
            conn = self._listen_conn or self._take_conn
        fds = [self._wake_r]
        if conn is not None:
            fds.append(conn.fileno())
        timeout = None if until is None else max(0.0, until - time.monotonic())
        try:
            ready, _, _ = select.select(fds, [], [], timeout)
        except (OSError, ValueError):
            ready = []
        if self._wake_r in ready:
            self._drain_wake()
        if conn is not None and len(ready) > (self._wake_r in ready):
            try:
                pgconn = conn.pgconn
                pgconn.consume_input()
                while True:
                    n = pgconn.notifies()
                    if n is None:
                        break
                    self._on_notify(n.extra.decode("utf-8", "replace"))
            except psycopg.Error as err:
                if not self._stopping:
                    logger.warning("listening connection lost (%s): reconnecting", str(err).strip())
                    self._reconnect_take()

    def _room(self, n: int) -> None:
        """n held jobs were answered (or dropped): room for as many more."""
        if n <= 0:
            return
        with self._lock:
            self._inflight -= n
            want = self._want_room and self.capacity - self._inflight >= self._want_room
            if want:
                self._want_room = 0
        if want:
            self._wake()

    # ---- handler threads ---------------------------------------------------------------------
    def _thread_main(self) -> None:
        to_start = self._to_start
        handlers = self.handlers
        replies = self._replies
        running = self._running
        cv = self._cv
        flush_event = self._flush_event
        monotonic = time.monotonic
        thread_time = time.thread_time
        sleep = time.sleep
        last_yield = 0.0
        with cv:
            self._busy += 1
        while True:
            try:
                job = to_start.popleft()
            except IndexError:
                with cv:
                    self._busy -= 1
                    self._idle += 1
                    while not to_start and not self._threads_exit:
                        cv.wait()
                    self._idle -= 1
                    self._busy += 1
                    if not to_start:
                        self._busy -= 1
                        return
                continue
            if job.lost:
                continue
            if self._stopping:
                self._release(job)
            else:
                job._started_at = start = monotonic()
                cpu = thread_time()
                running.add(job)
                try:
                    handlers[job.handler](job.payload, job)
                except BaseException as exc:   # noqa: B902 - any exception fails the attempt
                    self._failed(job, exc)
                else:
                    if job._done or job.lost:
                        self._discard(job)
                    else:
                        job._done = True
                        replies.append((job, P.COMPLETE, None, None))
                running.discard(job)
                end = monotonic()
                self._waiting += ((end - start - (thread_time() - cpu) > BLOCKING) - self._waiting) * 0.05
                # (a thread that runs handlers back to back would keep the GIL for the switch
                # interval, 5 ms, each time the take or reply thread needs it: let them have it)
                if end - last_yield > YIELD_EVERY:
                    sleep(0)
                    last_yield = monotonic()
            if not flush_event.is_set():
                flush_event.set()

    def _finish_handlers(self) -> None:
        """At stop: jobs not started are given back, running handlers get stop_timeout to finish."""
        with self._cv:
            self._threads_exit = True
            self._cv.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + self.stop_timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        # (jobs never picked up: no thread was free)
        while True:
            try:
                job = self._to_start.popleft()
            except IndexError:
                break
            if not job.lost:
                self._release(job)
        if any(t.is_alive() for t in threads):
            self._give_up_running()

    # ---- the flusher: replies, logs, progress, leases ----------------------------------------
    def _flusher_main(self) -> None:
        next_check = time.monotonic() + self._extend_every
        while True:
            exiting = self._flusher_exit
            if not exiting and not self._pending():
                self._flush_event.wait(max(0.0, next_check - time.monotonic()))
            self._flush_event.clear()
            try:
                self._flush()
                now = time.monotonic()
                if now >= next_check and not exiting:
                    self._extend_leases(now)
                    next_check = now + (min(self._extend_every, 1.0) if self.timeout else self._extend_every)
            except psycopg.OperationalError as err:
                if not self._reconnect_reply(err, exiting):
                    self._drop_pending()
                    return
                continue
            except Exception:   # a bug or a refused call: say it, go on (the leases will expire)
                logger.exception("sending replies failed; the jobs concerned are retried when their leases expire")
                self._drop_pending()
            if exiting and not self._pending():
                return

    def _flush(self) -> None:
        conn = self._reply_conn
        assert conn is not None
        if self._logs:
            for chunk in P.chunks(self._take_logs(), 1000):
                conn.execute(P.LOG_SQL, P.log_params(chunk))
        if self._progress:
            for chunk in P.chunks(self._take_progress(), 1000):
                conn.execute(P.PROGRESS_SQL, P.progress_params(chunk))
        while self._replies:
            batch = self._take_replies()
            stmt, params = P.reply_params(batch)
            try:
                ignored = conn.execute(stmt, params).fetchall()
            except BaseException:
                self._replies.extendleft(reversed(batch))   # sent again after a reconnect
                raise
            self._room(self._replied(batch, ignored))

    def _extend_leases(self, now: float) -> None:
        jobs = self._leases_to_extend(now)
        conn = self._reply_conn
        assert conn is not None
        for chunk in P.chunks(jobs, 1000):
            rows = conn.execute(P.EXTEND_SQL, [P.plain_array(j.id for j in chunk),
                                               P.plain_array(j.attempt for j in chunk), self.lease]).fetchall()
            self._extended(chunk, rows, now)

    def _reconnect_reply(self, err: Exception, exiting: bool) -> bool:
        """A new reply connection after a failure; False to give up (when stopping, after a few tries)."""
        delay = RECONNECT_MIN
        tries = 0
        logger.warning("reply connection failed (%s): reconnecting", str(err).strip())
        while True:
            if self._reply_conn is not None:
                self._reply_conn.close()
            try:
                self._reply_conn = self._open(self.conninfo)
                return True
            except psycopg.OperationalError as e:
                tries += 1
                if (exiting or self._flusher_exit) and tries >= 3:
                    logger.error("cannot reconnect to reply (%s): giving up", str(e).strip())
                    return False
                time.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX)

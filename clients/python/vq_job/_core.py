"""What Worker and AsyncWorker share: options, the jobs a worker holds, and what it owes the
server (replies, log lines, progress, lease extensions). No I/O here."""
from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Set, Tuple

from psycopg.conninfo import conninfo_to_dict

from . import _protocol as P
from .job import Job, Retry

logger = logging.getLogger("vq_job")

DEFAULT_APPLICATION_NAME = "vq-job worker"
STOPPED_ERROR = "the worker stopped before the handler returned (stop_timeout)"

Stats = Dict[str, int]


class WorkerCore:
    """State and bookkeeping common to Worker and AsyncWorker."""

    def __init__(self, conninfo: str = "", handlers: Optional[Mapping[str, Callable[..., Any]]] = None,
                 concurrency: int = 10, *, prefetch: int = 0, batch_size: Optional[int] = None,
                 lease: float = 60.0, timeout: Optional[float] = None, stop_timeout: float = 30.0,
                 poll_interval: Optional[float] = None, listen: bool = True,
                 listen_conninfo: Optional[str] = None, application_name: Optional[str] = None,
                 reply_batch_size: int = P.REPLY_CHUNK) -> None:
        if not handlers:
            raise ValueError("handlers must map at least one handler name to a function")
        if len(handlers) > 64:
            raise ValueError("a worker serves at most 64 handlers")
        for name, fn in handlers.items():
            if not isinstance(name, str) or not callable(fn):
                raise TypeError("handlers must map handler names (str) to callables")
        if int(concurrency) < 1:
            raise ValueError("concurrency must be at least 1")
        if int(prefetch) < 0:
            raise ValueError("prefetch must not be negative")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be positive (or None: no timeout)")
        if stop_timeout < 0:
            raise ValueError("stop_timeout must not be negative")
        if poll_interval is not None and poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.conninfo = conninfo
        self.handlers: Dict[str, Callable[..., Any]] = dict(handlers)
        self.concurrency = int(concurrency)
        self.prefetch = int(prefetch)
        self.capacity = self.concurrency + self.prefetch          # jobs held at most
        self.batch_size = max(1, min(int(batch_size or min(self.capacity, 1000)), 10000))
        self.lease = P.lease_seconds(lease)
        self.timeout = timeout
        self.stop_timeout = float(stop_timeout)
        self._poll_interval_option = poll_interval
        self.poll_interval = poll_interval or 2.0
        self._listen_option = bool(listen) or listen_conninfo is not None
        self.listen_conninfo = listen_conninfo
        self.application_name = application_name
        self.reply_batch_size = max(1, min(int(reply_batch_size), 10000))
        #: a LISTEN is in place (known once run() has started)
        self.listening = False
        #: the main connection goes through a pooler (known once run() has started)
        self.pooled: Optional[bool] = None
        self._handler_names = P.text_array(self.handlers)
        self._extend_every = self.lease / 3.0

        self._held: Dict[str, Job] = {}              # taken, reply not yet applied
        self._running: Set[Job] = set()              # handlers running now
        self._replies: Deque[P.Reply] = deque()      # (job, outcome, error, retry_at)
        self._logs: Deque[Tuple[Job, str, str, Optional[dict]]] = deque()
        self._progress: Deque[Job] = deque()
        self._inflight = 0                           # held, counted against capacity
        self._want_room = 0                          # the take loop waits for this many free places
        self._refill = max(1, min(self.batch_size, self.capacity) // 2)
        self._stopping = False
        self._started = False
        self._due = True                             # a take is wanted (a "due" notification came)
        self._stats: Stats = dict(takes=0, taken=0, completed=0, failed=0, released=0, lost=0, ignored=0,
                                  reply_calls=0)

    @property
    def stats(self) -> Stats:
        """What the worker did: ``takes`` (calls), ``taken`` (jobs), ``completed``, ``failed``
        (failed and retried attempts, dead letters included), ``released`` (given back unstarted),
        ``lost`` (leases lost), ``ignored`` (replies the server did not apply), ``reply_calls``;
        and now: ``running`` (handlers) and ``held`` (jobs taken, reply not yet applied)."""
        s = dict(self._stats)
        s["running"] = len(self._running)
        s["held"] = len(self._held)
        return s

    # ---- connections -------------------------------------------------------------------------
    def _connect_kwargs(self, conninfo: str) -> Dict[str, Any]:
        # autocommit: every call of the protocol is its own transaction; no server-side prepared
        # statements: they would not survive a transaction pooler (PgBouncer before 1.21).
        kw: Dict[str, Any] = dict(autocommit=True, prepare_threshold=None)
        try:
            has_name = "application_name" in conninfo_to_dict(conninfo)
        except Exception:
            has_name = False
        if self.application_name is not None or not has_name:
            kw["application_name"] = self.application_name or DEFAULT_APPLICATION_NAME
        return kw

    def _settle_listening(self, pooled: bool) -> None:
        """Whether to LISTEN, once we know whether the main connection goes through a pooler."""
        self.pooled = pooled
        self.listening = self._listen_option and (self.listen_conninfo is not None or not pooled)
        if pooled and self._listen_option and self.listen_conninfo is None:
            logger.info("the connection goes through a transaction pooler: polling (give listen_conninfo,"
                        " a direct connection, for wake-ups)")
        if self._poll_interval_option is None:
            self.poll_interval = 2.0 if self.listening else 0.5
        if not self.listening:
            # (cancellation requests arrive with the lease extensions only: look often enough)
            self._extend_every = min(self._extend_every, self.poll_interval)

    def _check_handlers(self, rows: Sequence[Tuple[str, Optional[str]]]) -> List[str]:
        """The channels to LISTEN on; every handler must be a registered external handler."""
        found = {name for name, _ in rows}
        missing = [h for h in self.handlers if h not in found]
        if missing:
            raise ValueError(f"not registered external (NOTIFY) handlers: {', '.join(missing)}")
        return sorted({ch for _, ch in rows if ch})

    # ---- what handlers call ------------------------------------------------------------------
    def _new_event(self) -> Any:
        raise NotImplementedError

    def _set_event(self, ev: Any) -> None:
        ev.set()

    def _wake_flusher(self) -> None:
        raise NotImplementedError

    def _add_log(self, job: Job, level: str, message: str, fields: Optional[dict]) -> None:
        self._logs.append((job, level, message, fields))
        self._wake_flusher()

    def _add_progress(self, job: Job) -> None:
        self._progress.append(job)
        self._wake_flusher()

    # ---- outcomes ----------------------------------------------------------------------------
    def _failed(self, job: Job, exc: BaseException) -> None:
        """The handler raised: fail the attempt, or retry it at the time the exception gives."""
        if job._done or job.lost:
            self._discard(job)
            return
        job._done = True
        error = P.clean_error(str(exc) or type(exc).__name__)
        at = getattr(exc, "retry_at", None)
        if isinstance(exc, Retry):
            at = exc.at
            if at is None:
                d = exc.delay if isinstance(exc.delay, timedelta) else timedelta(seconds=float(exc.delay or 0))
                at = datetime.now(timezone.utc) + d
        if isinstance(at, datetime):
            if at.tzinfo is None:
                at = at.astimezone()
            self._replies.append((job, P.RETRY, error, at.isoformat()))
            return
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
        self._logs.append((job, "ERROR", P.clean_error(tb), None))
        self._replies.append((job, P.FAIL, error, None))

    def _discard(self, job: Job) -> None:
        """A handler returned for a job the worker no longer holds (lost, or given up at stop):
        nothing to send."""
        if job.lost and not job._done:
            job._done = True
            if self._held.pop(job.id, None) is not None:
                self._room(1)

    def _room(self, n: int) -> None:
        raise NotImplementedError

    def _drop_pending(self) -> None:
        """The reply connection is gone for good: forget the replies, logs and progress not sent."""
        n = 0
        while self._replies:
            job = self._replies.popleft()[0]
            if self._held.pop(job.id, None) is not None:
                n += 1
        self._room(n)
        self._logs.clear()
        self._progress.clear()
        if n:
            logger.error("%d replies could not be sent: those jobs are retried when their leases expire", n)

    def _release(self, job: Job) -> None:
        if not job._done:
            job._done = True
            self._replies.append((job, P.RELEASE, None, None))

    def _give_up_running(self) -> List[Job]:
        """stop_timeout passed: the handlers still running are asked to stop and their attempts
        failed (retried after the backoff); what they return later is not sent."""
        jobs = list(self._running)
        for job in jobs:
            job._cancel("stop")
            if not job._done:
                job._done = True
                job.lost = True
                self._replies.append((job, P.FAIL, STOPPED_ERROR, None))
        if jobs:
            logger.warning("%d handlers still running after stop_timeout (%gs): their attempts are failed",
                           len(jobs), self.stop_timeout)
        return jobs

    # ---- notifications -----------------------------------------------------------------------
    def _on_notify(self, payload: str) -> None:
        """A notification on one of the handlers' channels: "due <handler>" or "cancel <id>"."""
        kind, _, arg = payload.partition(" ")
        if kind == "due":
            if arg in self.handlers:
                self._due = True
        elif kind == "cancel":
            job = self._held.get(arg)
            if job is not None:
                logger.debug("job %s: cancel requested", arg)
                job._cancel("cancel")

    # ---- flushing ----------------------------------------------------------------------------
    def _pending(self) -> bool:
        return bool(self._replies or self._logs or self._progress)

    def _take_logs(self) -> List[Tuple[Job, str, str, Optional[dict]]]:
        out = []
        pop = self._logs.popleft
        try:
            while True:
                out.append(pop())
        except IndexError:
            pass
        return out

    def _take_progress(self) -> List[Tuple[Job, Optional[int], Optional[int], Optional[int]]]:
        seen: Dict[str, Tuple[Job, Optional[int], Optional[int], Optional[int]]] = {}
        pop = self._progress.popleft
        try:
            while True:
                job = pop()
                p = job._progress or [None, None, None]
                seen[job.id] = (job, p[0], p[1], p[2])
        except IndexError:
            pass
        return list(seen.values())

    def _take_replies(self) -> List[P.Reply]:
        out: List[P.Reply] = []
        pop = self._replies.popleft
        n = self.reply_batch_size
        try:
            while len(out) < n:
                out.append(pop())
        except IndexError:
            pass
        return out

    def _replied(self, batch: Sequence[P.Reply], ignored: Sequence[Tuple[str, int, str]]) -> int:
        """vq_reply_jobs answered for batch (ignored: the replies it did not apply). Returns how
        many places that frees."""
        held = self._held
        stats = self._stats
        stats["reply_calls"] += 1
        not_applied = {row[0]: row[2] for row in ignored} if ignored else {}
        freed = 0
        for job, outcome, error, _ in batch:
            if held.pop(job.id, None) is not None:
                freed += 1
            if not_applied:
                why = not_applied.get(job.id)
                if why is not None:
                    stats["ignored"] += 1
                    logger.warning("the reply (%s) for job %s (%s) attempt %d was ignored: %s",
                                   outcome, job.id, job.handler, job.attempt, why)
                    continue
            if outcome == P.COMPLETE:
                stats["completed"] += 1
            elif outcome == P.RELEASE:
                stats["released"] += 1
            else:
                stats["failed"] += 1
        return freed

    def _leases_to_extend(self, now: float) -> List[Job]:
        """The held jobs whose lease to extend now (a third of it is gone). A handler that ran past
        the timeout is told to stop and its lease left to expire (the server abandons the attempt)."""
        out = []
        limit = now - self._extend_every
        timeout = self.timeout
        for job in list(self._held.values()):
            if job.lost:
                continue
            if timeout is not None and job._started_at and now - job._started_at > timeout and not job._done:
                if job.cancel_reason != "timeout":
                    logger.warning("job %s (%s) attempt %d ran past the timeout (%gs): its lease is left to expire",
                                   job.id, job.handler, job.attempt, timeout)
                    job._cancel("timeout")
                    job.cancel_reason = "timeout"
                continue
            if job._extended_at <= limit:
                out.append(job)
        return out

    def _extended(self, jobs: Sequence[Job], rows: Sequence[Tuple[str, bool]], now: float) -> None:
        """vq_extend_leases answered (rows: the jobs still held)."""
        still = {r[0]: r[1] for r in rows}
        for job in jobs:
            cancel = still.get(job.id)
            if cancel is None:
                if not job.lost and job.id in self._held:
                    job.lost = True
                    self._stats["lost"] += 1
                    logger.warning("job %s (%s) attempt %d: lease lost (it expired, or the job ended)",
                                   job.id, job.handler, job.attempt)
                    job._cancel("lost")
                    if job._done:       # (its reply is on its way: it will be ignored)
                        continue
                    if job not in self._running:
                        self._discard(job)
                continue
            job._extended_at = now
            if cancel:
                job._cancel("cancel")

    def _new_jobs(self, text: str) -> List[Job]:
        now = time.monotonic()
        jobs = [Job(row, self, now) for row in P.parse_take(text)]
        held = self._held
        for job in jobs:
            held[job.id] = job
        self._stats["takes"] += 1
        self._stats["taken"] += len(jobs)
        return jobs

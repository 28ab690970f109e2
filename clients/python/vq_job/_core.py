"""What the threaded and the asyncio workers share: options, the jobs a worker holds, and what
it owes the server (replies, log lines, progress, lease extensions)."""
from __future__ import annotations

import logging
import time
import traceback
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from psycopg.conninfo import conninfo_to_dict

from . import _protocol as P
from .job import Job, Retry

logger = logging.getLogger("vq_job")

DEFAULT_APPLICATION_NAME = "vq_job worker"


class WorkerCore:
    """State and bookkeeping common to Worker and AsyncWorker (no I/O here)."""

    def __init__(self, conninfo: str = "", handlers: Optional[Mapping[str, Callable[..., Any]]] = None,
                 concurrency: int = 10, *, batch_size: Optional[int] = None,
                 poll_interval: Optional[float] = None, lease: float = 60.0,
                 job_timeout: Optional[float] = None, listen: bool = True,
                 listen_conninfo: Optional[str] = None, reply_batch_size: int = P.REPLY_CHUNK,
                 application_name: Optional[str] = None) -> None:
        if not handlers:
            raise ValueError("handlers must map at least one handler name to a function")
        if len(handlers) > 64:
            raise ValueError("a worker serves at most 64 handlers")
        for name, fn in handlers.items():
            if not isinstance(name, str) or not callable(fn):
                raise TypeError("handlers must map handler names (str) to callables")
        if int(concurrency) < 1:
            raise ValueError("concurrency must be at least 1")
        self.conninfo = conninfo
        self.handlers: Dict[str, Callable[..., Any]] = dict(handlers)
        self.concurrency = int(concurrency)
        self.batch_size = max(1, min(int(batch_size or min(self.concurrency, 1000)), 10000))
        self.lease = P.lease_seconds(lease)
        self.listen = bool(listen) or listen_conninfo is not None
        self.listen_conninfo = listen_conninfo
        if poll_interval is None:
            poll_interval = 2.0 if self.listen else 0.5
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.poll_interval = float(poll_interval)
        if job_timeout is not None and job_timeout <= 0:
            raise ValueError("job_timeout must be positive (or None)")
        self.job_timeout = job_timeout
        self.reply_batch_size = max(1, min(int(reply_batch_size), 10000))
        self.application_name = application_name
        # How often the leases of held jobs are looked at: a third of the lease; without LISTEN
        # (cancellation requests arrive with the extensions only) at least every poll interval.
        self._extend_every = self.lease / 3.0
        if not self.listen:
            self._extend_every = min(self._extend_every, self.poll_interval)
        self._handler_names = P.text_array(self.handlers)

        self._held: Dict[str, Job] = {}              # taken, not yet replied (applied)
        self._replies: Deque[P.Reply] = deque()      # (job, outcome, error, retry_at)
        self._logs: Deque[Tuple[Job, str, str, Optional[dict]]] = deque()
        self._progress: Deque[Job] = deque()
        self._stopping = False
        self._started = False
        #: counters: taken, completed, failed (incl. retried), released, cancelled, ignored
        self.stats: Dict[str, int] = dict(taken=0, completed=0, failed=0, released=0, ignored=0)
        self._due = True                             # a take is wanted (a "due" notification came)

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

    # ---- what handlers call ------------------------------------------------------------------
    def _new_event(self) -> Any:
        raise NotImplementedError

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
        """The handler raised: fail the attempt (or retry it when it raised Retry)."""
        error = P.clean_error(str(exc) or type(exc).__name__)
        retry_at = None
        outcome = P.FAIL
        if isinstance(exc, Retry):
            outcome = P.RETRY
            at = exc.at
            if at is None:
                delay = exc.delay
                if delay is None:
                    delay = 0
                if not isinstance(delay, timedelta):
                    delay = timedelta(seconds=float(delay))
                at = datetime.now(timezone.utc) + delay
            elif at.tzinfo is None:
                at = at.astimezone()
            retry_at = at.isoformat()
        else:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
            self._logs.append((job, "ERROR", tb, None))
        self._replies.append((job, outcome, error, retry_at))

    def _release(self, job: Job) -> None:
        self._replies.append((job, P.RELEASE, None, None))

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
                job._cancel()

    # ---- flushing: what to send --------------------------------------------------------------
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

    def _replied(self, batch: Sequence[P.Reply], ignored: Sequence[Tuple[str, int, str]]) -> None:
        """vq_reply_jobs answered for batch; ignored: its rows (the replies not applied)."""
        held = self._held
        stats = self.stats
        not_applied = {row[0]: row[2] for row in ignored}
        for job, outcome, error, _ in batch:
            held.pop(job.id, None)
            job._replied = True
            why = not_applied.get(job.id)
            if why is not None:
                stats["ignored"] += 1
                logger.warning("the reply (%s) for job %s (%s) attempt %d was ignored: %s",
                               outcome, job.id, job.handler, job.attempt, why)
            elif outcome == P.COMPLETE:
                stats["completed"] += 1
            elif outcome == P.RELEASE:
                stats["released"] += 1
            else:
                stats["failed"] += 1

    def _leases_to_extend(self, now: float) -> List[Job]:
        """The held jobs whose lease should be extended now (a third of it is gone); a handler
        that ran past job_timeout is left to lose its lease (and told to stop)."""
        out = []
        limit = now - self._extend_every
        timeout = self.job_timeout
        for job in list(self._held.values()):
            if job._replied:
                continue
            if timeout is not None and job._started_at and now - job._started_at > timeout:
                if not job.timed_out:
                    job.timed_out = True
                    logger.warning("job %s (%s) attempt %d: the handler ran past job_timeout (%gs): its lease"
                                   " is left to expire", job.id, job.handler, job.attempt, timeout)
                    job._cancel()
                continue
            if job._extended_at <= limit:
                out.append(job)
        return out

    def _extended(self, jobs: Sequence[Job], rows: Sequence[Tuple[str, bool]], now: float) -> None:
        still = {r[0]: r[1] for r in rows}
        for job in jobs:
            cancel = still.get(job.id)
            if cancel is None:
                if not job._replied and not job.lease_lost:
                    job.lease_lost = True
                    logger.warning("job %s (%s) attempt %d: lease lost (expired or the job ended)",
                                   job.id, job.handler, job.attempt)
                    job._cancel()
                continue
            job._extended_at = now
            if cancel:
                job._cancel()

    def _new_jobs(self, text: str) -> List[Job]:
        now = time.monotonic()
        jobs = [Job(row, self, now) for row in P.parse_take(text)]
        held = self._held
        for job in jobs:
            held[job.id] = job
        self.stats["taken"] += len(jobs)
        return jobs

"""A taken job, as a handler sees it."""
from __future__ import annotations

import asyncio
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

if TYPE_CHECKING:
    from ._core import WorkerCore

LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")


class Retry(Exception):
    """Raise from a handler to fail the attempt and have the job due again at a time of your
    choice instead of after the queue's backoff: ``raise Retry("rate limited", delay=30)`` (seconds
    or a ``timedelta``) or ``raise Retry("closed", at=tomorrow_9am)``. The attempt is consumed
    (the job is dead-lettered when none remain). Any exception with a ``retry_at`` attribute (a
    datetime) does the same."""

    def __init__(self, message: str = "retry asked by the handler", *, delay: Any = None,
                 at: Optional[datetime] = None) -> None:
        super().__init__(message)
        self.delay = delay
        self.at = at


class Job:
    """One attempt of a job, taken by a worker: the handler's second argument.

    ``id`` (the execution id, a str), ``attempt`` (0 for the first, as ``vq.job.attempt_number``),
    ``handler``, ``job_id`` (the idempotency key given to enqueue, or None), ``payload``,
    ``metadata``, ``queue``, ``priority``, ``max_attempts``, ``scheduled_at`` and ``lease_until``
    (datetimes, when the worker took it).
    """

    __slots__ = ("id", "attempt", "handler", "job_id", "payload", "metadata", "queue", "priority",
                 "max_attempts", "_scheduled_at", "_lease_until", "_worker", "cancel_reason", "_event",
                 "lost", "_taken_at", "_extended_at", "_started_at", "_progress", "_done")

    def __init__(self, row: list, worker: "WorkerCore", now: float) -> None:
        (self.id, self.attempt, self.handler, self.job_id, self.payload, self.metadata, self.queue,
         self.priority, self.max_attempts, self._scheduled_at, self._lease_until) = row
        self._worker = worker
        #: why the job should stop (None while it need not): "cancel" (vq_cancel), "lost" (the
        #: worker lost its lease), "timeout" (ran past the worker's timeout), "stop" (the worker
        #: stopped and stop_timeout passed)
        self.cancel_reason: Optional[str] = None
        self._event: Any = None
        #: the worker no longer holds the job (its lease expired, or it stopped waiting for it):
        #: the handler's result will not be sent
        self.lost = False
        self._taken_at = now
        self._extended_at = now
        self._started_at = 0.0
        self._progress: Optional[list] = None
        self._done = False          # its outcome has been queued (or given up)

    def __repr__(self) -> str:
        return f"<Job {self.handler} {self.id} attempt {self.attempt}>"

    @property
    def scheduled_at(self) -> Optional[datetime]:
        v = self._scheduled_at
        return datetime.fromisoformat(v) if isinstance(v, str) else v

    @property
    def lease_until(self) -> Optional[datetime]:
        v = self._lease_until
        return datetime.fromisoformat(v) if isinstance(v, str) else v

    # ---- cancellation ------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        """True once the job should stop (see ``cancel_reason``). After ``vq_cancel`` the job ends
        CANCELLED whatever the handler then does; the handler should return (or raise) soon."""
        return self.cancel_reason is not None

    @property
    def cancel_event(self) -> Union[threading.Event, asyncio.Event]:
        """An event set when ``cancelled`` becomes true: a ``threading.Event`` for the jobs of a
        ``Worker`` (``job.cancel_event.wait(timeout)``), an ``asyncio.Event`` for those of an
        ``AsyncWorker`` (``await job.cancel_event.wait()``)."""
        ev = self._event
        if ev is None:
            ev = self._event = self._worker._new_event()
            if self.cancel_reason is not None:
                ev.set()
        return ev

    def _cancel(self, reason: str) -> None:
        if self.cancel_reason is not None:
            return
        self.cancel_reason = reason
        ev = self._event
        if ev is not None:
            self._worker._set_event(ev)

    # ---- logs and progress -------------------------------------------------------------------
    def log(self, message: str, level: str = "INFO", fields: Optional[Mapping[str, Any]] = None) -> None:
        """A line of the job's log (``vq.job_log``, as ``vq_log`` writes for function handlers):
        ``level`` DEBUG, INFO, WARN or ERROR; ``fields`` a JSON object stored with the line. Lines
        are written in the background, in order, before the job's reply."""
        lvl = level.upper()
        if lvl == "WARNING":
            lvl = "WARN"
        if lvl not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
        self._worker._add_log(self, lvl, str(message), None if fields is None else dict(fields))

    def progress(self, total: Optional[int] = None, succeeded: Optional[int] = None,
                 failed: Optional[int] = None) -> None:
        """Set the job's progress counters (absolute values, as ``vq.job`` shows them; one left
        out keeps its value). Written in the background; only the latest values are sent."""
        p = self._progress
        if p is None:
            p = self._progress = [None, None, None]
        for i, v in enumerate((total, succeeded, failed)):
            if v is not None:
                if int(v) < 0:
                    raise ValueError("progress counters must not be negative")
                p[i] = int(v)
        self._worker._add_progress(self)

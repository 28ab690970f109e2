"""enqueue: add a job on the caller's own connection (so it commits or rolls back with the
caller's transaction)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Awaitable, List, Optional, Sequence, Union, overload

import psycopg
from psycopg.types.json import Jsonb

from ._protocol import text_array

# vq_enqueue's arguments, positionally (handler, payload, run_at, queue, priority, max_attempts,
# job_id, metadata, unique_for); vq_enqueue_in has a delay in place of run_at.
_AT = ("SELECT vq_enqueue(%s::text, %s::jsonb, %s::timestamptz, %s::text, %s::integer, %s::integer,"
       " %s::text, %s::jsonb, %s::interval)::text")
_IN = ("SELECT vq_enqueue_in(%s::text, %s::jsonb, %s::interval, %s::text, %s::integer, %s::integer,"
       " %s::text, %s::jsonb, %s::interval)::text")
_MANY = ("SELECT array_to_json(vq_enqueue_many(%s::text, %s::jsonb[], %s::timestamptz, %s::text,"
         " %s::integer, %s::integer, %s::text[], %s::jsonb))::text")

RunAt = Union[datetime, timedelta, str, None]
Interval = Union[timedelta, str, None]
Conn = Union[psycopg.Connection, psycopg.Cursor]
AConn = Union[psycopg.AsyncConnection, psycopg.AsyncCursor]


def _check(value: Any, name: str, types: tuple) -> None:
    if value is not None and not isinstance(value, types):
        raise TypeError(f"{name} must be one of {', '.join(t.__name__ for t in types)} or None,"
                        f" not {type(value).__name__}")


def _statement(name: str, payload: Any, run_at: RunAt, job_id: Optional[str], queue: Optional[str],
               priority: Optional[int], max_attempts: Optional[int], metadata: Optional[dict],
               unique_for: Interval) -> tuple:
    _check(run_at, "run_at", (datetime, timedelta, str))
    _check(unique_for, "unique_for", (timedelta, str))
    stmt = _IN if isinstance(run_at, timedelta) else _AT
    if isinstance(run_at, datetime) and run_at.tzinfo is None:
        run_at = run_at.astimezone()      # (naive: the local time of this process)
    return stmt, [name, None if payload is None else Jsonb(payload), run_at, queue, priority, max_attempts,
                  job_id, None if metadata is None else Jsonb(metadata), unique_for]


@overload
def enqueue(conn: Conn, name: str, payload: Any = ..., *, run_at: RunAt = ..., job_id: Optional[str] = ...,
            queue: Optional[str] = ..., priority: Optional[int] = ..., max_attempts: Optional[int] = ...,
            metadata: Optional[dict] = ..., unique_for: Interval = ...) -> str: ...
@overload  # noqa: E302
def enqueue(conn: AConn, name: str, payload: Any = ..., *, run_at: RunAt = ..., job_id: Optional[str] = ...,
            queue: Optional[str] = ..., priority: Optional[int] = ..., max_attempts: Optional[int] = ...,
            metadata: Optional[dict] = ..., unique_for: Interval = ...) -> Awaitable[str]: ...
def enqueue(conn: Any, name: str, payload: Any = None, *, run_at: RunAt = None, job_id: Optional[str] = None,  # noqa: E302
            queue: Optional[str] = None, priority: Optional[int] = None, max_attempts: Optional[int] = None,
            metadata: Optional[dict] = None, unique_for: Interval = None) -> Any:
    """Enqueue a job of handler ``name`` on ``conn`` (a psycopg Connection or Cursor: the job
    joins its current transaction; with an autocommit connection outside a transaction block it
    commits at once). Returns the job's execution id (a str).

    ``payload``: anything JSON can hold (None: no payload); ``run_at``: when the job becomes due,
    a datetime (naive: local time), a timedelta from now, or a timestamptz string (default now);
    ``job_id``: an idempotency key (while an unfinished job of your role holds it, enqueue returns
    that job's execution id and inserts nothing); ``queue``, ``priority``, ``max_attempts``:
    override the handler's; ``metadata``: a JSON object, merged with the durable context
    (``vq_context_set``); ``unique_for``: with ``job_id``, the key also covers finished jobs for
    this long (a timedelta or an interval string).

    Given a psycopg AsyncConnection (or AsyncCursor), returns an awaitable: ``await enqueue(...)``
    (or use :func:`enqueue_async`)."""
    if isinstance(conn, (psycopg.AsyncConnection, psycopg.AsyncCursor)):
        return enqueue_async(conn, name, payload, run_at=run_at, job_id=job_id, queue=queue, priority=priority,
                             max_attempts=max_attempts, metadata=metadata, unique_for=unique_for)
    stmt, params = _statement(name, payload, run_at, job_id, queue, priority, max_attempts, metadata, unique_for)
    row = conn.execute(stmt, params).fetchone()
    return row[0]


async def enqueue_async(conn: AConn, name: str, payload: Any = None, *, run_at: RunAt = None,
                        job_id: Optional[str] = None, queue: Optional[str] = None, priority: Optional[int] = None,
                        max_attempts: Optional[int] = None, metadata: Optional[dict] = None,
                        unique_for: Interval = None) -> str:
    """:func:`enqueue` on a psycopg AsyncConnection or AsyncCursor."""
    stmt, params = _statement(name, payload, run_at, job_id, queue, priority, max_attempts, metadata, unique_for)
    cur = await conn.execute(stmt, params)
    row = await cur.fetchone()
    assert row is not None
    return row[0]


def _many_params(name: str, payloads: Sequence[Any], run_at: Optional[datetime], queue: Optional[str],
                 priority: Optional[int], max_attempts: Optional[int], job_ids: Optional[Sequence[str]],
                 metadata: Optional[dict]) -> list:
    _check(run_at, "run_at", (datetime, str))
    if isinstance(run_at, datetime) and run_at.tzinfo is None:
        run_at = run_at.astimezone()
    return [name, text_array(json.dumps(p) for p in payloads), run_at, queue, priority, max_attempts,
            None if job_ids is None else text_array(job_ids), None if metadata is None else Jsonb(metadata)]


def enqueue_many(conn: Conn, name: str, payloads: Sequence[Any], *, run_at: Optional[datetime] = None,
                 queue: Optional[str] = None, priority: Optional[int] = None, max_attempts: Optional[int] = None,
                 job_ids: Optional[Sequence[str]] = None, metadata: Optional[dict] = None) -> List[str]:
    """Enqueue one job of handler ``name`` per payload in one statement (``vq_enqueue_many``);
    returns their execution ids, in order. Same transaction rules as :func:`enqueue`."""
    row = conn.execute(_MANY, _many_params(name, payloads, run_at, queue, priority, max_attempts, job_ids,
                                           metadata)).fetchone()
    return json.loads(row[0]) if row and row[0] else []


async def enqueue_many_async(conn: AConn, name: str, payloads: Sequence[Any], *, run_at: Optional[datetime] = None,
                             queue: Optional[str] = None, priority: Optional[int] = None,
                             max_attempts: Optional[int] = None, job_ids: Optional[Sequence[str]] = None,
                             metadata: Optional[dict] = None) -> List[str]:
    """:func:`enqueue_many` on a psycopg AsyncConnection or AsyncCursor."""
    cur = await conn.execute(_MANY, _many_params(name, payloads, run_at, queue, priority, max_attempts, job_ids,
                                                 metadata))
    row = await cur.fetchone()
    return json.loads(row[0]) if row and row[0] else []

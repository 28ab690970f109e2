"""The SQL of the external-worker protocol, and how values cross it.

Everything a worker sends goes as a few text parameters: arrays are written as PostgreSQL array
literals (``{...}``) and cast in the statement, and a take comes back as one JSON document that
the standard library's C JSON parser reads. With Debian's psycopg (its pure-Python
implementation) this costs far less than one Python-level loader call per column and row.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, List, Optional, Sequence, Tuple

# The columns of a taken job, in the order of the JSON arrays the take returns.
TAKE_SQL = (
    "SELECT coalesce(json_agg(json_build_array(execution_id, attempt, handler, job_id, payload,"
    " metadata, queue, priority, max_attempts, scheduled_at, lease_until)), '[]')::text"
    " FROM vq_take_jobs(%s::text[], %s::integer, %s::float8 * interval '1 second')"
)

REPLY_ALL_COMPLETE_SQL = (
    "SELECT execution_id::text, attempt, ignored FROM vq_reply_jobs(%s::uuid[], %s::integer[])"
)
REPLY_SQL = (
    "SELECT execution_id::text, attempt, ignored"
    " FROM vq_reply_jobs(%s::uuid[], %s::integer[], %s::text[], %s::text[], %s::timestamptz[])"
)
EXTEND_SQL = (
    "SELECT execution_id::text, cancel_requested"
    " FROM vq_extend_leases(%s::uuid[], %s::integer[], %s::float8 * interval '1 second')"
)
LOG_SQL = "SELECT vq_log_jobs(%s::uuid[], %s::integer[], %s::text[], %s::text[], %s::jsonb[])"
PROGRESS_SQL = "SELECT vq_progress_jobs(%s::uuid[], %s::integer[], %s::bigint[], %s::bigint[], %s::bigint[])"
CHANNELS_SQL = "SELECT name, channel FROM vq.handler WHERE kind = 'notify' AND name = ANY(%s::text[])"

# At most this many jobs per vq_reply_jobs / vq_extend_leases call (the server accepts 10,000; a
# completion costs it more per job in large calls, see README.md, "Performance").
REPLY_CHUNK = 250

# Outcomes of vq_reply_jobs.
COMPLETE = "complete"
FAIL = "fail"
RETRY = "retry"
RELEASE = "release"

MIN_LEASE = 1.0
MAX_LEASE = 24 * 3600.0


def quote_element(value: Optional[str]) -> str:
    """One element of an array literal: NULL, or the text double-quoted and escaped."""
    if value is None:
        return "NULL"
    # (PostgreSQL text cannot hold NUL)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\x00", "\\\\0") + '"'


def text_array(values: Iterable[Optional[str]]) -> str:
    """An array literal of text (or of anything whose input is text, such as jsonb or timestamptz)."""
    return "{" + ",".join(map(quote_element, values)) + "}"


def plain_array(values: Iterable[Any]) -> str:
    """An array literal of values that need no quoting: uuids, integers."""
    return "{" + ",".join(map(str, values)) + "}"


def int_array(values: Iterable[Optional[int]]) -> str:
    return "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"


def parse_take(text: str) -> List[list]:
    """The rows of a take: lists in TAKE_SQL's column order."""
    return json.loads(text)


def lease_seconds(lease: float) -> float:
    if not MIN_LEASE <= lease <= MAX_LEASE:
        raise ValueError(f"lease must be between {MIN_LEASE:g} and {MAX_LEASE:g} seconds, got {lease!r}")
    return float(lease)


def clean_error(text: str) -> str:
    return text.replace("\x00", "\\0")


Reply = Tuple[Any, str, Optional[str], Optional[str]]   # (job, outcome, error, retry_at ISO text)


def reply_params(replies: Sequence[Reply]) -> Tuple[str, list]:
    """The statement and parameters of one vq_reply_jobs call."""
    ids = plain_array(r[0].id for r in replies)
    attempts = plain_array(r[0].attempt for r in replies)
    if all(r[1] == COMPLETE for r in replies):
        return REPLY_ALL_COMPLETE_SQL, [ids, attempts]
    outcomes = plain_array(r[1] for r in replies)
    errors = text_array(r[2] for r in replies)
    retry_at = text_array(r[3] for r in replies)
    return REPLY_SQL, [ids, attempts, outcomes, errors, retry_at]


def log_params(lines: Sequence[Tuple[Any, str, str, Optional[dict]]]) -> list:
    return [plain_array(l[0].id for l in lines), plain_array(l[0].attempt for l in lines),
            plain_array(l[1] for l in lines), text_array(l[2] for l in lines),
            text_array(None if l[3] is None else json.dumps(l[3], default=str) for l in lines)]


def progress_params(items: Sequence[Tuple[Any, Optional[int], Optional[int], Optional[int]]]) -> list:
    return [plain_array(p[0].id for p in items), plain_array(p[0].attempt for p in items),
            int_array(p[1] for p in items), int_array(p[2] for p in items), int_array(p[3] for p in items)]


def chunks(seq: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i:i + size]

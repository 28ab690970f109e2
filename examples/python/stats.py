#!/usr/bin/python3
"""stats.py: read vq.queue_stats and vq_metrics() and print them as one JSON object:
  {"queues": [{"queue", "paused", "due", "scheduled", "running", "completed", "dead_letter",
               "cancelled", "oldest_due_seconds", "completed_last_minute"}, ...],
   "metrics": [{"name", "labels": {...}, "value"}, ...]}

    /usr/bin/python3 stats.py

Both count the jobs of the roles the caller is a member of (scope 'own'), or every job for a
member of pg_monitor (scope 'all'): run it as the application role, or as a monitoring role.
"""
import json
import re
import sys

import psycopg
from psycopg.rows import dict_row

STATS = """
  SELECT queue, paused, due, scheduled, running, completed, dead_letter, cancelled,
         extract(epoch FROM oldest_due_age)::float8 AS oldest_due_seconds, completed_last_minute
    FROM vq.queue_stats ORDER BY queue"""

# One line of vq_metrics(): name{label="value",...} number.
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metric(line):
    m = LINE.match(line)
    if not m:
        raise ValueError(f"not a metric line: {line}")
    labels = {name: re.sub(r'\\(.)', lambda c: "\n" if c[1] == "n" else c[1], value)
              for name, value in LABEL.findall(m[2] or "")}
    return {"name": m[1], "labels": labels, "value": float(m[3])}


def main():
    with psycopg.connect("", autocommit=True) as conn:
        queues = conn.cursor(row_factory=dict_row).execute(STATS).fetchall()
        metrics = [parse_metric(line) for (line,) in conn.execute("SELECT line FROM vq_metrics() AS line")]
    print(json.dumps({"queues": queues, "metrics": metrics}))


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as err:
        sys.exit(f"stats.py: {err}")

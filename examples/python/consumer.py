#!/usr/bin/python3
"""consumer.py: an external consumer of the NOTIFY handler shop.render-invoice.

    /usr/bin/python3 consumer.py

LISTENs on the handler's channel; each announcement names a job ({"execution_id", "attempt"}) and
nothing else, so the job and its payload are taken with vq_take, which checks who asks. vq_pull
catches up at start and every few seconds (jobs announced while no consumer listened). The
invoice row and vq_complete commit together: if the reply is ignored (the attempt timed out
meanwhile) the invoice is rolled back too. A render error is replied with vq_fail, which retries
with the queue's backoff or dead-letters the job.

Connects with the libpq variables, directly (LISTEN needs a session: not through a transaction
pooler), twice: one connection only listens, the other takes and replies. Prints "listening"
when ready; stops on SIGTERM or SIGINT.
"""
import json
import os
import select
import signal
import sys
import time

import psycopg
from psycopg import sql

HANDLER = "shop.render-invoice"
CHANNEL = "shop_invoice"
PULL_EVERY_S = 5.0
PULL_BATCH = 10
COLUMNS = "execution_id, attempt, payload, cancel_requested"


def log(msg):
    print(f"consumer.py: {msg}", flush=True)


class RenderError(Exception):
    pass


def render_invoice(payload, attempt):
    """The work itself. A payload can ask to fail, to show retries and dead letters."""
    if payload.get("fail") == "always":
        raise RenderError(f"cannot render invoice for order {payload['order_id']}")
    if attempt < payload.get("fail_attempts", 0):
        raise RenderError(f"renderer busy (attempt {attempt})")
    return f"invoice for order {payload['order_id']}"


def handle(conn, job):
    """Run one taken job and reply."""
    job_id, attempt, payload, cancel_requested = job
    if cancel_requested:
        # vq_cancel asked this job to stop: any reply records it CANCELLED.
        conn.execute("SELECT vq_fail(%s, %s, %s)", [job_id, "cancelled before rendering", attempt])
        return
    try:
        render_invoice(payload, attempt)
    except RenderError as err:
        accepted = conn.execute("SELECT vq_fail(%s, %s, %s)", [job_id, str(err), attempt]).fetchone()[0]
        log(f"{job_id} attempt {attempt} failed: {err}{'' if accepted else ' (reply ignored)'}")
        return
    try:
        with conn.transaction() as tx:
            conn.execute("INSERT INTO shop.invoice (order_id, execution_id, rendered_by) VALUES (%s, %s, %s)",
                         [payload["order_id"], job_id, "python"])
            accepted = conn.execute("SELECT vq_complete(%s, %s)", [job_id, attempt]).fetchone()[0]
            if not accepted:
                raise psycopg.Rollback(tx)
        log(f"{job_id} attempt {attempt} {'completed' if accepted else 'reply ignored, invoice rolled back'}")
    except psycopg.Error as err:
        conn.execute("SELECT vq_fail(%s, %s, %s)", [job_id, str(err), attempt])
        log(f"{job_id} attempt {attempt} failed: {err}")


def pull(conn):
    """Take and run the announced jobs no consumer took yet."""
    while True:
        jobs = conn.execute(f"SELECT {COLUMNS} FROM vq_pull(%s, %s)", [HANDLER, PULL_BATCH]).fetchall()
        for job in jobs:
            handle(conn, job)
        if len(jobs) < PULL_BATCH:
            return


def announcements(listen):
    """The (execution_id, attempt) of the notifications that arrived on the listening connection."""
    listen.pgconn.consume_input()
    found = []
    while (n := listen.pgconn.notifies()) is not None:
        try:
            msg = json.loads(n.extra)
            found.append((msg["execution_id"], msg["attempt"]))
        except (ValueError, KeyError, TypeError):
            log(f"ignoring a notification that is not an announcement: {n.extra!r}")
    return found


def main():
    stopping = []
    # A signal writes to this pipe, which wakes the select() below at once.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.append(True))

    with psycopg.connect("", autocommit=True) as listen, psycopg.connect("", autocommit=True) as work:
        # LISTEN before the first pull, so that no job falls between the two.
        listen.execute(sql.SQL("LISTEN {}").format(sql.Identifier(CHANNEL)))
        log("listening")
        next_pull = 0.0
        while not stopping:
            if time.monotonic() >= next_pull:
                pull(work)
                next_pull = time.monotonic() + PULL_EVERY_S
            ready, _, _ = select.select([listen.fileno(), wake_r], [], [],
                                        max(0.0, next_pull - time.monotonic()))
            if wake_r in ready:
                os.read(wake_r, 512)
            if listen.fileno() in ready:
                for job_id, attempt in announcements(listen):
                    # No row: another consumer took it, or it is not ours to take.
                    for job in work.execute(f"SELECT {COLUMNS} FROM vq_take(%s, %s, %s)",
                                            [job_id, attempt, HANDLER]).fetchall():
                        handle(work, job)
    log("stopped")


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as err:
        sys.exit(f"consumer.py: {err}")

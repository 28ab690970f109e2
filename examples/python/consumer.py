#!/usr/bin/python3
"""consumer.py: the worker of the external handler shop.render-invoice, with the vq_job library
(clients/python).

    /usr/bin/python3 consumer.py

The Worker LISTENs on the handler's channel and takes due jobs in batches (vq_take_jobs), runs
render_invoice for each and replies for many at once (vq_reply_jobs): a handler that returns
completes the job, one that raises fails the attempt with the exception's message (retried with
the queue's backoff, then dead-lettered). A job is replied after its handler returned, so a
worker that dies in between leaves it to be run again (at least once): the invoice row is
written idempotently (one per execution_id). Connects with the libpq variables, directly
(through a transaction pooler, give it a direct listen_conninfo). Prints "listening" when ready;
stops gracefully on SIGTERM or SIGINT (jobs in flight finish and are replied).

Uses the library from this repository (clients/python) unless vq_job is installed
(pip install clients/python).
"""
import os
import sys
import threading

import psycopg

try:
    import vq_job
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import vq_job

HANDLER = "shop.render-invoice"


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


def main():
    # One connection per handler thread, for the invoice rows (the worker has its own).
    local = threading.local()

    def connection():
        if getattr(local, "conn", None) is None:
            local.conn = psycopg.connect("", autocommit=True)
        return local.conn

    def handle(payload, job):
        try:
            render_invoice(payload, job.attempt)
        except RenderError as err:
            log(f"{job.id} attempt {job.attempt} failed: {err}")
            raise
        connection().execute("INSERT INTO shop.invoice (order_id, execution_id, rendered_by) VALUES (%s, %s, %s)"
                             " ON CONFLICT (execution_id) DO NOTHING", [payload["order_id"], job.id, "python"])
        job.log(f"rendered the invoice of order {payload['order_id']}")
        log(f"{job.id} attempt {job.attempt} completed")

    worker = vq_job.Worker("", handlers={HANDLER: handle}, concurrency=4)
    # SIGTERM / SIGINT: stop taking, finish and reply the jobs in flight, close the connections.
    worker.stop_on_signals()
    threading.Thread(target=lambda: worker.ready.wait() and log("listening"), daemon=True).start()
    worker.run()
    log("stopped")


if __name__ == "__main__":
    try:
        main()
    except (psycopg.Error, ValueError) as err:
        sys.exit(f"consumer.py: {err}")

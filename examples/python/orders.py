#!/usr/bin/python3
"""orders.py: an order saved and its jobs enqueued in one transaction, an outbox publish in the
same transaction, and a transaction that fails after enqueuing and leaves nothing.

    /usr/bin/python3 orders.py [LABEL]

Connects with the libpq variables (PGHOST, PGPORT, PGUSER, PGDATABASE, PGPASSWORD), straight to
PostgreSQL or through PgBouncer in transaction pooling mode: nothing here relies on session
state. Prints one JSON line: what was committed, what was rolled back, and the durable context a
later transaction sees (always {}).
"""
import json
import sys
from datetime import datetime, timedelta, timezone

import psycopg
from psycopg.types.json import Jsonb

# vq_enqueue's arguments are positional, in this order (part of its contract):
# handler, payload, run_at, queue, priority, max_attempts, job_id, metadata.
ENQUEUE = ("SELECT vq_enqueue(%s::text, %s::jsonb, %s::timestamptz, NULL, NULL, NULL,"
           " %s::text, %s::jsonb)")
PUBLISH = "SELECT vq_outbox_publish(%s::text, %s::jsonb, NULL, %s::jsonb)"


class PaymentDeclined(Exception):
    pass


def place_order(conn, customer, total, request_id, decline_payment=False):
    """Save an order and enqueue what follows from it, all in one transaction."""
    with conn.transaction():
        # Durable context for this transaction only (is_local => true, as SET LOCAL): every job
        # enqueued and every outbox row published below carries it, and it ends with the
        # transaction, so it never reaches the next client of a pooled server connection.
        # (The session form, without is_local, would: not through a transaction pooler.)
        conn.execute("SELECT vq_context_set('request', %s, is_local => true)",
                     [Jsonb({"id": request_id, "client": "python"})])
        order_id = conn.execute("INSERT INTO shop.orders (customer, total) VALUES (%s, %s) RETURNING id",
                                [customer, total]).fetchone()[0]
        payload = Jsonb({"order_id": order_id})

        # Per-call metadata is merged with the bound context (another namespace than the context's).
        email_job = conn.execute(ENQUEUE, ["shop.confirm-email", payload, None, f"order-{order_id}-email",
                                           Jsonb({"order": {"customer": customer}})]).fetchone()[0]
        follow_up_job = conn.execute(ENQUEUE, ["shop.follow-up", payload,
                                               datetime.now(timezone.utc) + timedelta(days=3),
                                               f"order-{order_id}-follow-up", None]).fetchone()[0]
        # The outbox row becomes a job of the NOTIFY handler after commit (the relay enqueues
        # it); its headers stay on the outbox row.
        outbox_id = conn.execute(PUBLISH, ["shop.render-invoice", Jsonb({"order_id": order_id, "total": total}),
                                           Jsonb({"source": "orders.py"})]).fetchone()[0]
        if decline_payment:
            raise PaymentDeclined("payment declined")   # leaving the block rolls back
    return {"order_id": order_id, "email_job": str(email_job), "follow_up_job": str(follow_up_job),
            "outbox_id": outbox_id}


def main():
    label = sys.argv[1] if len(sys.argv) > 1 else "python"
    # autocommit: transactions are the explicit conn.transaction() blocks. prepare_threshold=None:
    # no server-side prepared statements, which a transaction pooler (PgBouncer before 1.21)
    # cannot keep across transactions.
    with psycopg.connect("", autocommit=True, prepare_threshold=None) as conn:
        committed = place_order(conn, f"{label}-committed", "42.50", f"{label}-req-1")
        rolled_back = None
        try:
            place_order(conn, f"{label}-rolled-back", "13.00", f"{label}-req-2", decline_payment=True)
        except PaymentDeclined as err:
            rolled_back = {"customer": f"{label}-rolled-back", "error": str(err)}
        context_after = conn.execute("SELECT vq_context()").fetchone()[0]
    print(json.dumps({"label": label, "committed": committed, "rolled_back": rolled_back,
                      "context_after": context_after}))


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as err:
        sys.exit(f"orders.py: {err}")

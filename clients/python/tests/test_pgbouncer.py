"""Through PgBouncer in transaction pooling mode: the worker sees the pooler, polls, or LISTENs on
a direct connection when given one. VQ_TEST_BOUNCER is a conninfo that goes through a PgBouncer
in transaction mode to the test database (test/scenarios/client_python.sh sets it)."""
from __future__ import annotations

import os
import time
import unittest
from typing import Any, List

import vq_job
from vq_job import enqueue

from _support import AsyncFlavor, SyncFlavor, WorkerTestCase, connect, wait_until

BOUNCER = os.environ.get("VQ_TEST_BOUNCER")


class PgBouncerBehaviour:
    def test_polling_through_the_pooler(self: Any) -> None:
        h = self.db.handler(backoff_ms=100)
        ran: List[Any] = []

        def handle(payload: Any, job: vq_job.Job) -> None:
            ran.append((job.id, job.attempt))
            job.log("through the pooler", fields={"n": payload["n"]})
            job.progress(total=2, succeeded=1)
            if payload["n"] == 1 and job.attempt == 0:
                raise ValueError('a "quoted" failure, with \\ and\nnewline')

        r = self.start({h: self.flavor.handler(handle)}, conninfo=BOUNCER, poll_interval=None)  # (it finds out)
        self.assertEqual((r.worker.pooled, r.worker.listening, r.worker.poll_interval), (True, False, 0.5))
        with connect(BOUNCER) as conn:           # enqueue through the pooler too, in a transaction
            with conn.transaction():
                ids = [enqueue(conn, h, {"n": n}) for n in range(3)]
        wait_until(lambda: self.db.states(h) == {"COMPLETED": 3}, 15, "3 jobs COMPLETED")
        self.assertEqual(self.db.state(ids[0]), ("COMPLETED", 0, None))
        self.assertEqual(self.db.transitions(ids[1]), ["CLAIMED:0", "FAILED:0", "CLAIMED:1", "COMPLETED:1"])
        self.assertEqual(self.db.one("SELECT error FROM vq.job_transition WHERE execution_id = %s AND kind = 'FAILED'",
                                     [ids[1]]), 'a "quoted" failure, with \\ and\nnewline')
        self.assertEqual(self.db.one("SELECT count(*) FROM vq.job_log WHERE execution_id = ANY(%s::uuid[])"
                                     " AND message = 'through the pooler'", [ids]), 4)
        r.stop()
        self.assertEqual(r.worker.stats["completed"], 3)

    def test_listen_on_a_direct_connection(self: Any) -> None:
        h = self.db.handler()
        ran: List[str] = []
        r = self.start({h: self.flavor.handler(lambda p, j: ran.append(j.id))}, conninfo=BOUNCER,
                       listen_conninfo="", poll_interval=30)
        self.assertEqual((r.worker.pooled, r.worker.listening), (True, True))
        # the LISTEN went straight to the server: the backend that ran it is the one the
        # listening connection reports (through the pooler they differ)
        self.assertEqual(self.db.all("SELECT pid FROM pg_stat_activity WHERE query = %s", [f'LISTEN "{h}"']),
                         [(r.worker._listen_conn.info.backend_pid,)])
        with connect(BOUNCER) as conn:
            i = enqueue(conn, h, {})
        # woken by the notification (it would poll only every 30 s)
        wait_until(lambda: self.db.state(i)[0] == "COMPLETED", 10, "the job COMPLETED")
        self.assertEqual(ran, [i])
        r.stop()


@unittest.skipUnless(BOUNCER, "VQ_TEST_BOUNCER is not set (no PgBouncer)")
class SyncPgBouncerTest(PgBouncerBehaviour, WorkerTestCase):
    flavor = SyncFlavor()


@unittest.skipUnless(BOUNCER, "VQ_TEST_BOUNCER is not set (no PgBouncer)")
class AsyncPgBouncerTest(PgBouncerBehaviour, WorkerTestCase):
    flavor = AsyncFlavor()


del PgBouncerBehaviour

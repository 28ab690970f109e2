"""enqueue, enqueue_many and their async forms, on the caller's own connection."""
from __future__ import annotations

import asyncio
import unittest
from datetime import datetime, timedelta, timezone

import psycopg

from vq_job import enqueue, enqueue_async, enqueue_many, enqueue_many_async

from _support import DB


class EnqueueTest(unittest.TestCase):
    def setUp(self) -> None:
        self.db = DB()
        self.h = self.db.handler(max_attempts=4)

    def tearDown(self) -> None:
        self.db.close()

    def job(self, execution_id: str) -> tuple:
        return self.db.conn.execute(
            "SELECT handler, payload, queue, priority, max_attempts, job_id, metadata, state::text, scheduled_at"
            " FROM vq.job WHERE execution_id = %s", [execution_id]).fetchone()

    def test_joins_the_callers_transaction(self) -> None:
        conn = self.db.conn
        with self.assertRaises(ZeroDivisionError):
            with conn.transaction():
                rolled_back = enqueue(conn, self.h, {"order": 1})
                1 / 0
        self.assertIsNone(self.job(rolled_back), "rolled back with the caller's transaction")
        with conn.transaction():
            committed = enqueue(conn, self.h, {"order": 2})
            with psycopg.connect("", autocommit=True) as other:      # not visible before the commit
                self.assertIsNone(other.execute("SELECT 1 FROM vq.job WHERE execution_id = %s",
                                                [committed]).fetchone())
        self.assertEqual(self.job(committed)[:2], (self.h, {"order": 2}))
        # a cursor works too
        with conn.cursor() as cur:
            self.assertEqual(self.job(enqueue(cur, self.h, [1, "two"]))[1], [1, "two"])

    def test_options(self) -> None:
        conn = self.db.conn
        at = datetime(2999, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
        q = self.db.queue_of(self.h)
        i = enqueue(conn, self.h, {"a": [1, None, "é"]}, run_at=at, job_id="opt-1", queue=q, priority=7,
                    max_attempts=2, metadata={"trace": "t-1"})
        handler, payload, queue, priority, max_attempts, job_id, metadata, state, scheduled = self.job(i)
        self.assertEqual((handler, payload, queue, priority, max_attempts, job_id, state),
                         (self.h, {"a": [1, None, "é"]}, q, 7, 2, "opt-1", "ENQUEUED"))
        self.assertEqual(metadata["trace"], "t-1")
        self.assertEqual(scheduled, at)
        # the same job_id of the same role: the same job
        self.assertEqual(enqueue(conn, self.h, {"other": True}, job_id="opt-1"), i)
        # a delay
        before = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        d = enqueue(conn, self.h, None, run_at=timedelta(hours=2))
        delay = (self.job(d)[8] - before).total_seconds()
        self.assertTrue(7190 < delay < 7300, delay)
        # a naive datetime is local time
        local = datetime.now() + timedelta(days=1)
        n = enqueue(conn, self.h, None, run_at=local)
        self.assertAlmostEqual(self.job(n)[8].timestamp(), local.timestamp(), places=3)
        with self.assertRaises(TypeError):
            enqueue(conn, self.h, None, run_at=60)     # type: ignore[arg-type]

    def test_enqueue_many(self) -> None:
        with self.db.conn.transaction():
            ids = enqueue_many(self.db.conn, self.h, [{"n": k} for k in range(5)], priority=3,
                               job_ids=[f"many-{k}" for k in range(5)])
        self.assertEqual(len(ids), 5)
        self.assertEqual([self.job(i)[1] for i in ids], [{"n": k} for k in range(5)])
        self.assertEqual([self.job(i)[5] for i in ids], [f"many-{k}" for k in range(5)])
        self.assertEqual({self.job(i)[3] for i in ids}, {3})

    def test_async(self) -> None:
        async def go() -> tuple:
            async with await psycopg.AsyncConnection.connect("", autocommit=True) as conn:
                try:
                    async with conn.transaction():
                        await enqueue_async(conn, self.h, {"async": "rolled back"})
                        raise RuntimeError("roll back")
                except RuntimeError:
                    pass
                async with conn.transaction():
                    a = await enqueue(conn, self.h, {"async": 1})        # (detects the async connection)
                    b = await enqueue_async(conn, self.h, {"async": 2}, job_id="async-2")
                    many = await enqueue_many_async(conn, self.h, [{"async": 3}, {"async": 4}])
                return a, b, many
        a, b, many = asyncio.run(go())
        self.assertEqual([self.job(i)[1] for i in (a, b, *many)], [{"async": k} for k in (1, 2, 3, 4)])
        self.assertEqual(self.db.one("SELECT count(*) FROM vq.job WHERE handler = %s"
                                     " AND payload = '{\"async\": \"rolled back\"}'", [self.h]), 0)


if __name__ == "__main__":
    unittest.main()

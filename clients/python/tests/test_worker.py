"""Worker and AsyncWorker against a real server: completion, failures, retries, dead letters, logs
and progress, cancellation, lease expiry, graceful stop. Every test runs for both workers."""
from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any, Dict, List

import vq_job
from vq_job import Retry, enqueue, enqueue_many

from _support import AsyncFlavor, SyncFlavor, WorkerTestCase, wait_until


class WorkerBehaviour:
    """The tests; mixed into a WorkerTestCase per flavor below."""

    def test_completes_jobs_with_their_attributes(self: Any) -> None:
        h = self.db.handler()
        seen: List[Dict[str, Any]] = []

        def handle(payload: Any, job: vq_job.Job) -> None:
            seen.append(dict(payload=payload, id=job.id, attempt=job.attempt, handler=job.handler,
                             job_id=job.job_id, queue=job.queue, priority=job.priority,
                             max_attempts=job.max_attempts, cancelled=job.cancelled,
                             scheduled_at=job.scheduled_at, lease_until=job.lease_until))

        r = self.start({h: self.flavor.handler(handle)})
        ids = [enqueue(self.db.conn, h, {"n": 1}),
               enqueue(self.db.conn, h, {"n": 2, "deep": [1, {"x": None}]}, job_id="key-2", priority=5),
               enqueue(self.db.conn, h, None)]
        # (the worker waits for notifications, polling only every 30 s: LISTEN woke it)
        wait_until(lambda: self.db.states(h) == {"COMPLETED": 3}, 10, "3 jobs COMPLETED")
        by_id = {s["id"]: s for s in seen}
        self.assertEqual(set(ids), set(by_id))
        self.assertEqual(len(seen), 3, "each handler ran once")
        self.assertEqual(by_id[ids[1]]["payload"], {"n": 2, "deep": [1, {"x": None}]})
        self.assertEqual(by_id[ids[1]]["job_id"], "key-2")
        self.assertEqual(by_id[ids[1]]["priority"], 5)
        self.assertEqual(by_id[ids[0]]["payload"], {"n": 1})
        for s in seen:
            self.assertEqual((s["attempt"], s["handler"], s["queue"], s["max_attempts"], s["cancelled"]),
                             (0, h, self.db.queue_of(h), 3, False))
            self.assertLess(s["scheduled_at"], s["lease_until"])
        for i in ids:
            self.assertEqual(self.db.state(i), ("COMPLETED", 0, None))
            self.assertEqual(self.db.transitions(i), ["CLAIMED:0", "COMPLETED:0"])
        r.stop()
        self.assertEqual((r.worker.stats["taken"], r.worker.stats["completed"], r.worker.stats["failed"]), (3, 3, 0))

    def test_failure_is_retried_with_backoff_then_completes(self: Any) -> None:
        h = self.db.handler(max_attempts=3, backoff_ms=300)

        def handle(payload: Any, job: vq_job.Job) -> None:
            if job.attempt < 2:
                raise ValueError(f"boom {job.attempt}")

        self.start({h: self.flavor.handler(handle)})
        i = enqueue(self.db.conn, h, {})
        wait_until(lambda: self.db.state(i)[0] == "COMPLETED", 15, "the job COMPLETED")
        self.assertEqual(self.db.state(i), ("COMPLETED", 2, None))
        rows = self.db.all("SELECT kind, attempt_number, from_state::text, to_state::text, error, at"
                           " FROM vq.job_transition WHERE execution_id = %s ORDER BY id", [i])
        self.assertEqual([f"{k}:{a}:{f}>{t}" for k, a, f, t, _, _ in rows],
                         ["CLAIMED:0:ENQUEUED>RUNNING", "FAILED:0:RUNNING>ENQUEUED",
                          "CLAIMED:1:ENQUEUED>RUNNING", "FAILED:1:RUNNING>ENQUEUED",
                          "CLAIMED:2:ENQUEUED>RUNNING", "COMPLETED:2:RUNNING>COMPLETED"])
        self.assertEqual([r[4] for r in rows if r[0] == "FAILED"], ["boom 0", "boom 1"])
        for failed, claimed in ((rows[1], rows[2]), (rows[3], rows[4])):
            waited = (claimed[5] - failed[5]).total_seconds()
            self.assertGreaterEqual(waited, 0.29, f"retried after the queue's 300 ms backoff, not {waited:.3f}s")
        # the traceback of each failure is in the job's log, as an ERROR line of its attempt
        logs = self.db.all("SELECT attempt_number, level, message FROM vq.job_log WHERE execution_id = %s"
                           " ORDER BY id", [i])
        self.assertEqual([(a, lvl) for a, lvl, _ in logs], [(0, "ERROR"), (1, "ERROR")])
        for n, (_, _, msg) in enumerate(logs):
            self.assertTrue(msg.startswith("Traceback (most recent call last):"), msg)
            self.assertIn(f"ValueError: boom {n}", msg)
            self.assertIn("in handle", msg)

    def test_dead_letter_after_max_attempts(self: Any) -> None:
        h = self.db.handler(max_attempts=2, backoff_ms=100)

        def handle(payload: Any, job: vq_job.Job) -> None:
            raise RuntimeError(f"no luck for {payload['who']}")

        r = self.start({h: self.flavor.handler(handle)})
        i = enqueue(self.db.conn, h, {"who": "bob"})
        wait_until(lambda: self.db.state(i)[0] == "DEAD_LETTER", 15, "the job DEAD_LETTER")
        self.assertEqual(self.db.state(i), ("DEAD_LETTER", 1, "no luck for bob"))
        self.assertEqual(self.db.all("SELECT kind, attempt_number, to_state::text, error FROM vq.job_transition"
                                     " WHERE execution_id = %s ORDER BY id", [i]),
                         [("CLAIMED", 0, "RUNNING", None), ("FAILED", 0, "ENQUEUED", "no luck for bob"),
                          ("CLAIMED", 1, "RUNNING", None), ("FAILED", 1, "DEAD_LETTER", "no luck for bob")])
        self.assertEqual(self.db.one("SELECT count(*) FROM vq.dead_letters WHERE execution_id = %s", [i]), 1)
        r.stop()
        self.assertEqual(r.worker.stats["failed"], 2)

    def test_an_exception_without_text_fails_with_its_class_name(self: Any) -> None:
        h = self.db.handler(max_attempts=1)

        class QuotaExceeded(Exception):
            pass

        def handle(payload: Any, job: vq_job.Job) -> None:
            raise QuotaExceeded()

        self.start({h: self.flavor.handler(handle)})
        i = enqueue(self.db.conn, h, {})
        wait_until(lambda: self.db.state(i)[0] == "DEAD_LETTER", 10, "the job DEAD_LETTER")
        self.assertEqual(self.db.state(i), ("DEAD_LETTER", 0, "QuotaExceeded"))

    def test_retry_at_a_chosen_time(self: Any) -> None:
        h = self.db.handler(max_attempts=3, backoff_ms=60000)   # (the backoff would be a minute)

        raised: List[datetime] = []

        def handle(payload: Any, job: vq_job.Job) -> None:
            if job.attempt == 0:
                raised.append(datetime.now(timezone.utc))
                raise Retry("rate limited", delay=0.5)

        self.start({h: self.flavor.handler(handle)})
        i = enqueue(self.db.conn, h, {})
        wait_until(lambda: self.db.state(i)[0] == "COMPLETED", 10, "the job COMPLETED")
        rows = self.db.all("SELECT kind, attempt_number, error, at FROM vq.job_transition"
                           " WHERE execution_id = %s ORDER BY id", [i])
        self.assertEqual([(k, a, e) for k, a, e, _ in rows],
                         [("CLAIMED", 0, None), ("FAILED", 0, "rate limited"), ("CLAIMED", 1, None),
                          ("COMPLETED", 1, None)])
        waited = (rows[2][3] - raised[0]).total_seconds()
        self.assertGreaterEqual(waited, 0.5)
        self.assertLess(waited, 30)

    def test_log_lines_and_progress(self: Any) -> None:
        h = self.db.handler()

        def handle(payload: Any, job: vq_job.Job) -> None:
            job.log("starting", fields={"items": 10})
            job.progress(total=10)
            job.progress(succeeded=7, failed=1)
            job.log("careful", level="warn")
            job.log("done")

        self.start({h: self.flavor.handler(handle)})
        i = enqueue(self.db.conn, h, {})
        wait_until(lambda: self.db.state(i)[0] == "COMPLETED", 10, "the job COMPLETED")
        self.assertEqual(self.db.all("SELECT attempt_number, level, message, fields FROM vq.job_log"
                                     " WHERE execution_id = %s ORDER BY id", [i]),
                         [(0, "INFO", "starting", {"items": 10}), (0, "WARN", "careful", None),
                          (0, "INFO", "done", None)])
        self.assertEqual(self.db.one("SELECT (progress_total, progress_succeeded, progress_failed)::text"
                                     " FROM vq.job WHERE execution_id = %s", [i]), "(10,7,1)")

    def test_cancel_a_running_job(self: Any) -> None:
        self._cancel_running(listen=True)

    def test_cancel_a_running_job_without_listen(self: Any) -> None:
        # (no notification: the worker learns it when it extends the job's lease)
        self._cancel_running(listen=False, poll_interval=0.3)

    def _cancel_running(self: Any, **options: Any) -> None:
        h = self.db.handler()
        started = threading.Event()
        saw: Dict[str, Any] = {}

        def handle(payload: Any, job: vq_job.Job) -> None:
            started.set()
            t0 = time.monotonic()
            ev = job.cancel_event
            assert isinstance(ev, threading.Event)
            saw["set"] = ev.wait(20)
            saw["waited"] = time.monotonic() - t0
            saw["cancelled"] = job.cancelled

        async def handle_async(payload: Any, job: vq_job.Job) -> None:
            import asyncio
            started.set()
            t0 = time.monotonic()
            try:
                await asyncio.wait_for(job.cancel_event.wait(), 20)   # type: ignore[union-attr]
                saw["set"] = True
            except asyncio.TimeoutError:
                saw["set"] = False
            saw["waited"] = time.monotonic() - t0
            saw["cancelled"] = job.cancelled

        fn = handle_async if isinstance(self.flavor, AsyncFlavor) else handle
        self.start({h: fn}, **options)
        i = enqueue(self.db.conn, h, {})
        wait_until(started.is_set, 10, "the handler to start")
        self.assertEqual(self.db.one("SELECT vq_cancel(%s)", [i]) is not None, True)
        wait_until(lambda: self.db.state(i)[0] == "CANCELLED", 10, "the job CANCELLED")
        self.assertEqual(saw["set"], True)
        self.assertEqual(saw["cancelled"], True)
        self.assertLess(saw["waited"], 10)
        state, attempt, error = self.db.state(i)
        self.assertEqual((state, attempt), ("CANCELLED", 0))
        self.assertIn("cancelled", error)

    def test_lease_expiry_of_a_stuck_handler(self: Any) -> None:
        h = self.db.handler(max_attempts=3, backoff_ms=100)
        gate = threading.Event()
        first: Dict[str, Any] = {}

        def handle(payload: Any, job: vq_job.Job) -> None:
            if job.attempt == 0:
                first["job"] = job
                gate.wait(30)         # stuck: past job_timeout its lease is no longer extended

        r = self.start({h: self.flavor.blocking(handle)}, lease=1, timeout=1, concurrency=2)
        i = enqueue(self.db.conn, h, {})
        # the server abandons the attempt once the lease expires (attempt consumed) and retries it
        wait_until(lambda: self.db.state(i)[0] == "COMPLETED", 20, "attempt 2 COMPLETED")
        self.assertEqual(self.db.state(i)[:2], ("COMPLETED", 1))
        self.assertEqual(self.db.transitions(i), ["CLAIMED:0", "ABANDONED:0", "CLAIMED:1", "COMPLETED:1"])
        stuck = first["job"]
        self.assertEqual((stuck.cancel_reason, stuck.cancelled), ("timeout", True))
        with self.assertLogs("vq_job", logging.WARNING) as logs:
            gate.set()           # the stuck handler returns at last: its reply is ignored
            wait_until(lambda: r.worker.stats["ignored"] == 1, 10, "the late reply ignored")
        self.assertTrue(any("was ignored" in m and i in m for m in logs.output), logs.output)
        self.assertEqual(self.db.state(i)[:2], ("COMPLETED", 1))
        r.stop()
        self.assertEqual((r.worker.stats["completed"], r.worker.stats["ignored"]), (1, 1))

    def test_graceful_stop_finishes_running_jobs_and_gives_back_the_others(self: Any) -> None:
        h = self.db.handler()
        gate = threading.Event()
        holder: Dict[str, Any] = {}
        ran: List[str] = []

        def handle(payload: Any, job: vq_job.Job) -> None:
            ran.append(job.id)
            if len(ran) == 1:
                holder["worker"].stop()            # the first job asks the worker to stop ...
                gate.wait(30)                      # ... and is still running when it does

        async def handle_async(payload: Any, job: vq_job.Job) -> None:
            import asyncio
            ran.append(job.id)
            if len(ran) == 1:
                holder["worker"].stop()
                await asyncio.to_thread(gate.wait, 30)

        fn = handle_async if isinstance(self.flavor, AsyncFlavor) else handle
        r = self.start({h: fn}, concurrency=4)
        holder["worker"] = r.worker
        r.worker._stall = 60       # (Worker: no second thread starts the waiting jobs meanwhile)
        with self.db.conn.transaction():
            ids = enqueue_many(self.db.conn, h, [{"n": n} for n in range(4)])
        scheduled = dict(self.db.all("SELECT execution_id::text, scheduled_at FROM vq.job WHERE handler = %s", [h]))
        wait_until(lambda: len(ran) == 1, 10, "the first job to start")
        wait_until(lambda: r.worker._stopping, 5, "stop() called")
        self.assertTrue(r.thread.is_alive(), "run() waits for the running handler")
        self.assertEqual(self.db.state(ran[0])[0], "RUNNING")
        gate.set()
        r.join(15)
        self.assertEqual(ran[:1], ran, "no job started after stop()")
        self.assertEqual(self.db.state(ran[0]), ("COMPLETED", 0, None))
        others = [i for i in ids if i != ran[0]]
        for i in others:
            # given back untouched: no attempt consumed, same place in line, nothing recorded
            self.assertEqual(self.db.state(i), ("ENQUEUED", 0, None))
            self.assertEqual(self.db.transitions(i), [])
            self.assertEqual(self.db.one("SELECT scheduled_at FROM vq.job WHERE execution_id = %s", [i]), scheduled[i])
        self.assertEqual((r.worker.stats["completed"], r.worker.stats["released"]), (1, 3))
        # another worker runs them, at attempt 0
        self.start({h: self.flavor.handler(lambda p, j: None)})
        wait_until(lambda: self.db.states(h) == {"COMPLETED": 4}, 10, "every job COMPLETED")
        for i in others:
            self.assertEqual(self.db.state(i), ("COMPLETED", 0, None))
            self.assertEqual(self.db.transitions(i), ["CLAIMED:0", "COMPLETED:0"])

    def test_stop_when_idle_and_poll_without_listen(self: Any) -> None:
        h = self.db.handler()
        done: List[int] = []
        r = self.start({h: self.flavor.handler(lambda p, j: done.append(p["n"]))}, listen=False,
                       poll_interval=0.2)
        for n in range(3):
            enqueue(self.db.conn, h, {"n": n})
        wait_until(lambda: len(done) == 3, 10, "3 jobs run by polling")
        wait_until(lambda: self.db.states(h) == {"COMPLETED": 3}, 10, "3 jobs COMPLETED")
        t0 = time.monotonic()
        r.stop(10)
        self.assertLess(time.monotonic() - t0, 5, "an idle worker stops at once")

    def test_a_batch_larger_than_one_take(self: Any) -> None:
        h = self.db.handler(capacity=10000)
        n = 3000
        count = [0]

        def handle(payload: Any, job: vq_job.Job) -> None:
            count[0] += 1

        r = self.start({h: self.flavor.handler(handle)}, concurrency=50, batch_size=50)
        with self.db.conn.transaction():
            enqueue_many(self.db.conn, h, [{} for _ in range(n)])
        wait_until(lambda: self.db.states(h) == {"COMPLETED": n}, 60, f"{n} jobs COMPLETED")
        r.stop()
        self.assertEqual((count[0], r.worker.stats["taken"], r.worker.stats["completed"]), (n, n, n))


class SyncWorkerTest(WorkerBehaviour, WorkerTestCase):
    flavor = SyncFlavor()


class AsyncWorkerTest(WorkerBehaviour, WorkerTestCase):
    flavor = AsyncFlavor()


del WorkerBehaviour

"""Who may take: a role without the consumer grant takes nothing of another role's jobs."""
from __future__ import annotations

from typing import Any, List

from vq_job import enqueue

from _support import AsyncFlavor, SyncFlavor, WorkerTestCase, connect, unique, wait_until


class PrivilegeBehaviour:
    def test_a_role_without_the_consumer_grant_takes_nothing(self: Any) -> None:
        h = self.db.handler()
        producer, outsider = unique("pyt_producer"), unique("pyt_outsider")
        for role in (producer, outsider):
            self.db.conn.execute(f'CREATE ROLE "{role}" LOGIN')
        self.addCleanup(self.drop_roles, producer, outsider)
        self.db.conn.execute("SELECT vq_grant_producer(%s, %s)", [h, producer])
        with connect(f"user={producer}") as conn:
            ids = [enqueue(conn, h, {"n": n}) for n in range(3)]
        self.assertEqual(self.db.one("SELECT count(*) FROM vq.job WHERE handler = %s AND enqueued_by = %s::regrole",
                                     [h, producer]), 3)
        ran: List[str] = []
        r = self.start({h: self.flavor.handler(lambda p, j: ran.append(j.id))}, conninfo=f"user={outsider}",
                       poll_interval=0.2)
        # it takes (nothing) again and again
        wait_until(lambda: r.worker.stats["takes"] >= 5, 10, "5 takes by the outsider")
        self.assertEqual(r.worker.stats["taken"], 0)
        self.assertEqual(ran, [])
        for i in ids:
            self.assertEqual(self.db.state(i), ("ENQUEUED", 0, None))
            self.assertEqual(self.db.transitions(i), [])
        # with the grant, the same worker takes them
        self.db.conn.execute("SELECT vq_grant_consumer(%s, %s)", [h, outsider])
        wait_until(lambda: self.db.states(h) == {"COMPLETED": 3}, 10, "3 jobs COMPLETED by the outsider")
        self.assertEqual(sorted(ran), sorted(ids))
        r.stop()

    def drop_roles(self: Any, *roles: str) -> None:
        with connect() as conn:
            for role in roles:
                conn.execute("DELETE FROM vq.consumer_grant WHERE grantee::text = %s", [role])
                conn.execute("DELETE FROM vq.producer_grant WHERE grantee::text = %s", [role])
                conn.execute(f'DROP OWNED BY "{role}" CASCADE')
                conn.execute(f'DROP ROLE "{role}"')


class SyncPrivilegeTest(PrivilegeBehaviour, WorkerTestCase):
    flavor = SyncFlavor()


class AsyncPrivilegeTest(PrivilegeBehaviour, WorkerTestCase):
    flavor = AsyncFlavor()


del PrivilegeBehaviour

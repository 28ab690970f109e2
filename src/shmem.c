/*
 * shmem.c: vq_job's shared memory. Requested at preload time, initialised once
 * by the postmaster. Workers claim a slot for their database and publish their
 * latch there; a committing enqueuer finds the slot by database OID and sets
 * the latch (or lowers the slot's next-due time), so a worker wakes at commit
 * without any NOTIFY in the enqueuing transaction.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "shmem.h"
#include "vq_job.h"

VqSharedState *VqShared = NULL;

#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Bytes of shared memory vq_job needs. */
static Size
VqShmemSize(void)
{
	return add_size(offsetof(VqSharedState, slots),
					mul_size(vq_max_databases, sizeof(VqDatabaseSlot)));
}

/* Ask for our shared memory and LWLock. */
static void
VqShmemRequest(void)
{
#if PG_VERSION_NUM >= 150000
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
#endif
	RequestAddinShmemSpace(VqShmemSize());
	RequestNamedLWLockTranche("vq_job", 1);
}

/* Create or attach to the shared state. */
static void
VqShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	VqShared = ShmemInitStruct("vq_job", VqShmemSize(), &found);
	if (!found)
	{
		VqShared->lock = &(GetNamedLWLockTranche("vq_job"))->lock;
		VqShared->launcher_pid = 0;
		VqShared->launcher_latch = NULL;
		VqShared->nslots = vq_max_databases;
		for (int i = 0; i < vq_max_databases; i++)
		{
			VqDatabaseSlot *slot = &VqShared->slots[i];

			memset(slot, 0, sizeof(VqDatabaseSlot));
			slot->dboid = InvalidOid;
			slot->state = VQ_DB_FREE;
			pg_atomic_init_u64(&slot->wake_count, 0);
			pg_atomic_init_u64(&slot->relay_wake_count, 0);
			pg_atomic_init_u64(&slot->next_due, (uint64) VQ_NO_NEXT_DUE);
			pg_atomic_init_u32(&slot->due_queue_hint, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Register the shared-memory hooks (from _PG_init). */
void
VqShmemInit(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = VqShmemRequest;
#else
	VqShmemRequest();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = VqShmemStartup;
}

/*
 * Set the latch of one sleeping executor of the slot (caller holds the lock).
 * One is enough: the counters it reads tell it what changed, an executor that
 * claims a full batch wakes the next one, and a busy executor reads the
 * counters before it sleeps again. (An executor announces it sleeps, issues a
 * barrier, then rereads the counters; the waker bumps a counter, an atomic
 * with a full barrier, then looks for sleepers: one of the two sees the other.)
 */
static void
WakeOneExecutor(VqDatabaseSlot *slot)
{
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &slot->executors[i];

		if (e->pid != 0 && e->latch != NULL && e->sleeping)
		{
			SetLatch(e->latch);
			return;
		}
	}
}

/* A queue name's hash for due_queue_hint (never 0). */
uint32
VqQueueHash(const char *queue)
{
	uint32		h = hash_bytes((const unsigned char *) queue, strlen(queue));

	return h == 0 ? 1 : h;
}

/* The slot of a database, or NULL (caller holds VqShared->lock). */
VqDatabaseSlot *
VqFindDatabaseSlot(Oid dboid)
{
	for (int i = 0; i < VqShared->nslots; i++)
		if (VqShared->slots[i].dboid == dboid)
			return &VqShared->slots[i];
	return NULL;
}

/*
 * Tell the executors of a database that work was committed. Due work bumps the
 * wake counter; future work lowers next_due to the earliest instant known.
 * Either way a sleeping executor's latch is set so it re-plans its sleep. A
 * database without running executors has nothing to wake: they poll on start.
 */
void
VqWakeDatabase(Oid dboid, bool due_now, TimestampTz next_due, uint32 queue_hint)
{
	VqDatabaseSlot *slot;

	if (VqShared == NULL)
		return;

	LWLockAcquire(VqShared->lock, LW_SHARED);
	slot = VqFindDatabaseSlot(dboid);
	if (slot != NULL)
	{
		if (due_now)
		{
			if (queue_hint != 0)
				pg_atomic_write_u32(&slot->due_queue_hint, queue_hint);
			pg_atomic_fetch_add_u64(&slot->wake_count, 1);
		}
		else
		{
			uint64		cur = pg_atomic_read_u64(&slot->next_due);
			TimestampTz now = GetCurrentTimestamp();

			/* lower next_due to ours unless it is already earlier (and still ahead) */
			while (((int64) cur > next_due || (int64) cur <= now) &&
				   !pg_atomic_compare_exchange_u64(&slot->next_due, &cur, (uint64) next_due))
				;
		}
		WakeOneExecutor(slot);
	}
	LWLockRelease(VqShared->lock);
}

/* Tell the executors of a database that outbox rows due now were committed. */
void
VqWakeRelay(Oid dboid)
{
	VqDatabaseSlot *slot;

	if (VqShared == NULL)
		return;
	LWLockAcquire(VqShared->lock, LW_SHARED);
	slot = VqFindDatabaseSlot(dboid);
	if (slot != NULL)
	{
		pg_atomic_fetch_add_u64(&slot->relay_wake_count, 1);
		WakeOneExecutor(slot);
	}
	LWLockRelease(VqShared->lock);
}

/* Wake the launcher (e.g. after CREATE EXTENSION commits in this database). */
void
VqWakeLauncher(void)
{
	if (VqShared == NULL)
		return;
	LWLockAcquire(VqShared->lock, LW_SHARED);
	if (VqShared->launcher_latch != NULL)
		SetLatch(VqShared->launcher_latch);
	LWLockRelease(VqShared->lock);
}

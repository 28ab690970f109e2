/*
 * shmem.c: vq_job's shared memory. Requested at preload time, initialised once
 * by the postmaster: the launcher's identity, and one slot per served database
 * with a lock of its own. Who writes which field is written down in shmem.h.
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "main/guc.h"
#include "main/shmem.h"

VqSharedState *VqShared = NULL;

Oid			VqMyDatabase = InvalidOid;
int			VqMyExecutorIndex = 0;
VqDatabaseSlot *VqMyDatabaseSlot = NULL;
VqExecutorSlot *VqMyExecutorSlot = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* Bytes of shared memory vq_job needs. */
static Size
VqShmemSize(void)
{
	return add_size(offsetof(VqSharedState, slots),
					mul_size(vq_max_databases, sizeof(VqDatabaseSlot)));
}

/* Ask for our shared memory and LWLocks: one for slot assignment, one per database slot. */
static void
VqShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(VqShmemSize());
	RequestNamedLWLockTranche("vq_job", 1 + vq_max_databases);
}

/* Set up one database slot (free). */
static void
InitDatabaseSlot(VqDatabaseSlot *slot, LWLock *lock)
{
	memset(slot, 0, sizeof(VqDatabaseSlot));
	slot->lock = lock;
	slot->dboid = InvalidOid;
	slot->state = VQ_DB_FREE;
	pg_atomic_init_u64(&slot->wake_count, 0);
	pg_atomic_init_u64(&slot->relay_wake_count, 0);
	pg_atomic_init_u64(&slot->callback_wake_count, 0);
	pg_atomic_init_u64(&slot->next_due, (uint64) VQ_NO_NEXT_DUE);
	pg_atomic_init_u32(&slot->due_queue_hint, 0);
	pg_atomic_init_u64(&slot->extension_generation, 0);
	pg_atomic_init_u32(&slot->executors_wanted, 0);
	pg_atomic_init_u64(&slot->executor_exits, 0);
	pg_atomic_init_u64(&slot->lease_check_at, (uint64) VQ_NO_NEXT_DUE);
	pg_atomic_init_u64(&slot->take_waiting, 0);
	pg_atomic_init_u64(&slot->take_due, 0);
	for (int i = 0; i < VQ_HANDLER_TIMINGS; i++)
		pg_atomic_init_u64(&slot->handler_timings[i], 0);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		pg_atomic_init_u64(&slot->cancel_seq[i], 0);
		pg_atomic_init_u32(&slot->executors[i].sleeping, 0);
		pg_atomic_init_u64(&slot->executors[i].log.seq, 0);
		pg_atomic_init_u32(&slot->executors[i].log.head, 0);
		pg_atomic_init_u32(&slot->executors[i].log.tail, 0);
	}
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
		LWLockPadded *locks = GetNamedLWLockTranche("vq_job");

		VqShared->lock = &locks[0].lock;
		VqShared->launcher_pid = 0;
		VqShared->launcher_latch = NULL;
		pg_atomic_init_u64(&VqShared->extension_changes, 0);
		pg_atomic_init_u32(&VqShared->server_read_only, 0);
		VqShared->nslots = vq_max_databases;
		for (int i = 0; i < vq_max_databases; i++)
			InitDatabaseSlot(&VqShared->slots[i], &locks[1 + i].lock);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Register the shared-memory hooks (from _PG_init). */
void
VqShmemInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = VqShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = VqShmemStartup;
}

/* A name's hash (never 0): due_queue_hint, handler_timings. */
uint32
VqNameHash(const char *name)
{
	uint32		h = hash_bytes((const unsigned char *) name, strlen(name));

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

/* Run fn on a database's slot under its lock (see shmem.h). */
bool
VqWithDatabaseSlot(Oid dboid, LWLockMode mode, void (*fn) (VqDatabaseSlot *slot, void *arg), void *arg)
{
	VqDatabaseSlot *slot;

	if (VqShared == NULL)
		return false;
	LWLockAcquire(VqShared->lock, LW_SHARED);
	slot = VqFindDatabaseSlot(dboid);
	if (slot != NULL)
	{
		LWLockAcquire(slot->lock, mode);
		fn(slot, arg);
		LWLockRelease(slot->lock);
	}
	LWLockRelease(VqShared->lock);
	return slot != NULL;
}

/* The slot a database has now, or NULL (see shmem.h). */
VqDatabaseSlot *
VqDatabaseSlotOf(Oid dboid)
{
	VqDatabaseSlot *slot;

	if (VqShared == NULL)
		return NULL;
	LWLockAcquire(VqShared->lock, LW_SHARED);
	slot = VqFindDatabaseSlot(dboid);
	LWLockRelease(VqShared->lock);
	return slot;
}

/* A consistent copy of another executor's running job; false when it runs none. */
bool
VqReadRunningJob(VqExecutorSlot *e, VqRunningJob *copy)
{
	volatile VqExecutorSlot *v = e;

	for (;;)
	{
		uint32		before = v->changecount;
		uint32		after;

		pg_read_barrier();
		memcpy(copy, (const void *) &v->job, sizeof(VqRunningJob));
		pg_read_barrier();
		after = v->changecount;
		if (before == after && (before & 1) == 0)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	return copy->running;
}

/*
 * shmem.h: vq_job's shared state: one slot per served database, through which
 * committing enqueuers wake that database's workers.
 */
#ifndef VQ_SHMEM_H
#define VQ_SHMEM_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

/* Nothing known to be due: the "next due" slot value when no future job is known. */
#define VQ_NO_NEXT_DUE PG_INT64_MAX

typedef struct VqDatabaseSlot
{
	Oid			dboid;			/* InvalidOid when the slot is free */
	int			worker_pid;		/* the database's main worker, 0 when none */
	Latch	   *worker_latch;	/* set to wake that worker */
	pg_atomic_uint64 wake_count;	/* commits that enqueued due work */
	pg_atomic_uint64 next_due;	/* earliest future scheduled_at enqueued (TimestampTz) */
} VqDatabaseSlot;

typedef struct VqSharedState
{
	LWLock	   *lock;			/* protects slot assignment and latches */
	int			launcher_pid;
	Latch	   *launcher_latch;
	int			nslots;
	VqDatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
} VqSharedState;

extern VqSharedState *VqShared;

/* Register the shared-memory request and startup hooks (from _PG_init). */
extern void VqShmemInit(void);

/* Tell the workers of a database that work was committed: due now, or at next_due. */
extern void VqWakeDatabase(Oid dboid, bool due_now, TimestampTz next_due);

#endif							/* VQ_SHMEM_H */

/*
 * shmem.h: vq_job's shared state. One slot per served database, assigned by
 * the launcher; inside it one entry per executor process. Committing
 * enqueuers wake the database's executors through it; executors publish what
 * they run (for vq.running_jobs and claim-capacity accounting) through it.
 */
#ifndef VQ_SHMEM_H
#define VQ_SHMEM_H

#include "postgres.h"

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "vq_job.h"

/* "Nothing known to be due": the next-due value when no future job is known. */
#define VQ_NO_NEXT_DUE PG_INT64_MAX

/* Most executor processes one database can have (vq.executors_per_database is capped by it). */
#define VQ_MAX_EXECUTORS 16

typedef enum VqDatabaseState
{
	VQ_DB_FREE = 0,				/* slot unused */
	VQ_DB_STARTING,				/* launcher started the first executor; extension not yet checked */
	VQ_DB_NO_EXTENSION,			/* the database has no vq_job: recheck later or when woken */
	VQ_DB_ACTIVE				/* the extension is there; executors serve it */
} VqDatabaseState;

/* One executor process and what it is doing (all fields under the database slot's lock). */
typedef struct VqExecutorSlot
{
	int			pid;			/* 0 when the entry is free */
	TimestampTz started_at;		/* with pid, identifies this incarnation in vq.job.worker_* */
	Latch	   *latch;
	bool		check_extension;	/* DROP EXTENSION committed: look at once */
	bool		sleeping;		/* waiting on its latch: the one to wake for new work */
	/* claim accounting: rows this executor has claimed and not finished, and their queue */
	char		queue[VQ_NAME_MAX + 1];
	int			claimed;
	/* the job running now, if any */
	bool		running;
	pg_uuid_t	execution_id;
	char		handler[VQ_NAME_MAX + 1];
	int			attempt_number;
	TimestampTz job_started_at;
	bool		cancel_requested;
	int64		progress_total;
	int64		progress_succeeded;
	int64		progress_failed;
} VqExecutorSlot;

typedef struct VqDatabaseSlot
{
	Oid			dboid;			/* InvalidOid when free */
	VqDatabaseState state;
	TimestampTz state_since;
	TimestampTz paused_until;	/* a utility statement needs the database alone until then */
	char		capacity_wait[VQ_NAME_MAX + 1];	/* a queue an executor found at capacity ('' = none) */
	pg_atomic_uint64 wake_count;	/* commits that enqueued due work */
	pg_atomic_uint64 relay_wake_count;	/* commits that published outbox rows due now */
	pg_atomic_uint64 next_due;	/* earliest future scheduled_at enqueued (TimestampTz) */
	pg_atomic_uint32 due_queue_hint;	/* VqQueueHash of a queue that just got due jobs (0: none) */
	VqExecutorSlot executors[VQ_MAX_EXECUTORS];
} VqDatabaseSlot;

typedef struct VqSharedState
{
	LWLock	   *lock;			/* protects slot assignment and every field not atomic */
	int			launcher_pid;
	Latch	   *launcher_latch;
	int			nslots;
	VqDatabaseSlot slots[FLEXIBLE_ARRAY_MEMBER];
} VqSharedState;

extern VqSharedState *VqShared;

/* Register the shared-memory request and startup hooks (from _PG_init). */
extern void VqShmemInit(void);

/* A queue name's hash for due_queue_hint (never 0). */
extern uint32 VqQueueHash(const char *queue);

/* The slot of a database, or NULL (caller holds VqShared->lock). */
extern VqDatabaseSlot *VqFindDatabaseSlot(Oid dboid);

/* Tell the executors of a database that work was committed: due now, or at next_due. */
extern void VqWakeDatabase(Oid dboid, bool due_now, TimestampTz next_due, uint32 queue_hint);

/* Tell the executors of a database that outbox rows due now were committed. */
extern void VqWakeRelay(Oid dboid);

/* Wake the launcher (e.g. after CREATE EXTENSION commits in this database). */
extern void VqWakeLauncher(void);

#endif							/* VQ_SHMEM_H */

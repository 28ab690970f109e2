/*
 * prepared.c: jobs enqueued (and outbox rows published) in a prepared
 * transaction.
 *
 * A transaction notes what it made due (wakeup.c) and acts on it when it
 * commits: it lowers the claim positions of the levels it gave jobs and wakes
 * the executors. A prepared transaction commits later, at COMMIT PREPARED,
 * maybe in another session: without its notes the executors would not look
 * for its jobs until something else made them (a job at a level they do not
 * know, never). So PREPARE TRANSACTION hands its notes to a shared table,
 * keyed by the GID, and wakeup.c acts on them once the utility hook has seen
 * COMMIT PREPARED succeed; ROLLBACK PREPARED drops them and wakes nothing.
 *
 * The table has room for max_prepared_transactions entries, as many as there
 * can be prepared transactions, and an entry whose transaction is no longer
 * in progress (ended in a way the hook did not see) is taken over: every
 * PREPARE TRANSACTION statement finds room. (Were one taken over wrongly, its
 * COMMIT PREPARED would only look at everything, as below.) Each writes its entry, notes or
 * not, so that a COMMIT PREPARED that finds none knows its notes were lost:
 * the transaction was prepared before the server (re)started, which empties
 * the table. Then the database's executors forget every claim position and
 * look at everything, which costs one index probe per queue and one scan of
 * each level from its start, once.
 *
 * Cost: nothing on enqueue; an LWLock and a copy of about 700 bytes at each
 * PREPARE TRANSACTION and COMMIT / ROLLBACK PREPARED, and about 900 bytes of
 * shared memory per max_prepared_transactions.
 */
#include "postgres.h"

#include "access/twophase.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/procarray.h"
#include "storage/shmem.h"

#include "state/prepared.h"

/* One prepared transaction's notes. */
typedef struct PreparedEntry
{
	bool		used;
	Oid			dboid;
	TransactionId xid;			/* no longer in progress: the entry is stale */
	char		gid[GIDSIZE];
	VqWakeNotes notes;
} PreparedEntry;

/* The shared table: written by the sessions that prepare and finish transactions, under its lock. */
typedef struct PreparedTable
{
	LWLock	   *lock;
	int			size;			/* max_prepared_transactions */
	PreparedEntry entries[FLEXIBLE_ARRAY_MEMBER];
} PreparedTable;

static PreparedTable *Prepared = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/* The GID of the PREPARE TRANSACTION this transaction runs ('' = none). */
static char preparing_gid[GIDSIZE];
static bool xact_callback_registered = false;

/* Bytes of the shared table. */
static Size
TableSize(void)
{
	return add_size(offsetof(PreparedTable, entries), mul_size(max_prepared_xacts, sizeof(PreparedEntry)));
}

/* Ask for the table and its lock. */
static void
PreparedShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(TableSize());
	RequestNamedLWLockTranche("vq_job prepared", 1);
}

/* Create or attach to the table (empty after every start: see the head of the file). */
static void
PreparedShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	Prepared = ShmemInitStruct("vq_job prepared", TableSize(), &found);
	if (!found)
	{
		memset(Prepared, 0, TableSize());
		Prepared->lock = &GetNamedLWLockTranche("vq_job prepared")[0].lock;
		Prepared->size = max_prepared_xacts;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Reserve the shared table (see prepared.h). */
void
VqPreparedInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = PreparedShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = PreparedShmemStartup;
}

/* A transaction ended without preparing (a PREPARE of an aborted transaction rolls back): no GID. */
static void
PreparedXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
		preparing_gid[0] = '\0';
}

/* The utility hook is about to run PREPARE TRANSACTION gid (see prepared.h). */
void
VqPreparedBegins(const char *gid)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(PreparedXactCallback, NULL);
		xact_callback_registered = true;
	}
	strlcpy(preparing_gid, gid, GIDSIZE);
}

/* The entry a PREPARE writes: the GID's own (stale), a free one, or a stale one; NULL if none (lock held). */
static PreparedEntry *
EntryToWrite(const char *gid)
{
	PreparedEntry *free_entry = NULL;

	for (int i = 0; i < Prepared->size; i++)
	{
		PreparedEntry *e = &Prepared->entries[i];

		if (e->used && strcmp(e->gid, gid) == 0)
			return e;
		if (!e->used && free_entry == NULL)
			free_entry = e;
	}
	if (free_entry != NULL)
		return free_entry;
	for (int i = 0; i < Prepared->size; i++)
		if (!TransactionIdIsInProgress(Prepared->entries[i].xid))
			return &Prepared->entries[i];
	return NULL;
}

/*
 * PREPARE TRANSACTION (see prepared.h). The transaction is prepared already
 * (it is too late for an error): nothing here can fail.
 */
void
VqPreparedKeepNotes(const VqWakeNotes *notes)
{
	PreparedEntry *e;

	if (preparing_gid[0] == '\0' || Prepared == NULL)
		return;					/* prepared by other means (logical replication): COMMIT PREPARED looks at everything */
	LWLockAcquire(Prepared->lock, LW_EXCLUSIVE);
	e = EntryToWrite(preparing_gid);
	if (e != NULL)
	{
		e->used = true;
		e->dboid = MyDatabaseId;
		e->xid = GetTopTransactionIdIfAny();
		strlcpy(e->gid, preparing_gid, GIDSIZE);
		e->notes = *notes;
	}
	LWLockRelease(Prepared->lock);
	preparing_gid[0] = '\0';
}

/* COMMIT PREPARED or ROLLBACK PREPARED succeeded: take its entry (see prepared.h). */
bool
VqPreparedTakeNotes(const char *gid, VqWakeNotes *notes)
{
	bool		found = false;

	if (Prepared == NULL)
		return false;
	LWLockAcquire(Prepared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < Prepared->size && !found; i++)
	{
		PreparedEntry *e = &Prepared->entries[i];

		if (e->used && e->dboid == MyDatabaseId && strcmp(e->gid, gid) == 0)
		{
			*notes = e->notes;
			e->used = false;
			found = true;
		}
	}
	LWLockRelease(Prepared->lock);
	return found;
}

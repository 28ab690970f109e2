/*
 * restore.c: the executors and a restore into their database.
 *
 * pg_restore (or psql running a pg_dump script) writes vq_job's tables one
 * after the other, each in a transaction of its own: configuration, jobs,
 * their history and logs, outbox rows, grants, listeners, and last the
 * identity sequences' positions. Executors acting in between would run
 * restored jobs before their grants, callbacks or the tables their handlers
 * write are back, relay outbox rows whose producer grants are not back yet
 * (they would fail for good), and write history with ids that the restored
 * sequences then hand out again. And the claim positions would never learn of
 * the restored jobs, which no enqueue noted: they would wait until something
 * else made the executors look (at a priority level they do not know, for
 * good).
 *
 * So a session that writes the tables holding jobs, history, logs or outbox
 * rows, by COPY (the utility hook) or by an INSERT sent by the client
 * (pg_dump --inserts; the executor hook), and that may write them, is a
 * restore: it registers in shared memory, and the database's executors
 * claim, relay, rescue and delete nothing until it ends (they still look
 * after the extension). When the last such session of the database ends,
 * the executors forget their claim positions, look up the next due time and
 * poll everything: due restored jobs start at once, delayed ones at their
 * time. The statements vq_job runs itself (through SPI) never count.
 *
 * An executor looks for a restore before each cycle, holding a share lock on
 * the database's restore lock (SET_RESTORE_LOCKTAG) until the cycle ends;
 * a session that registers then takes that lock exclusively once, so that no
 * cycle begun before the registration is still running when the restored
 * rows commit. It only polls for it (deadlocks are impossible), and gives up
 * after RESTORE_LOCK_WAIT_MS: a cycle that long is running a handler, and
 * looks again before it touches anything else.
 *
 * Cost: on every INSERT a client sends, a look at the names of its target
 * tables; nothing on vq_job's own statements (enqueue, claims); a lock taken
 * and released per executor cycle (not per job).
 */
#include "postgres.h"

#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "tcop/pquery.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/portal.h"
#include "utils/rel.h"
#include "utils/wait_event.h"

#include "state/wakeup.h"
#include "executors/restore.h"

PG_FUNCTION_INFO_V1(vq_loading_rows);

/* Sessions restoring at once (beyond: each restoring statement wakes the executors at its commit). */
#define VQ_MAX_RESTORES 32

/* How long a restore waits for the executors' cycles under way when it begins. */
#define RESTORE_LOCK_WAIT_MS 2000

/*
 * The restore lock of a database: a lock on the database object with a
 * sub-id of its own (core uses 0). Not an advisory lock: the executors
 * release those after every job (session.c).
 */
#define RESTORE_LOCK_SUBID 0x7671
#define SET_RESTORE_LOCKTAG(tag, dboid) SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, dboid, RESTORE_LOCK_SUBID)

/* A session restoring into a database (pid 0: free). */
typedef struct RestoreSession
{
	Oid			dboid;
	int			pid;
} RestoreSession;

/* Written by the restoring sessions (their own entry, under the lock); read by the executors. */
typedef struct RestoreTable
{
	LWLock	   *lock;
	pg_atomic_uint32 count;		/* sessions registered (0: nothing to look at, read without the lock) */
	RestoreSession sessions[VQ_MAX_RESTORES];
} RestoreTable;

static RestoreTable *Restores = NULL;
static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ExecutorStart_hook_type prev_executor_start = NULL;

/* This session is registered as a restore (into restored_database). */
static bool registered = false;
static bool exit_callback_set = false;
static char restored_database[NAMEDATALEN];

/* The tables whose rows executors act on or number (the configuration is read as it comes). */
static const char *const RestoredTables[] = {
	"job", "job_active", "job_finished", "job_transition_data", "job_log", "outbox"
};

/* Ask for the table and its lock. */
static void
RestoreShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sizeof(RestoreTable));
	RequestNamedLWLockTranche("vq_job restore", 1);
}

/* Create or attach to the table. */
static void
RestoreShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	Restores = ShmemInitStruct("vq_job restore", sizeof(RestoreTable), &found);
	if (!found)
	{
		memset(Restores, 0, sizeof(RestoreTable));
		Restores->lock = &GetNamedLWLockTranche("vq_job restore")[0].lock;
		pg_atomic_init_u32(&Restores->count, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Is this one of the tables above, in schema vq, of the extension vq_job? */
static bool
IsRestoredTable(Oid relid, const char *relname, Oid relnamespace)
{
	bool		named = false;
	Oid			extension;

	for (int i = 0; i < (int) lengthof(RestoredTables) && !named; i++)
		named = strcmp(relname, RestoredTables[i]) == 0;
	if (!named || relnamespace != get_namespace_oid("vq", true))
		return false;
	extension = get_extension_oid("vq_job", true);
	return OidIsValid(extension) && getExtensionOfObject(RelationRelationId, relid) == extension;
}

/* The restoring session ends: leave the table; the last one of its database wakes the executors. */
static void
RestoreEnds(int code, Datum arg)
{
	bool		others = false;

	if (!registered)
		return;
	LWLockAcquire(Restores->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_RESTORES; i++)
	{
		RestoreSession *s = &Restores->sessions[i];

		if (s->pid == MyProcPid)
		{
			s->pid = 0;
			s->dboid = InvalidOid;
			pg_atomic_fetch_sub_u32(&Restores->count, 1);
		}
		else if (s->pid != 0 && s->dboid == MyDatabaseId)
			others = true;
	}
	LWLockRelease(Restores->lock);
	registered = false;
	if (others)
		return;
	VqWakeAfterRestore(MyDatabaseId);
	ereport(LOG, (errmsg("vq_job: the restore into database \"%s\" ended; its executors resume", restored_database),
				  errhidestmt(true)));
}

/* Registered: wait (bounded) until no executor cycle begun before is running (see the head of the file). */
static void
WaitForCycles(void)
{
	LOCKTAG		tag;

	SET_RESTORE_LOCKTAG(tag, MyDatabaseId);
	for (int waited = 0; waited < RESTORE_LOCK_WAIT_MS; waited += 10)
	{
		if (LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL)
		{
			LockRelease(&tag, ExclusiveLock, true);
			return;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* This session writes restored rows: register it (once), or, with no room, have this statement's commit wake the executors. */
static void
RestoreBegins(void)
{
	if (registered || Restores == NULL)
		return;
	if (!exit_callback_set)
	{
		before_shmem_exit(RestoreEnds, (Datum) 0);
		exit_callback_set = true;
	}
	LWLockAcquire(Restores->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_RESTORES && !registered; i++)
	{
		RestoreSession *s = &Restores->sessions[i];

		if (s->pid == 0)
		{
			s->dboid = MyDatabaseId;
			s->pid = MyProcPid;
			pg_atomic_fetch_add_u32(&Restores->count, 1);
			registered = true;
		}
	}
	LWLockRelease(Restores->lock);
	if (!registered)
	{
		VqLookAtEverythingAtCommit();
		return;
	}
	WaitForCycles();
	strlcpy(restored_database, get_database_name(MyDatabaseId), NAMEDATALEN);
	ereport(LOG, (errmsg("vq_job: a restore into database \"%s\" began (this session writes vq_job's job tables); its executors wait until the session ends",
						 restored_database),
				  errhidestmt(true)));
	/* (for someone who did it by hand: a restore's script hides notices) */
	ereport(NOTICE, (errmsg("vq_job's executors leave this database alone until this session ends"),
					 errdetail("This session writes vq_job's job tables, as a restore does.")));
}

/* The utility hook is about to run this statement (see restore.h). */
void
VqRestoreNoteStatement(Node *stmt)
{
	CopyStmt   *copy = (CopyStmt *) stmt;
	Oid			relid;

	if (!IsA(stmt, CopyStmt) || !copy->is_from || copy->relation == NULL || registered)
		return;
	relid = RangeVarGetRelid(copy->relation, NoLock, true);
	/* (a role that may not write the table stops nothing: COPY will refuse it) */
	if (OidIsValid(relid) &&
		IsRestoredTable(relid, copy->relation->relname, get_rel_namespace(relid)) &&
		pg_class_aclcheck(relid, GetUserId(), ACL_INSERT) == ACLCHECK_OK)
		RestoreBegins();
}

/* Is this statement one the client sent (not one run by a function, vq_job's own included)? */
static bool
SentByClient(QueryDesc *queryDesc)
{
	CommandDest d = queryDesc->dest->mydest;

	return d == DestRemote || d == DestRemoteExecute || d == DestRemoteSimple;
}

/* ExecutorStart hook: an INSERT the client sent into the tables above (its privileges checked by now) is a restore. */
static void
VqExecutorStart(QueryDesc *queryDesc, int eflags)
{
	ListCell   *lc;

	if (prev_executor_start)
		prev_executor_start(queryDesc, eflags);
	else
		standard_ExecutorStart(queryDesc, eflags);
	if (queryDesc->operation != CMD_INSERT || registered || (eflags & EXEC_FLAG_EXPLAIN_ONLY) ||
		!SentByClient(queryDesc))
		return;
	foreach(lc, queryDesc->estate->es_opened_result_relations)
	{
		Relation	rel = ((ResultRelInfo *) lfirst(lc))->ri_RelationDesc;

		if (IsRestoredTable(RelationGetRelid(rel), RelationGetRelationName(rel), RelationGetNamespace(rel)))
			RestoreBegins();
	}
}

/* Reserve the shared table and install the executor hook (see restore.h). */
void
VqRestoreInit(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = RestoreShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = RestoreShmemStartup;
	prev_executor_start = ExecutorStart_hook;
	ExecutorStart_hook = VqExecutorStart;
}

/* Does a session restore into this database now? */
static bool
RestoreUnderWay(Oid dboid)
{
	bool		found = false;

	if (Restores == NULL || pg_atomic_read_u32(&Restores->count) == 0)
		return false;
	LWLockAcquire(Restores->lock, LW_SHARED);
	for (int i = 0; i < VQ_MAX_RESTORES && !found; i++)
		found = Restores->sessions[i].pid != 0 && Restores->sessions[i].dboid == dboid;
	LWLockRelease(Restores->lock);
	return found;
}

/*
 * An executor exits: let go of the restore lock if a cycle holds it (a
 * session lock held outside a transaction would outlive the process).
 */
static void
ReleaseCycleLock(int code, Datum arg)
{
	VqRestoreCycleEnds();
}

/* An executor's cycle begins (see restore.h). */
bool
VqRestoreCycleBegins(void)
{
	static bool exit_release_set = false;
	LOCKTAG		tag;

	if (!exit_release_set)
	{
		before_shmem_exit(ReleaseCycleLock, (Datum) 0);
		exit_release_set = true;
	}
	SET_RESTORE_LOCKTAG(tag, MyDatabaseId);
	(void) LockAcquire(&tag, ShareLock, true, false);
	if (!RestoreUnderWay(MyDatabaseId))
		return true;
	LockRelease(&tag, ShareLock, true);
	return false;
}

/* An executor's cycle ended (see restore.h); a transaction that aborted released the lock already. */
void
VqRestoreCycleEnds(void)
{
	LOCKTAG		tag;

	SET_RESTORE_LOCKTAG(tag, MyDatabaseId);
	if (LockHeldByMe(&tag, ShareLock))
		LockRelease(&tag, ShareLock, true);
}

/*
 * vq.loading_rows(): is the statement the client sent a COPY or an INSERT
 * (what a restore runs), rather than a call of a vq_job function?
 */
Datum
vq_loading_rows(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(ActivePortal != NULL &&
				   (ActivePortal->commandTag == CMDTAG_COPY || ActivePortal->commandTag == CMDTAG_INSERT));
}

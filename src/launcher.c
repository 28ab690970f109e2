/*
 * launcher.c: the launcher background worker and the database guard.
 *
 * The launcher is a static background worker connected to no database (it
 * reads only the shared catalog pg_database). It assigns each served database
 * a shared-memory slot and keeps its executors (executor.c) running:
 *
 *   FREE --launcher starts executor 0--> STARTING
 *   STARTING --executor 0 finds the extension--> ACTIVE (launcher starts the rest)
 *   STARTING --no extension--> NO_EXTENSION (rechecked every 10 s, or at once
 *                                when CREATE EXTENSION vq_job commits there)
 *   ACTIVE --DROP EXTENSION: the executors notice and exit--> NO_EXTENSION
 *
 * While the server is in recovery (a hot standby) the launcher starts nothing;
 * after promotion it serves as usual. An executor that exits is restarted
 * (at most once a second per executor), which also restarts everything after
 * a crash: on start, executor 0 rescues jobs left RUNNING by dead processes.
 *
 * Some utility statements need a database to themselves (DROP DATABASE,
 * CREATE DATABASE ... TEMPLATE, ALTER DATABASE RENAME / SET TABLESPACE). The
 * ProcessUtility hook stops that database's executors first and pauses their
 * restart briefly, so vq_job never blocks them.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"
#include "utils/wait_event.h"

#include "launcher.h"
#include "shmem.h"
#include "vq_job.h"

PGDLLEXPORT void vq_launcher_main(Datum arg);

PG_FUNCTION_INFO_V1(vq_launcher_wakeup);

/* How long a database without the extension waits before it is checked again. */
#define NO_EXTENSION_RECHECK_MS 10000
/* Least time between two starts of the same executor. */
#define RESTART_INTERVAL_MS 1000
/* How long a utility statement waits for a database's executors to exit. */
#define STOP_WAIT_MS 10000

/* Launcher-local bookkeeping per database: the handles of its executors. */
typedef struct LauncherDatabase
{
	Oid			dboid;			/* hash key */
	char		name[NAMEDATALEN];
	bool		seen;			/* still in pg_database at the last scan */
	BackgroundWorkerHandle *handles[VQ_MAX_EXECUTORS];
	TimestampTz last_start[VQ_MAX_EXECUTORS];
} LauncherDatabase;

static HTAB *launcher_databases = NULL;

static void ResumeDatabaseExecutors(Oid dboid);
static ProcessUtility_hook_type prev_process_utility = NULL;
static bool wake_launcher_at_commit = false;
static bool wake_executors_at_commit = false;
static bool xact_callback_registered = false;
static Oid	resume_at_commit = InvalidOid;	/* database whose executors may start again */
static bool wake_launcher_at_end = false;

/* Is this database in vq.databases (or is that list empty)? */
bool
VqDatabaseSelected(const char *name)
{
	char	   *list;
	List	   *names;
	ListCell   *lc;
	bool		selected = false;

	if (vq_databases == NULL || vq_databases[0] == '\0')
		return true;
	list = pstrdup(vq_databases);
	if (!SplitIdentifierString(list, ',', &names))
	{
		ereport(WARNING, (errmsg("vq.databases is not a valid list of database names")));
		return false;
	}
	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), name) == 0)
			selected = true;
	return selected;
}

/* Mark every database of pg_database that accepts connections as seen (and add new ones). */
static void
ScanDatabases(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
		db->seen = false;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tup);
		bool		found;

		if (!form->datallowconn || form->datistemplate || !VqDatabaseSelected(NameStr(form->datname)))
			continue;
		db = hash_search(launcher_databases, &form->oid, HASH_ENTER, &found);
		if (!found)
		{
			memset(db->handles, 0, sizeof(db->handles));
			memset(db->last_start, 0, sizeof(db->last_start));
		}
		strlcpy(db->name, NameStr(form->datname), NAMEDATALEN);
		db->seen = true;
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
}

/* Is the executor behind this handle running (or about to)? */
static bool
ExecutorAlive(BackgroundWorkerHandle *handle)
{
	pid_t		pid;

	if (handle == NULL)
		return false;
	return GetBackgroundWorkerPid(handle, &pid) != BGWH_STOPPED;
}

/* Start executor number index of a database. */
static void
StartExecutor(LauncherDatabase *db, int index)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;	/* the launcher restarts it */
	strlcpy(worker.bgw_library_name, "vq_job", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "vq_executor_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "vq_job executor %d for database %s", index, db->name);
	strlcpy(worker.bgw_type, "vq_job executor", BGW_MAXLEN);
	worker.bgw_main_arg = Int64GetDatum(((int64) db->dboid << 16) | index);
	worker.bgw_notify_pid = MyProcPid;

	if (db->handles[index] != NULL)
		pfree(db->handles[index]);
	db->handles[index] = NULL;
	db->last_start[index] = GetCurrentTimestamp();
	if (!RegisterDynamicBackgroundWorker(&worker, &db->handles[index]))
		ereport(WARNING,
				(errmsg("vq_job: could not start an executor for database \"%s\"", db->name),
				 errhint("Raise max_worker_processes.")));
}

/*
 * Keep one database's executors running as its slot's state asks. Returns the
 * time (ms) until this database next needs attention, or -1 for "no deadline".
 */
static long
ServeDatabase(LauncherDatabase *db)
{
	VqDatabaseSlot *slot;
	VqDatabaseState state;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz paused_until;
	TimestampTz state_since;
	int			wanted;
	long		next = -1;

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	slot = VqFindDatabaseSlot(db->dboid);
	if (slot == NULL)
	{
		slot = VqFindDatabaseSlot(InvalidOid);
		if (slot == NULL)
		{
			LWLockRelease(VqShared->lock);
			ereport(WARNING,
					(errmsg("vq_job: no free slot for database \"%s\"", db->name),
					 errhint("Raise vq.max_databases.")));
			return -1;
		}
		slot->dboid = db->dboid;
		slot->state = VQ_DB_STARTING;
		slot->state_since = now;
		slot->paused_until = 0;
	}
	state = slot->state;
	state_since = slot->state_since;
	paused_until = slot->paused_until;
	if (state == VQ_DB_NO_EXTENSION &&
		TimestampDifferenceExceeds(state_since, now, NO_EXTENSION_RECHECK_MS))
	{
		slot->state = state = VQ_DB_STARTING;
		slot->state_since = now;
		/* executor 0 exited normally (no extension): restarting it now is no crash loop */
		db->last_start[0] = 0;
	}
	LWLockRelease(VqShared->lock);

	if (paused_until > now)
		return TimestampDifferenceMilliseconds(now, paused_until) + 1;
	if (state == VQ_DB_NO_EXTENSION)
		return NO_EXTENSION_RECHECK_MS - TimestampDifferenceMilliseconds(state_since, now) + 1;

	/* Executor 0 checks for the extension; the others start once it found it. */
	wanted = (state == VQ_DB_ACTIVE) ? Min(vq_executors_per_database, VQ_MAX_EXECUTORS) : 1;
	for (int i = 0; i < wanted; i++)
	{
		if (ExecutorAlive(db->handles[i]))
			continue;
		if (!TimestampDifferenceExceeds(db->last_start[i], now, RESTART_INTERVAL_MS))
		{
			long		wait = RESTART_INTERVAL_MS - TimestampDifferenceMilliseconds(db->last_start[i], now) + 1;

			next = (next < 0) ? wait : Min(next, wait);
			continue;
		}
		StartExecutor(db, i);
	}
	return next;
}

/* Free the slots of databases that are gone (or no longer selected) once their executors exited. */
static void
ForgetDatabases(void)
{
	HASH_SEQ_STATUS seq;
	LauncherDatabase *db;

	hash_seq_init(&seq, launcher_databases);
	while ((db = hash_seq_search(&seq)) != NULL)
	{
		bool		alive = false;

		if (db->seen)
			continue;
		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
			alive |= ExecutorAlive(db->handles[i]);
		if (alive)
			continue;
		LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
		{
			VqDatabaseSlot *slot = VqFindDatabaseSlot(db->dboid);

			if (slot != NULL)
			{
				slot->dboid = InvalidOid;
				slot->state = VQ_DB_FREE;
			}
		}
		LWLockRelease(VqShared->lock);
		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
			if (db->handles[i] != NULL)
				pfree(db->handles[i]);
		hash_search(launcher_databases, &db->dboid, HASH_REMOVE, NULL);
	}
}

/* Clear the launcher's entry in shared memory when it exits. */
static void
LauncherShmemExit(int code, Datum arg)
{
	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	VqShared->launcher_pid = 0;
	VqShared->launcher_latch = NULL;
	LWLockRelease(VqShared->lock);
}

/* The launcher's main loop. */
void
vq_launcher_main(Datum arg)
{
	HASHCTL		ctl;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("vq_job launcher");

	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	VqShared->launcher_pid = MyProcPid;
	VqShared->launcher_latch = MyLatch;
	LWLockRelease(VqShared->lock);
	before_shmem_exit(LauncherShmemExit, (Datum) 0);

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(LauncherDatabase);
	ctl.hcxt = TopMemoryContext;
	launcher_databases = hash_create("vq_job launcher databases", 16, &ctl,
									 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);

	while (!ShutdownRequestPending)
	{
		long		timeout = 10000;

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		/* A hot standby runs no jobs; look again after promotion. */
		if (RecoveryInProgress())
			timeout = 1000;
		else
		{
			HASH_SEQ_STATUS seq;
			LauncherDatabase *db;

			ScanDatabases();
			hash_seq_init(&seq, launcher_databases);
			while ((db = hash_seq_search(&seq)) != NULL)
			{
				long		next;

				if (!db->seen)
					continue;
				next = ServeDatabase(db);
				if (next >= 0)
					timeout = Min(timeout, next);
			}
			ForgetDatabases();
		}

		pgstat_report_stat(false);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(timeout, 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	proc_exit(0);
}

/*
 * End of transaction: after CREATE EXTENSION vq_job commits, have the launcher
 * serve this database now; after DROP EXTENSION, wake the executors so they
 * notice and exit.
 */
static void
LauncherWakeupXactCallback(XactEvent event, void *arg)
{
	if (wake_executors_at_commit && event == XACT_EVENT_COMMIT)
	{
		VqDatabaseSlot *slot;

		LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
		slot = VqFindDatabaseSlot(MyDatabaseId);
		for (int i = 0; slot != NULL && i < VQ_MAX_EXECUTORS; i++)
			slot->executors[i].check_extension = true;
		LWLockRelease(VqShared->lock);
		VqWakeDatabase(MyDatabaseId, true, 0, 0);
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT)
	{
		/* a database statement is over: its database may be served again (or a new one served) */
		if (OidIsValid(resume_at_commit))
			ResumeDatabaseExecutors(resume_at_commit);
		if (wake_launcher_at_end)
			VqWakeLauncher();
		resume_at_commit = InvalidOid;
		wake_launcher_at_end = false;
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
		wake_executors_at_commit = false;
	if (!wake_launcher_at_commit)
		return;
	if (event == XACT_EVENT_COMMIT)
	{
		VqDatabaseSlot *slot;

		LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
		slot = VqFindDatabaseSlot(MyDatabaseId);
		if (slot != NULL && slot->state == VQ_DB_NO_EXTENSION)
			slot->state_since = 0;	/* recheck at once */
		LWLockRelease(VqShared->lock);
		VqWakeLauncher();
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
		wake_launcher_at_commit = false;
}

/* Make sure the end-of-transaction callback is registered in this backend. */
static void
RegisterWakeupCallback(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(LauncherWakeupXactCallback, NULL);
		xact_callback_registered = true;
	}
}

/* vq.launcher_wakeup(): called by the install script; wakes the launcher when the transaction commits. */
Datum
vq_launcher_wakeup(PG_FUNCTION_ARGS)
{
	RegisterWakeupCallback();
	wake_launcher_at_commit = true;
	PG_RETURN_VOID();
}

/* Is this a DROP EXTENSION naming vq_job? */
static bool
DropsThisExtension(Node *stmt)
{
	ListCell   *lc;

	if (!IsA(stmt, DropStmt) || ((DropStmt *) stmt)->removeType != OBJECT_EXTENSION)
		return false;
	foreach(lc, ((DropStmt *) stmt)->objects)
		if (strcmp(strVal(lfirst(lc)), "vq_job") == 0)
			return true;
	return false;
}

/*
 * Stop the executors of a database and keep them stopped for a while, so a
 * statement that needs the database alone can run. Waits (bounded) for them
 * to exit; the launcher restarts them when the pause ends, if the database
 * still exists.
 */
static void
StopDatabaseExecutors(Oid dboid)
{
	TimestampTz deadline;

	if (!OidIsValid(dboid) || VqShared == NULL)
		return;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), STOP_WAIT_MS);
	for (;;)
	{
		VqDatabaseSlot *slot;
		int			alive = 0;

		LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
		slot = VqFindDatabaseSlot(dboid);
		if (slot != NULL)
		{
			slot->paused_until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), STOP_WAIT_MS);
			for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
			{
				if (slot->executors[i].pid == 0)
					continue;
				alive++;
				kill(slot->executors[i].pid, SIGTERM);
			}
		}
		LWLockRelease(VqShared->lock);

		if (alive == 0 || GetCurrentTimestamp() >= deadline)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Lift the pause StopDatabaseExecutors put on a database. */
static void
ResumeDatabaseExecutors(Oid dboid)
{
	VqDatabaseSlot *slot;

	if (VqShared == NULL)
		return;
	LWLockAcquire(VqShared->lock, LW_EXCLUSIVE);
	slot = VqFindDatabaseSlot(dboid);
	if (slot != NULL)
		slot->paused_until = 0;
	LWLockRelease(VqShared->lock);
}

/* The database a utility statement needs to itself, or InvalidOid. */
static Oid
DatabaseNeededAlone(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			return get_database_oid(((DropdbStmt *) stmt)->dbname, true);
		case T_CreatedbStmt:
			foreach(lc, ((CreatedbStmt *) stmt)->options)
			{
				DefElem    *opt = lfirst(lc);

				if (strcmp(opt->defname, "template") == 0 && opt->arg != NULL)
					return get_database_oid(defGetString(opt), true);
			}
			return InvalidOid;
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
				return get_database_oid(((RenameStmt *) stmt)->subname, true);
			return InvalidOid;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
			{
				DefElem    *opt = lfirst(lc);

				if (strcmp(opt->defname, "tablespace") == 0)
					return get_database_oid(((AlterDatabaseStmt *) stmt)->dbname, true);
			}
			return InvalidOid;
		default:
			return InvalidOid;
	}
}

/* ProcessUtility hook: get vq_job's executors out of the way of database-level statements. */
static void
VqProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
				 ProcessUtilityContext context, ParamListInfo params,
				 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;
	Oid			dboid = DatabaseNeededAlone(stmt);

	if (OidIsValid(dboid))
		StopDatabaseExecutors(dboid);
	if (DropsThisExtension(stmt))
	{
		RegisterWakeupCallback();
		wake_executors_at_commit = true;
	}

	PG_TRY();
	{
		if (prev_process_utility)
			prev_process_utility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		/*
		 * When the statement's transaction ends (it commits after this hook
		 * returns), lift the pause, except for a dropped database, and let the
		 * launcher look again.
		 */
		if (OidIsValid(dboid) || IsA(stmt, CreatedbStmt))
		{
			RegisterWakeupCallback();
			if (!IsA(stmt, DropdbStmt))
				resume_at_commit = dboid;
			wake_launcher_at_end = true;
		}
	}
	PG_END_TRY();
}

/* Register the launcher and the utility hook (from _PG_init). */
void
VqLauncherInit(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_ConsistentState;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "vq_job", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "vq_launcher_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "vq_job launcher", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "vq_job launcher", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);

	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = VqProcessUtility;
}

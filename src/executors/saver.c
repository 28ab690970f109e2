/*
 * saver.c: the saver, a short-lived background worker that saves what the
 * running jobs of one database show while they run: their progress on their
 * RUNNING rows, and their vq_log lines (livelog.c) in vq.job_log. Nothing a
 * handler does can commit before it ends, and its executor is busy running
 * it: another transaction, in another process, must write them. The launcher
 * cannot (it is connected to no database), and an idle executor is not
 * always there (one executor, or all of them running long jobs).
 *
 * So every vq.progress_flush_interval_ms, the launcher starts a saver for a
 * database where a running job has log lines or progress that are not saved
 * yet (launcher.c); the saver saves everything it finds, in one transaction,
 * and exits. It works with any number of executors, costs nothing while no
 * job runs or nothing changed, and at most one process start per database
 * and interval while jobs do. It claims nothing and does not count against
 * vq.max_executors, but it is a background worker (max_worker_processes).
 */
#include "postgres.h"

#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "utils/guc.h"

#include "main/shmem.h"
#include "util/spi_util.h"
#include "state/outcome.h"
#include "run/livelog.h"
#include "run/settings.h"
#include "executors/saver.h"

PGDLLEXPORT void vq_saver_main(Datum arg);

/* Leave the database slot when the process exits (whatever the reason). */
static void
SaverDetach(int code, Datum arg)
{
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	if (VqMyDatabaseSlot->saver_pid == MyProcPid)
		VqMyDatabaseSlot->saver_pid = 0;
	LWLockRelease(VqMyDatabaseSlot->lock);
}

/* Publish the saver in its database's slot; false if the database has none (any more). */
static bool
SaverAttach(Oid dboid)
{
	LWLockAcquire(VqShared->lock, LW_SHARED);
	VqMyDatabaseSlot = VqFindDatabaseSlot(dboid);
	if (VqMyDatabaseSlot != NULL)
	{
		LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
		VqMyDatabaseSlot->saver_pid = MyProcPid;
		LWLockRelease(VqMyDatabaseSlot->lock);
	}
	LWLockRelease(VqShared->lock);
	return VqMyDatabaseSlot != NULL;
}

/* Entry point of the saver; arg is the database's OID. */
void
vq_saver_main(Datum arg)
{
	Oid			dboid = DatumGetObjectId(arg);

	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	pgstat_report_appname("vq_job saver");
	VqMyDatabase = dboid;
	if (!SaverAttach(dboid))
		proc_exit(0);
	before_shmem_exit(SaverDetach, (Datum) 0);
	VqPinWorkerSettings();

	VqBeginTransaction();
	if (OidIsValid(get_extension_oid("vq_job", true)))
	{
		VqFlushProgress();
		VqSaveLiveLogs();
	}
	VqCommitTransaction();
	VqLiveLogsSaved();
	pgstat_report_stat(true);
	proc_exit(0);
}

/* Start a saver for a database (from the launcher); false when no background worker slot was free. */
bool
VqStartSaver(Oid dboid, const char *dbname, BackgroundWorkerHandle **handle)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "vq_job", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "vq_saver_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "vq_job saver for database %s", dbname);
	strlcpy(worker.bgw_type, "vq_job saver", BGW_MAXLEN);
	worker.bgw_main_arg = ObjectIdGetDatum(dboid);
	worker.bgw_notify_pid = MyProcPid;
	if (*handle != NULL)
		pfree(*handle);
	*handle = NULL;
	return RegisterDynamicBackgroundWorker(&worker, handle);
}

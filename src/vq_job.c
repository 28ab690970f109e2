/*
 * vq_job.c: the library's entry point. Refuses to load outside
 * shared_preload_libraries, defines the vq.* settings (and reserves their
 * prefix), and calls each subsystem's init function to register what it
 * needs: shared memory, caches, the launcher, hooks.
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "main/guc.h"
#include "main/shmem.h"
#include "cache/registry.h"
#include "state/prepared.h"
#include "run/context.h"
#include "executors/restore.h"
#include "launcher/guard.h"
#include "launcher/launcher.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("vq_job must be loaded via shared_preload_libraries"),
				 errhint("Add vq_job to shared_preload_libraries in postgresql.conf and restart the server.")));

	VqDefineSettings();
	VqContextInit();
	MarkGUCPrefixReserved("vq");

	/* pg_upgrade's binary-upgrade server must not run workers or touch jobs. */
	if (IsBinaryUpgrade)
		return;

	VqShmemInit();
	VqRegistryInit();
	VqLauncherInit();
	VqGuardInit();
	VqPreparedInit();
	VqRestoreInit();
}

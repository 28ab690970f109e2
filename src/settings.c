/*
 * settings.c: the settings vq_job's workers (executors, the saver) run
 * their own statements with, whatever the server's configuration or the
 * database's and role's defaults say.
 */
#include "postgres.h"

#include "utils/guc.h"

#include "roles.h"
#include "settings.h"
#include "vq_job.h"

/* Pin the settings the worker's own transactions need (once, after connecting; again after a reload). */
void
VqPinWorkerSettings(void)
{
	/* vq_job's own statements are schema-qualified; nothing should come from elsewhere. */
	SetConfigOption("search_path", VQ_CALLBACK_SEARCH_PATH, PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("synchronous_commit", vq_worker_synchronous_commit ? "on" : "off", PGC_SUSET, PGC_S_OVERRIDE);
}

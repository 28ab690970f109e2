/*
 * settings.h: the settings vq_job's workers run their own statements with,
 * and those user code runs with (settings.c).
 */
#ifndef VQ_SETTINGS_H
#define VQ_SETTINGS_H

#include "postgres.h"

/*
 * The search_path of the workers' own statements (all schema-qualified) and
 * of administrators' callbacks (roles.c): nothing of any role's can come
 * first.
 */
#define VQ_WORKER_SEARCH_PATH "pg_catalog, pg_temp"

/* Pin the settings the worker's own transactions need (once, after connecting, before its first transaction). */
extern void VqPinWorkerSettings(void);

/* Pin synchronous_commit as vq.worker_synchronous_commit says (again after a reload). */
extern void VqPinSynchronousCommit(void);

/* An executor, after connecting, in a transaction: note what its connection set. */
extern void VqNoteConnectionSettings(void);

/* An executor, after a reload, in a transaction: the configuration's values may have changed. */
extern void VqRefreshSettingsBase(void);

/* At user code's GUC nest level, as its role: what a session of the role in this database would get. */
extern void VqApplyUserCodeSettings(Oid role);

#endif							/* VQ_SETTINGS_H */

/*
 * pool.h: how many executors a database needs (asked of the launcher), and
 * which handlers are fast enough to run inline.
 */
#ifndef VQ_POOL_H
#define VQ_POOL_H

#include "postgres.h"

#include "nodes/pg_list.h"

#include "main/job.h"
#include "main/shmem.h"

/* Set up the handler timings and the timeout that asks for executors (once per executor). */
extern void VqPoolInit(void);

/* Is this handler fast enough to run inline in the claiming transaction? */
extern bool VqRunsInline(const char *handler);

/* Remember how long a handler took, here and for the database's other executors. */
extern void VqNoteDuration(const char *handler, int64 duration_us);

/* An executor takes or leaves its entry: it runs no job claimed visibly (caller holds the slot's lock). */
extern void VqRunningVisibleReset(VqExecutorSlot *e);

/* The launcher: a database takes the slot, with no handler timings (caller holds the slot's lock exclusively). */
extern void VqHandlerTimingsForget(VqDatabaseSlot *slot);

/* Function jobs of the list, from index first on, whose handlers are not known to be fast. */
extern int	VqCountSlow(List *jobs, int first);

/*
 * This executor starts (running) or ended a job claimed visibly; waiting is
 * how many jobs of slow handlers its claim released. Asks the launcher for
 * executors as needed.
 */
extern void VqSetRunningVisible(bool running, VqJob *job, int waiting);

#endif							/* VQ_POOL_H */

/*
 * restore.h: a restore (pg_restore, a pg_dump script) writing vq_job's tables,
 * and the executors of that database, which wait for its end (see restore.c).
 */
#ifndef VQ_RESTORE_H
#define VQ_RESTORE_H

#include "postgres.h"

#include "nodes/nodes.h"

/* Reserve the shared table and install the executor hook (from _PG_init). */
extern void VqRestoreInit(void);

/* The utility hook is about to run this statement (a COPY into vq_job's tables is a restore). */
extern void VqRestoreNoteStatement(Node *stmt);

/*
 * An executor's cycle begins: false when a session restores into this
 * database (do nothing but look after the extension, and wait); true
 * otherwise, and until VqRestoreCycleEnds no restore begins unseen.
 */
extern bool VqRestoreCycleBegins(void);

/* The cycle that VqRestoreCycleBegins let begin has ended. */
extern void VqRestoreCycleEnds(void);

#endif							/* VQ_RESTORE_H */

/*
 * wakeup.h: the one way vq_job wakes its processes: executors when work was
 * committed, the launcher when a database needs attention.
 */
#ifndef VQ_WAKEUP_H
#define VQ_WAKEUP_H

#include "postgres.h"

#include "utils/timestamp.h"

/*
 * At the commit of this transaction (nothing on abort or PREPARE): jobs of
 * (queue, priority) become ENQUEUED, due at scheduled_at or later. The claim
 * positions of that level are lowered (claimpos.c); unless wake is false (a
 * paused queue), the executors are woken when the jobs are due.
 */
extern void VqJobsEnqueuedAtCommit(const char *queue, int32 priority, TimestampTz scheduled_at, bool wake);

/* At commit: something other than a job becomes due at due (room in a queue, an outbox retry). */
extern void VqWakeAtCommit(TimestampTz due);

/* At commit: jobs became ENQUEUED by means the claim positions cannot follow (forget them). */
extern void VqForgetClaimPositionsAtCommit(void);

/* At commit: outbox row id becomes due, at once (not timed: it lowers the relay position) or at scheduled_at. */
extern void VqWakeRelayAtCommit(int64 id, bool timed, TimestampTz scheduled_at);

/* At commit: vq_job was created or dropped in this database (executors and launcher look again). */
extern void VqWakeOnExtensionChangeAtCommit(void);

/*
 * When this transaction ends, committed or not: the database's executors may
 * run again (InvalidOid: none was stopped), and the launcher looks around.
 */
extern void VqResumeDatabaseAtEnd(Oid dboid);

/* Now: tell the executors of a database that work is due now, or at next_due. */
extern void VqWakeExecutors(Oid dboid, bool due_now, TimestampTz next_due, uint32 queue_hint);

/* Now: wake the launcher. */
extern void VqWakeLauncher(void);

/* Now: set the latch of every executor of every database (the launcher: each must look at VqShared). */
extern void VqWakeAllExecutors(void);

#endif							/* VQ_WAKEUP_H */

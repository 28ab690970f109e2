/*
 * wakeup.h: the one way vq_job wakes its processes: executors when work was
 * committed, the launcher when a database needs attention.
 */
#ifndef VQ_WAKEUP_H
#define VQ_WAKEUP_H

#include "postgres.h"

#include "utils/timestamp.h"

/*
 * At the commit of this transaction (nothing on abort or PREPARE): a job
 * becomes due at scheduled_at in the queue whose VqQueueHash is queue_hint (0:
 * unknown). Returns whether it is due now.
 */
extern bool VqWakeForJobAtCommit(TimestampTz scheduled_at, uint32 queue_hint);

/* At commit: outbox rows become due at scheduled_at. */
extern void VqWakeRelayAtCommit(TimestampTz scheduled_at);

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

#endif							/* VQ_WAKEUP_H */

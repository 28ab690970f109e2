/*
 * wakeup.h: what a transaction makes due (jobs, outbox rows, callbacks, the
 * extension itself), acted on when it commits: the claim positions are
 * lowered and the executors woken (main/wake.h wakes them).
 */
#ifndef VQ_WAKEUP_H
#define VQ_WAKEUP_H

#include "postgres.h"

#include "nodes/parsenodes.h"
#include "utils/timestamp.h"

/*
 * At the commit of this transaction (nothing on abort; a prepared transaction's
 * at its COMMIT PREPARED, see prepared.c): jobs of
 * (queue, priority) become ENQUEUED, due at scheduled_at or later; handler
 * names their external handler (NULL: function handlers' jobs). The claim
 * positions of that level are lowered (claimpos.c); unless wake is false (a
 * paused queue), the executors are woken when the jobs are due, or for an
 * external handler's jobs, the workers waiting for it (wake.h).
 */
extern void VqJobsEnqueuedAtCommit(const char *queue, const char *handler, int32 priority,
								   TimestampTz scheduled_at, bool wake);

/* At commit: an external handler's waiting jobs may be taken now (room freed in a queue). */
extern void VqWakeTakersAtCommit(const char *handler);

/* At commit: something other than a job becomes due at due (room in a queue, an outbox retry). */
extern void VqWakeAtCommit(TimestampTz due);

/* At commit: jobs became ENQUEUED by means the claim positions cannot follow (forget them). */
extern void VqForgetClaimPositionsAtCommit(void);

/* At commit: outbox row id becomes due, at once (not timed: it lowers the relay position) or at scheduled_at. */
extern void VqWakeRelayAtCommit(int64 id, bool timed, TimestampTz scheduled_at);

/*
 * At commit: administrators' callbacks were queued for an executor
 * (deferred.c): the slot's callback_wake_count moves and one executor is
 * woken. An executor also looks for queued callbacks when it starts and every
 * VQ_CALLBACKS_LOOK_MS (a prepared transaction's commit wakes nobody).
 */
#define VQ_CALLBACKS_LOOK_MS 10000
extern void VqCallbacksQueuedAtCommit(void);

/* At commit: vq_job was created or dropped in this database (executors and launcher look again). */
extern void VqWakeOnExtensionChangeAtCommit(void);

/*
 * When this transaction ends, committed or not: the database's executors may
 * run again (InvalidOid: none was stopped), and the launcher looks around.
 */
extern void VqResumeDatabaseAtEnd(Oid dboid);

/*
 * The utility hook is about to run a transaction statement: a PREPARE
 * TRANSACTION keeps what this transaction noted (prepared.c) for its COMMIT
 * PREPARED.
 */
extern void VqWakeupTransactionBegins(TransactionStmt *stmt);

/*
 * The utility hook ran a transaction statement without an error: COMMIT
 * PREPARED acts now on what that transaction noted, as its own commit would
 * have (were the notes lost, by a restart since the PREPARE, this database's
 * executors forget their claim positions and look at everything); ROLLBACK
 * PREPARED drops them.
 */
extern void VqWakeupTransactionDone(TransactionStmt *stmt);

/* At commit: jobs, outbox rows or due times arrived unnoted: forget the positions, look at everything. */
extern void VqLookAtEverythingAtCommit(void);

/* Now: a restore into this database ended: its executors forget their positions and look at everything. */
extern void VqWakeAfterRestore(Oid dboid);

#endif							/* VQ_WAKEUP_H */

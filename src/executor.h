/*
 * executor.h: what the executor processes share between their files:
 * executor.c (process, polling, claiming, batches), dispatch.c (running one
 * handler), outcome.c (writing what happened) and jobapi.c (the functions a
 * handler calls: vq_log, progress, cancellation).
 */
#ifndef VQ_EXECUTOR_H
#define VQ_EXECUTOR_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "registry.h"
#include "shmem.h"

/* One claimed job, copied out of SPI memory into the cycle's memory context. */
typedef struct VqJob
{
	pg_uuid_t	execution_id;
	char	   *job_id;
	char	   *handler;
	char	   *address;
	char	   *queue;
	int32		priority;
	int32		attempt_number;
	int32		max_attempts;
	TimestampTz scheduled_at;
	Jsonb	   *payload;		/* NULL when the payload is SQL NULL */
	Jsonb	   *metadata;
	Oid			enqueued_by;
	bool		running;		/* claimed visibly: RUNNING is committed */
	TimestampTz updated_at;		/* as read, when an outcome must find the row unchanged (else 0) */
} VqJob;

typedef enum VqOutcomeKind
{
	VQ_OUTCOME_COMPLETED,
	VQ_OUTCOME_FAILED,			/* the handler raised an error: consumes an attempt */
	VQ_OUTCOME_ABANDONED		/* interrupted (timeout, dead executor): also consumes an attempt */
} VqOutcomeKind;

typedef struct VqOutcome
{
	VqOutcomeKind kind;
	char	   *error;			/* FAILED / ABANDONED */
	bool		permanent;		/* FAILED for good: no retry whatever the attempts left */
	int64		duration_us;
	TimestampTz started_at;		/* when the handler was called */
	bool		wrote;			/* the handler's subtransaction got an XID */
	int64		progress_total;
	int64		progress_succeeded;
	int64		progress_failed;
	bool		has_progress;
} VqOutcome;

/* This executor's identity and shared-memory entries (executor.c). */
extern Oid	VqMyDatabase;
extern VqDatabaseSlot *VqMyDatabaseSlot;
extern VqExecutorSlot *VqMyExecutorSlot;

/* dispatch.c */
extern void VqDispatchInit(void);
extern void VqRunFunctionHandler(VqJob *job, VqOutcome *outcome);
extern void VqDispatchNotify(VqJob *job, const char *channel);
extern int	VqEnterUserRole(Oid role, VqSavedUser *saved);
extern void VqWatchBegin(void);
extern void VqWatchEnd(bool returned_normally);
extern void VqLeaveUserRole(int nestlevel, VqSavedUser *saved);

/* outcome.c: each runs inside the caller's transaction, connected to SPI */
extern void VqPersistCompleted(List *jobs, List *outcomes, TimestampTz now);
extern bool VqPersistFailure(VqJob *job, VqOutcome *outcome, VqQueue *queue, TimestampTz now);
extern void VqPersistRunning(VqJob *job, bool external, TimestampTz now);
extern int	VqRescueOrphans(VqRegistry *registry, TimestampTz now);
extern TimestampTz VqEarliestFutureDue(TimestampTz now);
extern void VqFlushProgress(void);
extern int	VqExternalInFlight(VqQueue *queue);

/* relay.c */
extern int	VqRelayBatch(VqRegistry *registry, int limit, TimestampTz now);

/* retention.c */
extern void VqRunRetention(void);

/* jobapi.c: the job context seen by vq_log / progress / cancellation */
extern void VqJobApiBegin(VqJob *job);
extern void VqJobApiEnd(VqOutcome *outcome);
extern void VqFlushJobLogs(VqJob *job);

#endif							/* VQ_EXECUTOR_H */

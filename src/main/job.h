/*
 * job.h: a claimed job and what came of running it, as the executor's files
 * (executor.c, dispatch.c, outcome.c, jobapi.c, relay.c) and the workers'
 * replies (reply.c, consumer.c) pass them around.
 */
#ifndef VQ_JOB_STRUCT_H
#define VQ_JOB_STRUCT_H

#include "postgres.h"

#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

/* One claimed job, copied out of SPI memory. */
typedef struct VqJob
{
	pg_uuid_t	execution_id;
	char	   *job_id;
	char	   *handler;
	char	   *address;
	Oid			handler_fn;		/* the function the enqueue authorised (InvalidOid: an external handler) */
	char	   *queue;
	int32		priority;
	int32		attempt_number;
	int32		max_attempts;
	TimestampTz scheduled_at;
	Jsonb	   *payload;		/* NULL when the payload is SQL NULL */
	Jsonb	   *metadata;
	Oid			enqueued_by;
	bool		running;		/* claimed visibly: RUNNING is committed */
	bool		external;		/* an external handler's job (workers take it, never an executor) */
	TimestampTz taken_at;		/* a worker took it then, and its CLAIMED transition is implied (else 0) */
	TimestampTz updated_at;		/* as read, when an outcome must find the row unchanged (else 0) */
	Datum		context;		/* its vq.job_context, once built ((Datum) 0 until then; see VqJobContextDatum) */
} VqJob;

typedef enum VqOutcomeKind
{
	VQ_OUTCOME_COMPLETED,
	VQ_OUTCOME_FAILED,			/* the handler raised an error: consumes an attempt */
	VQ_OUTCOME_ABANDONED,		/* cut by the timeout, or its executor died: also consumes an attempt */
	VQ_OUTCOME_INTERRUPTED,		/* cut by an orderly stop: back in line, the attempt not consumed */
	VQ_OUTCOME_CANCELLED		/* vq_cancel asked while it ran: ends CANCELLED, never retried */
} VqOutcomeKind;

typedef struct VqOutcome
{
	VqOutcomeKind kind;
	char	   *error;			/* FAILED / ABANDONED / INTERRUPTED / CANCELLED (what the handler raised, if it did) */
	bool		permanent;		/* FAILED for good: no retry whatever the attempts left */
	bool		backoff;		/* ABANDONED, retried after the backoff (a lease expired), not in its place */
	TimestampTz retry_at;		/* FAILED: retried then, not after the backoff (a worker's retry; 0: none) */
	int64		duration_us;
	TimestampTz started_at;		/* when the handler was called */
	bool		wrote;			/* the handler's subtransaction got an XID */
	bool		ends_transaction;	/* it changed the transaction's constraint modes (SET CONSTRAINTS) */
	int64		progress_total;
	int64		progress_succeeded;
	int64		progress_failed;
	bool		has_progress;
} VqOutcome;

#endif							/* VQ_JOB_STRUCT_H */

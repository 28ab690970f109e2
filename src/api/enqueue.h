/*
 * enqueue.h: enqueue internals shared with the consumer replies and the outbox.
 */
#ifndef VQ_ENQUEUE_H
#define VQ_ENQUEUE_H

#include "postgres.h"

#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "cache/registry.h"

/* The enqueuing role must have EXECUTE on a function handler's function. */
extern void VqCheckEnqueuePrivilege(VqHandler *handler, Oid role);

/* May role enqueue jobs of this NOTIFY handler (a superuser, or a member of a producer grantee)? */
extern bool VqMayProduce(VqHandler *handler, Oid role);

/* When a job asked to run at run_at is due: not before called_at without a grant on its queue. */
extern TimestampTz VqDueAt(VqQueue *queue, Oid role, TimestampTz run_at, TimestampTz called_at);

/* Enqueue one job with settings already resolved (the outbox relay); returns its execution_id. */
extern Datum VqEnqueueResolved(const char *handler_name, const char *queue_name, int32 priority,
							   int32 max_attempts, TimestampTz scheduled_at, Datum payload,
							   bool payload_null, Jsonb *metadata, Oid enqueued_by);

/* Insert many jobs with settings resolved and validated by the caller (the relay, set-based). */
extern void VqEnqueueManyResolved(VqRegistry *registry, int n, VqHandler **handlers,
								  Datum *queues, Datum *priorities, Datum *max_attempts, Datum *scheduled,
								  Datum *payloads, bool *payload_nulls, Datum *metadatas, Datum *enqueued_by);

#endif							/* VQ_ENQUEUE_H */

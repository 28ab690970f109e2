/*
 * deferred.h: administrators' callbacks queued for an executor, because what
 * they see happened where no administrator code may run (a client's session,
 * user code inside an executor): see callbacks.c.
 */
#ifndef VQ_DEFERRED_H
#define VQ_DEFERRED_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/uuid.h"

#include "main/job.h"

/*
 * Queue the call of the function listeners named (char *, in their order) for
 * a transition (vq.job_transition) and the job row after it (vq.job), in the
 * current transaction; an executor is woken at its commit.
 */
extern void VqDeferListeners(pg_uuid_t *execution_id, int32 attempt, List *names,
							 Datum transition, Datum job);

/* The same for every interceptor's on_dispatch (outcome NULL) or on_complete of a job (ctx: its vq.job_context). */
extern void VqDeferInterceptors(VqJob *job, Datum ctx, VqOutcome *outcome);

/*
 * Executor, in its own transaction (VqBeginTransaction): run the callbacks of
 * up to VQ_DEFERRED_PER_TRANSACTION queued events, oldest first, and delete
 * them in this transaction. Returns how many events it took.
 */
#define VQ_DEFERRED_PER_TRANSACTION 16
extern int	VqRunDeferredCallbacks(void);

#endif							/* VQ_DEFERRED_H */

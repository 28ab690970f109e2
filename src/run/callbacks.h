/*
 * callbacks.h: calling administrators' functions inside vq_job's work, as
 * the owner of each function, each in a subtransaction whose error is logged
 * and changes nothing else: interceptors (interceptors.h) and transition
 * listeners. They run inline only in an executor's own code; anywhere else
 * they are queued for an executor (deferred.c).
 */
#ifndef VQ_CALLBACKS_H
#define VQ_CALLBACKS_H

#include "postgres.h"

#include "fmgr.h"

#include "main/job.h"
#include "cache/registry.h"

/* Do callbacks run here, in the transaction of what they see (an executor's own code)? */
extern bool VqCallbacksRunInline(void);

/* Call fn (1 to 3 arguments; (Datum) 0 is NULL) as its owner; NULL, or its error message. */
extern char *VqCallCallback(Oid fn, int nargs, Datum *args);

/* Log a callback's failure: a WARNING, and an ERROR line in the job's log. */
extern void VqReportCallbackFailure(const char *what, pg_uuid_t *execution_id, int32 attempt,
									const char *error);

/* The name of an outcome, as on_complete receives it. */
extern const char *VqOutcomeName(VqOutcomeKind kind);

/* Call one interceptor's on_dispatch, or its on_complete (outcome, error: text or (Datum) 0); log its failure. */
extern void VqCallInterceptor(VqInterceptor *i, bool complete, pg_uuid_t *execution_id, int32 attempt,
							  Datum ctx, Datum outcome, Datum error);

#endif							/* VQ_CALLBACKS_H */

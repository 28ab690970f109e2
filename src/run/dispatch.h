/*
 * dispatch.h: running one job's function handler: in a subtransaction, as
 * the enqueuing role, under the watch (see dispatch.c).
 */
#ifndef VQ_DISPATCH_H
#define VQ_DISPATCH_H

#include "postgres.h"

#include "main/job.h"

/* Run a function handler in a subtransaction; fills in the outcome. */
extern void VqRunFunctionHandler(VqJob *job, VqOutcome *outcome);

#endif							/* VQ_DISPATCH_H */

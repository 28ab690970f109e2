/*
 * interceptors.h: every interceptor around a job's dispatch and completion
 * (see interceptors.c).
 */
#ifndef VQ_INTERCEPTORS_H
#define VQ_INTERCEPTORS_H

#include "postgres.h"

#include "main/job.h"

/* Every interceptor's on_dispatch, before a job is run or when a worker takes it. */
extern void VqInterceptDispatch(VqJob *job);

/* Every interceptor's on_complete, when the handler ended or the reply came, before the outcome is written. */
extern void VqInterceptComplete(VqJob *job, VqOutcome *outcome);

#endif							/* VQ_INTERCEPTORS_H */

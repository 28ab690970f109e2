/*
 * jobapi.h: the running job as the functions a handler calls (vq_log,
 * progress, vq_job_cancelled) and vq.running_jobs see it.
 */
#ifndef VQ_JOBAPI_H
#define VQ_JOBAPI_H

#include "postgres.h"

#include "main/job.h"
#include "main/shmem.h"

/* An executor takes its entry: it runs no job (caller holds the slot's lock). */
extern void VqRunningJobReset(VqExecutorSlot *e);

/* A job starts in this executor: publish it, start an empty log. */
extern void VqJobApiBegin(VqJob *job);

/* It ends: take its progress into the outcome, unpublish it. */
extern void VqJobApiEnd(VqOutcome *outcome);

/* The vq.job_context value of a job (a two-argument handler and the interceptors receive it). */
extern Datum VqJobContextDatum(VqJob *job);

/* The job this executor runs now (NULL between jobs). */
extern VqJob *VqCurrentJob(void);

/* Has vq_cancel asked the job this executor runs now to stop? */
extern bool VqJobCancelRequested(void);

/* Write the job's buffered log lines (in the caller's transaction, connected to SPI). */
extern void VqFlushJobLogs(VqJob *job);

#endif							/* VQ_JOBAPI_H */

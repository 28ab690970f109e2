/*
 * outcome.h: writing what happened to jobs (one row update and one
 * transition each), and rescuing jobs whose executor died. Each function runs
 * inside the caller's transaction, connected to SPI.
 */
#ifndef VQ_OUTCOME_H
#define VQ_OUTCOME_H

#include "nodes/pg_list.h"

#include "job.h"
#include "registry.h"

/* Mark jobs COMPLETED, one COMPLETED transition each. */
extern void VqPersistCompleted(List *jobs, List *outcomes, TimestampTz now);

/* Re-enqueue or dead-letter a job that failed or was abandoned; false if its row changed meanwhile. */
extern bool VqPersistFailure(VqJob *job, VqOutcome *outcome, VqQueue *queue, TimestampTz now);

/* Commit-to-be a visible claim: RUNNING with this executor's identity (or none, for a NOTIFY consumer). */
extern void VqPersistRunning(VqJob *job, bool external, TimestampTz now);

/* Abandon RUNNING jobs of dead executors and unanswered NOTIFY jobs; returns how many. */
extern int	VqRescueOrphans(VqRegistry *registry, TimestampTz now);

/* Save the live progress of the jobs the executors of this database run visibly. */
extern void VqFlushProgress(void);

/* NOTIFY jobs of a queue announced and not yet answered. */
extern int	VqExternalInFlight(VqQueue *queue);

#endif							/* VQ_OUTCOME_H */

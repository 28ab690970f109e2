/*
 * outcome.h: writing what happened to jobs (one row write and, except for a
 * completion without a visible claim, one transition each), and rescuing jobs
 * whose executor died. Each function runs inside the caller's transaction,
 * connected to SPI.
 */
#ifndef VQ_OUTCOME_H
#define VQ_OUTCOME_H

#include "nodes/pg_list.h"

#include "main/job.h"
#include "cache/registry.h"

/*
 * The select list that writes a job moved out of vq.job_active (a DELETE's
 * RETURNING j.*) into vq.job_finished, in the table's column order, with
 * the columns an ending changes given as SQL expressions; the executor's
 * identity is cleared.
 */
#define VQ_FINISHED_ROW(state, updated_at, started_at, finished_at, last_error, total, succeeded, failed) \
	" execution_id, " state ", priority, attempt_number, max_attempts, scheduled_at, created_at, " \
	updated_at ", enqueued_by, queue, job_id, handler, handler_address, handler_function, payload, metadata, " \
	started_at ", " finished_at ", NULL, NULL, consumer_claimed_at, cancel_requested, " \
	last_error ", " total ", " succeeded ", " failed ", NULL, NULL"

/*
 * The columns of vq.job_active that VQ_FINISHED_ROW reads, for a DELETE's
 * RETURNING (j the table's alias): naming them spares building whole rows.
 */
#define VQ_ENDING_COLUMNS(j) \
	" " j ".execution_id, " j ".priority, " j ".attempt_number, " j ".max_attempts, " j ".scheduled_at, " \
	j ".created_at, " j ".updated_at, " j ".enqueued_by, " j ".queue, " j ".job_id, " j ".handler, " \
	j ".handler_address, " j ".handler_function, " j ".payload, " j ".metadata, " j ".started_at, " \
	j ".finished_at, " j ".consumer_claimed_at, " j ".cancel_requested, " j ".last_error, " \
	j ".progress_total, " j ".progress_succeeded, " j ".progress_failed"

/* Mark jobs COMPLETED (a COMPLETED transition for those claimed visibly; implied for the others). */
extern void VqPersistCompleted(List *jobs, List *outcomes, TimestampTz now);

/* End a job that vq_cancel asked to stop while it ran: CANCELLED, with one CANCELLED transition. */
extern void VqPersistCancelled(VqJob *job, VqOutcome *outcome, TimestampTz now);

/* Re-enqueue or dead-letter a job that failed or was abandoned; false if its row changed meanwhile. */
extern bool VqPersistFailure(VqJob *job, VqOutcome *outcome, VqQueue *queue, TimestampTz now);

/* Commit-to-be a visible claim: RUNNING with this executor's identity. */
extern void VqPersistRunning(VqJob *job, TimestampTz now);

/*
 * Abandon RUNNING jobs of dead executors and (with leases) jobs workers took
 * whose lease expired, lowering *next_lease to the earliest lease still
 * running; returns how many.
 */
extern int	VqRescueOrphans(VqRegistry *registry, TimestampTz now, bool leases, TimestampTz *next_lease);

/* The external handler whose lane a job's re-enqueue lowers (NULL: a function handler's job). */
#define VqJobLaneHandler(job) ((job)->external ? (job)->handler : NULL)

/* Is any job of this database RUNNING in an executor (claimed visibly)? */
extern bool VqAnyJobRunning(void);

/* Save the live progress of the jobs the executors of this database run visibly. */
extern void VqFlushProgress(void);

#endif							/* VQ_OUTCOME_H */

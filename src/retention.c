/*
 * retention.c: deleting finished jobs. COMPLETED and CANCELLED jobs older
 * than vq.retention_finished, and DEAD_LETTER jobs older than
 * vq.retention_dead_letter, are deleted with their transitions and logs, by
 * executor 0, in batches of RETENTION_BATCH rows per transaction and for at
 * most RETENTION_BUDGET_MS per round, so the tables stay bounded under
 * sustained load while claims go on (the batches skip locked rows and take
 * no lock a claim waits for).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "retention.h"
#include "spi_util.h"
#include "vq_job.h"

#define RETENTION_BATCH 1000
#define RETENTION_BUDGET_MS 500

static SPIPlanPtr delete_plan = NULL;

/*
 * Delete one batch of expired jobs (with their history and logs); returns how
 * many. Each cutoff bounds an index range scan of job_finished_idx, so a
 * round reads only what it deletes, however many finished jobs are kept.
 */
static uint64
DeleteBatch(TimestampTz finished_before, TimestampTz dead_before)
{
	Datum		values[3];
	char		nulls[3] = {' ', ' ', ' '};

	values[0] = TimestampTzGetDatum(finished_before);
	values[1] = TimestampTzGetDatum(dead_before);
	values[2] = Int32GetDatum(RETENTION_BATCH);
	if (vq_retention_finished_s < 0)
		nulls[0] = 'n';
	if (vq_retention_dead_letter_s < 0)
		nulls[1] = 'n';
	(void) VqKeepCustomPlan(&delete_plan,
							"WITH done AS ("
							"  SELECT execution_id FROM vq.job_finished"
							"  WHERE finished_at OPERATOR(pg_catalog.<) $1"
							"  AND state OPERATOR(pg_catalog.=) ANY ('{COMPLETED,CANCELLED}'::vq.job_state[])"
							"  LIMIT $3 FOR UPDATE SKIP LOCKED),"
							" dead AS ("
							"  SELECT execution_id FROM vq.job_finished"
							"  WHERE finished_at OPERATOR(pg_catalog.<) $2"
							"  AND state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state"
							"  LIMIT $3 FOR UPDATE SKIP LOCKED),"
							" expired AS (SELECT execution_id FROM done UNION ALL SELECT execution_id FROM dead),"
							" logs AS (DELETE FROM vq.job_log l USING expired e"
							"  WHERE l.execution_id OPERATOR(pg_catalog.=) e.execution_id),"
							" history AS (DELETE FROM vq.job_transition_data t USING expired e"
							"  WHERE t.execution_id OPERATOR(pg_catalog.=) e.execution_id)"
							" DELETE FROM vq.job_finished j USING expired e"
							" WHERE j.execution_id OPERATOR(pg_catalog.=) e.execution_id",
							3, (Oid[]) {TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID});
	if (SPI_execute_plan(delete_plan, values, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "vq_job: deleting expired jobs failed");
	return SPI_processed;
}

/* Delete one batch of published outbox rows older than the retention (failed rows stay); returns how many. */
static uint64
DeletePublished(TimestampTz published_before)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[2];

	values[0] = TimestampTzGetDatum(published_before);
	values[1] = Int32GetDatum(RETENTION_BATCH);
	(void) VqKeepCustomPlan(&plan,
							"DELETE FROM vq.outbox o WHERE o.id OPERATOR(pg_catalog.=) ANY (ARRAY("
							" SELECT id FROM vq.outbox"
							" WHERE status OPERATOR(pg_catalog.=) 'PUBLISHED' AND published_at OPERATOR(pg_catalog.<) $1"
							" LIMIT $2 FOR UPDATE SKIP LOCKED))",
							2, (Oid[]) {TIMESTAMPTZOID, INT4OID});
	if (SPI_execute_plan(plan, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "vq_job: deleting published outbox rows failed");
	return SPI_processed;
}

/* One round of retention: delete expired jobs, batch by batch, within the time budget. */
void
VqRunRetention(void)
{
	TimestampTz start = GetCurrentTimestamp();

	if (vq_retention_finished_s < 0 && vq_retention_dead_letter_s < 0)
		return;
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		uint64		deleted;

		CHECK_FOR_INTERRUPTS();
		VqBeginTransaction();
		deleted = DeleteBatch(now - (TimestampTz) Max(vq_retention_finished_s, 0) * USECS_PER_SEC,
							  now - (TimestampTz) Max(vq_retention_dead_letter_s, 0) * USECS_PER_SEC);
		if (vq_retention_finished_s >= 0)
			deleted += DeletePublished(now - (TimestampTz) vq_retention_finished_s * USECS_PER_SEC);
		VqCommitTransaction();
		if (deleted < RETENTION_BATCH ||
			TimestampDifferenceExceeds(start, GetCurrentTimestamp(), RETENTION_BUDGET_MS))
			break;
	}
}

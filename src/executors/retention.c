/*
 * retention.c: deleting finished jobs and outbox rows. COMPLETED and
 * CANCELLED jobs older than vq.retention_finished, and DEAD_LETTER jobs older
 * than vq.retention_dead_letter, are deleted with their transitions and logs;
 * PUBLISHED outbox rows after vq.retention_finished, FAILED ones after
 * vq.retention_outbox_failed. All by
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

#include "main/guc.h"
#include "util/spi_util.h"
#include "executors/retention.h"

#define RETENTION_BATCH 1000
#define RETENTION_BUDGET_MS 500
#define RETENTION_SWEEP_MS 60000
/*
 * The positions stay this far behind the batch's start: a completion commits
 * within milliseconds of its finished_at (an inline batch within 200 ms), and
 * one that commits later than the batch passed its finished_at would wait for
 * the sweep.
 */
#define RETENTION_LAG_MS 2000

static SPIPlanPtr delete_plan = NULL;

/*
 * Where the previous batches got to, per class: every expired row of the
 * class with an earlier finished_at has been deleted. Each batch scans
 * job_finished_idx from there, so it does not walk again the index entries
 * of the rows already deleted, which a long-held snapshot keeps vacuum from
 * removing. A row that committed with an earlier finished_at after a batch
 * passed it waits for the next sweep (the positions go back to the start
 * every RETENTION_SWEEP_MS); the positions stay RETENTION_LAG_MS behind the
 * batches' start, so only a completion whose transaction stayed open longer
 * than that (a consumer's reply in a long transaction) waits.
 */
typedef struct RetentionPositions
{
	TimestampTz finished_from;	/* COMPLETED and CANCELLED */
	TimestampTz dead_from;		/* DEAD_LETTER */
	TimestampTz sweep_started;
} RetentionPositions;

static RetentionPositions positions = {DT_NOBEGIN, DT_NOBEGIN, 0};

/*
 * Delete one batch of expired jobs (with their history and logs) and move
 * the positions past them; returns how many. Each class is an index range
 * scan of job_finished_idx from its position to its cutoff, so a round reads
 * only what it deletes, however many finished jobs are kept.
 */
static uint64
DeleteBatch(TimestampTz now, TimestampTz finished_before, TimestampTz dead_before)
{
	TimestampTz lagging = TimestampTzPlusMilliseconds(now, -RETENTION_LAG_MS);
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	bool		isnull;
	Datum		d;
	uint64		deleted;

	values[0] = TimestampTzGetDatum(finished_before);
	values[1] = TimestampTzGetDatum(dead_before);
	values[2] = Int32GetDatum(RETENTION_BATCH);
	values[3] = TimestampTzGetDatum(positions.finished_from);
	values[4] = TimestampTzGetDatum(positions.dead_from);
	if (vq_retention_finished_s < 0)
		nulls[0] = 'n';
	if (vq_retention_dead_letter_s < 0)
		nulls[1] = 'n';
	(void) VqKeepCustomPlan(&delete_plan,
							"WITH done AS ("
							"  SELECT execution_id FROM vq.job_finished"
							"  WHERE finished_at OPERATOR(pg_catalog.<) $1 AND finished_at OPERATOR(pg_catalog.>=) $4"
							"  AND state OPERATOR(pg_catalog.=) ANY ('{COMPLETED,CANCELLED}'::vq.job_state[])"
							"  ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED),"
							" dead AS ("
							"  SELECT execution_id FROM vq.job_finished"
							"  WHERE finished_at OPERATOR(pg_catalog.<) $2 AND finished_at OPERATOR(pg_catalog.>=) $5"
							"  AND state OPERATOR(pg_catalog.=) 'DEAD_LETTER'::vq.job_state"
							"  ORDER BY finished_at LIMIT $3 FOR UPDATE SKIP LOCKED),"
							" expired AS (SELECT execution_id FROM done UNION ALL SELECT execution_id FROM dead),"
							" logs AS (DELETE FROM vq.job_log l USING expired e"
							"  WHERE l.execution_id OPERATOR(pg_catalog.=) e.execution_id),"
							" history AS (DELETE FROM vq.job_transition_data t USING expired e"
							"  WHERE t.execution_id OPERATOR(pg_catalog.=) e.execution_id),"
							" gone AS (DELETE FROM vq.job_finished j USING expired e"
							"  WHERE j.execution_id OPERATOR(pg_catalog.=) e.execution_id"
							"  RETURNING j.state, j.finished_at)"
							" SELECT pg_catalog.count(*),"
							"  pg_catalog.max(finished_at) FILTER (WHERE state OPERATOR(pg_catalog.<>) 'DEAD_LETTER'),"
							"  pg_catalog.max(finished_at) FILTER (WHERE state OPERATOR(pg_catalog.=) 'DEAD_LETTER')"
							" FROM gone",
							5, (Oid[]) {TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID});
	if (SPI_execute_plan(delete_plan, values, nulls, false, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "vq_job: deleting expired jobs failed");
	deleted = (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull);
	if (!isnull)
		positions.finished_from = Min(DatumGetTimestampTz(d), lagging);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (!isnull)
		positions.dead_from = Min(DatumGetTimestampTz(d), lagging);
	return deleted;
}

/*
 * Delete one batch of outbox rows: PUBLISHED ones published before
 * published_before, FAILED ones last updated before failed_before (each kept
 * when its retention is -1); returns how many.
 */
static uint64
DeleteOutboxRows(TimestampTz published_before, TimestampTz failed_before)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[3];
	char		nulls[3] = {vq_retention_finished_s < 0 ? 'n' : ' ', vq_retention_outbox_failed_s < 0 ? 'n' : ' ', ' '};

	values[0] = TimestampTzGetDatum(published_before);
	values[1] = TimestampTzGetDatum(failed_before);
	values[2] = Int32GetDatum(RETENTION_BATCH);
	(void) VqKeepCustomPlan(&plan,
							"WITH published AS (SELECT id FROM vq.outbox"
							"  WHERE status OPERATOR(pg_catalog.=) 'PUBLISHED' AND published_at OPERATOR(pg_catalog.<) $1"
							"  LIMIT $3 FOR UPDATE SKIP LOCKED),"
							" failed AS (SELECT id FROM vq.outbox"
							"  WHERE status OPERATOR(pg_catalog.=) 'FAILED' AND updated_at OPERATOR(pg_catalog.<) $2"
							"  LIMIT $3 FOR UPDATE SKIP LOCKED)"
							" DELETE FROM vq.outbox o WHERE o.id OPERATOR(pg_catalog.=) ANY (ARRAY("
							"  SELECT id FROM published UNION ALL SELECT id FROM failed))",
							3, (Oid[]) {TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID});
	if (SPI_execute_plan(plan, values, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "vq_job: deleting outbox rows failed");
	return SPI_processed;
}

/* Delete one batch of idempotency windows (vq_enqueue's unique_for) that have ended; returns how many. */
static uint64
DeleteEndedWindows(TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[2] = {TimestampTzGetDatum(now), Int32GetDatum(RETENTION_BATCH)};

	(void) VqKeepPlan(&plan,
					  "DELETE FROM vq.job_id_window w WHERE (w.enqueued_by, w.job_id) IN ("
					  " SELECT enqueued_by, job_id FROM vq.job_id_window WHERE until OPERATOR(pg_catalog.<) $1"
					  " LIMIT $2 FOR UPDATE SKIP LOCKED)",
					  2, (Oid[]) {TIMESTAMPTZOID, INT4OID});
	if (SPI_execute_plan(plan, values, NULL, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "vq_job: deleting ended job_id windows failed");
	return SPI_processed;
}

/*
 * One round of retention: delete expired jobs, outbox rows and ended job_id
 * windows, batch by batch, within the time budget. Returns true when the
 * budget ran out with rows left (the next round should come soon).
 */
bool
VqRunRetention(void)
{
	TimestampTz start = GetCurrentTimestamp();
	bool		jobs_expire = vq_retention_finished_s >= 0 || vq_retention_dead_letter_s >= 0 ||
		vq_retention_outbox_failed_s >= 0;

	if (TimestampDifferenceExceeds(positions.sweep_started, start, RETENTION_SWEEP_MS))
	{
		positions.finished_from = positions.dead_from = DT_NOBEGIN;
		positions.sweep_started = start;
	}
	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		uint64		deleted;

		CHECK_FOR_INTERRUPTS();
		VqBeginTransaction();
		deleted = DeleteEndedWindows(now);
		if (jobs_expire)
		{
			deleted += DeleteBatch(now, now - (TimestampTz) Max(vq_retention_finished_s, 0) * USECS_PER_SEC,
								   now - (TimestampTz) Max(vq_retention_dead_letter_s, 0) * USECS_PER_SEC);
			deleted += DeleteOutboxRows(now - (TimestampTz) Max(vq_retention_finished_s, 0) * USECS_PER_SEC,
										now - (TimestampTz) Max(vq_retention_outbox_failed_s, 0) * USECS_PER_SEC);
		}
		VqCommitTransaction();
		if (deleted < RETENTION_BATCH)
			return false;
		if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), RETENTION_BUDGET_MS))
			return true;
	}
}

/*
 * poscheck.c: the positions' safety net. Claims scan each priority level of
 * a queue from its claim position (claimpos.c), and vq_pull a NOTIFY
 * handler's announced jobs from its pull position (pullpos.c); every commit
 * that puts a job behind a position lowers it, so none should be there.
 * Executor 0 looks every 10 s (less often when a look takes long, see
 * executor.c) for a job behind each position, moves the position back to
 * any it finds, and logs one that was there for more than a second (not a
 * commit about to lower it): something moved the position past it.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#include "main/shmem.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "claim/claimpos.h"
#include "claim/poscheck.h"
#include "claim/pullpos.h"

/*
 * The first due job of a level that is before the level's position and that
 * no claim holds; false if none. Its updated_at tells how long it has been
 * there.
 */
static bool
JobBehindPosition(VqQueue *queue, VqClaimScan *level, TimestampTz now, VqClaimKey *key, TimestampTz *updated_at)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[5];
	bool		isnull;

	values[0] = queue->name_datum;
	values[1] = Int32GetDatum(level->priority);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(level->from.scheduled_at);
	values[4] = UUIDPGetDatum(&level->from.execution_id);
	if (SPI_execute_plan(VqKeepPlan(&plan,
								  "SELECT scheduled_at, execution_id, updated_at FROM vq.job_active"
								  " WHERE queue OPERATOR(pg_catalog.=) $1"
								  " AND state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state"
								  " AND priority OPERATOR(pg_catalog.=) $2"
								  " AND scheduled_at OPERATOR(pg_catalog.<=) $3"
								  " AND (scheduled_at, execution_id) OPERATOR(pg_catalog.<=) ($4, $5)"
								  " ORDER BY scheduled_at, execution_id LIMIT 1 FOR UPDATE SKIP LOCKED",
								  5, (Oid[]) {TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDOID}),
						 values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for due jobs behind a claim position failed");
	if (SPI_processed == 0)
		return false;
	key->scheduled_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	memcpy(&key->execution_id, DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
		   sizeof(pg_uuid_t));
	*updated_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	return true;
}

/*
 * The claim positions' safety net (executor 0, every 10 s or less often,
 * see executor.c): a due job that no claim holds and that is before its
 * level's position would never be claimed; every commit that puts a job there lowers the position, so there
 * should be none. Each one found moves its level's position back to it, and
 * one there for more than a second (not a commit about to lower it) is
 * logged. This walks what the claims skip (under a long-held snapshot, the
 * entries of every job finished since), but in one executor, with the
 * others claiming meanwhile: forgetting the positions instead would make
 * every claim walk it.
 */
void
VqCheckClaimPositions(VqRegistry *registry, TimestampTz now)
{
	VqClaimScan *levels = palloc(sizeof(VqClaimScan) * VQ_MAX_CLAIM_LEVELS);
	int			index_scans = VqIndexScansBegin();
	HASH_SEQ_STATUS seq;
	VqQueue    *q;

	hash_seq_init(&seq, registry->queue_hash);
	while ((q = hash_seq_search(&seq)) != NULL)
	{
		int			n;

		if (!VqClaimPositionsLevels(VqMyDatabaseSlot, q->name, levels, &n))
			continue;			/* claimed the plain way */
		for (int i = 0; i < n; i++)
		{
			VqClaimKey	key;
			TimestampTz updated_at;

			CHECK_FOR_INTERRUPTS();
			if (levels[i].from.scheduled_at == DT_NOBEGIN ||
				!JobBehindPosition(q, &levels[i], now, &key, &updated_at))
				continue;
			VqClaimPositionMoveBack(VqMyDatabaseSlot, q->name, levels[i].priority, key.scheduled_at);
			if (TimestampDifferenceExceeds(updated_at, now, 1000))
				ereport(LOG,
						(errmsg("vq_job: a due job of queue \"%s\" (priority %d, scheduled at %s) was behind the claim position; claims go back to it",
								q->name, levels[i].priority, timestamptz_to_str(key.scheduled_at))));
		}
	}
	VqIndexScansEnd(index_scans);
	pfree(levels);
}

/*
 * Executor 0, with the claim positions check: move each pull position back to
 * an announced job no consumer took that lies behind it (LOG it when it was
 * there for more than a second: something moved the position past it).
 */
void
VqCheckPullPositions(TimestampTz now)
{
	static SPIPlanPtr behind_plan = NULL;
	VqPullPosition *positions = palloc(sizeof(VqPullPosition) * VQ_MAX_PULL_HANDLERS);
	int			n = VqPullPositions(positions, VQ_MAX_PULL_HANDLERS);
	int			index_scans = VqIndexScansBegin();

	for (int i = 0; i < n; i++)
	{
		Datum		values[4];
		VqPullKey	key;
		bool		isnull;
		TimestampTz updated_at;

		CHECK_FOR_INTERRUPTS();
		values[0] = CStringGetTextDatum(positions[i].handler);
		VqPullKeyDatums(&positions[i].pos, &values[1]);
		if (SPI_execute_plan(VqKeepPlan(&behind_plan,
								  "SELECT priority, scheduled_at, execution_id, updated_at FROM vq.job_active"
								  " WHERE handler OPERATOR(pg_catalog.=) $1 AND" VQ_WAITING_FOR_CONSUMER
								  " AND " VQ_PULL_KEY " OPERATOR(pg_catalog.<=) ROW($2, $3, $4)"
								  " ORDER BY OPERATOR(pg_catalog.-) (priority::pg_catalog.int8), scheduled_at, execution_id"
								  " LIMIT 1",
								  4, (Oid[]) {TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID}),
							 values, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: looking behind a pull position failed");
		if (SPI_processed == 0)
			continue;
		key = VqRowPullKey(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, 2, 3);
		updated_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 4, &isnull));
		VqPullPositionLower(positions[i].handler, &key);
		if (TimestampDifferenceExceeds(updated_at, now, 1000))
			ereport(LOG,
					(errmsg("vq_job: an announced job of handler \"%s\" (priority %d, scheduled at %s) was behind the pull position; pulls go back to it",
							positions[i].handler, (int) -key.neg_priority, timestamptz_to_str(key.scheduled_at))));
	}
	VqIndexScansEnd(index_scans);
	pfree(positions);
}

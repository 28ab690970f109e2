/*
 * poscheck.c: the positions' safety net. Claims and takes scan each priority
 * level of a lane (a queue's function jobs, or one external handler's jobs in
 * a queue) from its claim position (claimpos.c); every commit that puts a job
 * behind a position lowers it, so none should be there. Executor 0 looks
 * every 10 s (less often when a look takes long, see executor.c) for a job
 * behind each position, moves the position back to any it finds, and logs
 * one that was there for more than a second (not a commit about to lower
 * it): something moved the position past it.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "main/shmem.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "claim/claimpos.h"
#include "claim/poscheck.h"

/*
 * The first due job of a level that is before the level's position and that
 * no claim holds; false if none. Its updated_at tells how long it has been
 * there. handler NULL: a queue's function jobs; else that external handler's.
 */
static bool
JobBehindPosition(const char *queue, const char *handler, VqClaimScan *level, TimestampTz now, VqClaimKey *key,
				  TimestampTz *updated_at)
{
	static SPIPlanPtr claim_plan = NULL;
	static SPIPlanPtr take_plan = NULL;
	Datum		values[6];
	bool		isnull;
	int			rc;

#define BEHIND(predicate) \
	"SELECT scheduled_at, execution_id, updated_at FROM vq.job_active" \
	" WHERE queue OPERATOR(pg_catalog.=) $1 AND" predicate \
	" AND priority OPERATOR(pg_catalog.=) $2" \
	" AND scheduled_at OPERATOR(pg_catalog.<=) $3" \
	" AND (scheduled_at, execution_id) OPERATOR(pg_catalog.<=) ($4, $5)"
#define BEHIND_ORDER " ORDER BY scheduled_at, execution_id LIMIT 1 FOR UPDATE SKIP LOCKED"

	values[0] = CStringGetTextDatum(queue);
	values[1] = Int32GetDatum(level->priority);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(level->from.scheduled_at);
	values[4] = UUIDPGetDatum(&level->from.execution_id);
	if (handler == NULL)
		rc = SPI_execute_plan(VqKeepPlan(&claim_plan, BEHIND(VQ_CLAIMABLE) BEHIND_ORDER,
										 5, (Oid[]) {TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDOID}),
							  values, NULL, false, 1);
	else
	{
		values[5] = CStringGetTextDatum(handler);
		rc = SPI_execute_plan(VqKeepPlan(&take_plan,
										 BEHIND(VQ_TAKEABLE) " AND handler OPERATOR(pg_catalog.=) $6" BEHIND_ORDER,
										 6, (Oid[]) {TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID, UUIDOID, TEXTOID}),
							  values, NULL, false, 1);
	}
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for due jobs behind a claim position failed");
	if (SPI_processed == 0)
		return false;
	key->scheduled_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	memcpy(&key->execution_id, DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
		   sizeof(pg_uuid_t));
	*updated_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull));
	return true;
}

/* Check the levels of one lane: move each position back to a due job behind it. */
static void
CheckLane(const char *lane, TimestampTz now, VqClaimScan *levels)
{
	char		queue[VQ_LANE_MAX + 1];
	char	   *handler;
	int			n;

	strlcpy(queue, lane, sizeof(queue));
	handler = strchr(queue, '/');	/* ("queue/handler": an external handler's lane) */
	if (handler != NULL)
		*handler++ = '\0';
	if (!VqClaimPositionsLevels(VqMyDatabaseSlot, lane, levels, &n))
		return;					/* claimed the plain way */
	for (int i = 0; i < n; i++)
	{
		VqClaimKey	key;
		TimestampTz updated_at;

		CHECK_FOR_INTERRUPTS();
		if (levels[i].from.scheduled_at == DT_NOBEGIN ||
			!JobBehindPosition(queue, handler, &levels[i], now, &key, &updated_at))
			continue;
		VqClaimPositionMoveBack(VqMyDatabaseSlot, lane, levels[i].priority, key.scheduled_at);
		if (TimestampDifferenceExceeds(updated_at, now, 1000))
			ereport(LOG,
					(errmsg("vq_job: a due job of %s \"%s\" (priority %d, scheduled at %s) was behind the claim position; claims go back to it",
							handler ? "lane" : "queue", lane, levels[i].priority,
							timestamptz_to_str(key.scheduled_at))));
	}
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
	char		(*lanes)[VQ_LANE_MAX + 1] = palloc(sizeof(*lanes) * VQ_MAX_CLAIM_LANES);
	int			nlanes = VqClaimKnownLanes(VqMyDatabaseSlot, lanes, VQ_MAX_CLAIM_LANES);
	int			index_scans = VqIndexScansBegin();

	for (int i = 0; i < nlanes; i++)
		CheckLane(lanes[i], now, levels);
	VqIndexScansEnd(index_scans);
	pfree(levels);
	pfree(lanes);
}

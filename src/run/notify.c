/*
 * notify.c: the jobs of NOTIFY handlers. An executor announces such a job
 * instead of running it: the row is committed as RUNNING with no executor
 * (only its consumer's reply or the timeout ends it) and pg_notify names it
 * on the handler's channel. An announced job no consumer took within
 * vq.notify_take_timeout_ms holds no capacity and waits; the executors
 * announce it again while its queue has room and nothing due.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/guc.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "claim/claim.h"
#include "claim/inflight.h"
#include "claim/pullpos.h"
#include "state/outcome.h"
#include "run/interceptors.h"
#include "run/notify.h"

/* Send a job's announcement on its channel (at commit). */
static void
Announce(const char *channel, pg_uuid_t *execution_id, int32 attempt)
{
	char	   *uuid = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(execution_id)));

	Async_Notify(channel, psprintf("{\"execution_id\": \"%s\", \"attempt\": %d}", uuid, attempt));
}

/*
 * Announce a NOTIFY handler's job on its channel; it is RUNNING until its
 * reply or the timeout. The announcement names the job and nothing else: any
 * role may LISTEN on any channel, so the payload and metadata are read with
 * vq_take / vq_pull, which check who is asking.
 */
void
VqDispatchNotify(VqJob *job, const char *channel)
{
	VqInterceptDispatch(job);
	VqPersistRunning(job, true, GetCurrentTimestamp());
	Announce(channel, &job->execution_id, job->attempt_number);
	VqNoteAnnounced(job->queue);
	VqNotePullAnnounced(job->handler, job->priority, job->scheduled_at, &job->execution_id);
}

/* Jobs of the handler waiting after from (its pull position: none waits before it) and announced by $1. */
#define WAITING_SINCE \
	" handler OPERATOR(pg_catalog.=) $2 AND" VQ_WAITING_FOR_CONSUMER \
	" AND " VQ_PULL_KEY " OPERATOR(pg_catalog.>) ROW($3, $4, $5) AND started_at OPERATOR(pg_catalog.<=) $1"

/*
 * Announce again up to room jobs of a handler in a queue that waited since
 * $1 (values: $1 .. $5 as WAITING_SINCE wants them), in pull order.
 */
static void
AnnounceAgain(Datum *values, VqQueue *queue, int room, TimestampTz now)
{
	static SPIPlanPtr announce_plan = NULL;

	values[5] = queue->name_datum;
	values[6] = Int32GetDatum(room);
	values[7] = TimestampTzGetDatum(now);
	/* (by id, not a join, and by job_pull_idx: see vq_pull's TakeWaitingJobs) */
	if (SPI_execute_plan(VqKeepPlan(&announce_plan,
							  "UPDATE vq.job_active j SET started_at = $8, updated_at = $8"
							  " WHERE j.execution_id OPERATOR(pg_catalog.=) ANY (ARRAY("
							  "  SELECT execution_id FROM vq.job_active WHERE" WAITING_SINCE
							  "  AND queue OPERATOR(pg_catalog.=) $6"
							  "  ORDER BY OPERATOR(pg_catalog.-) (priority::pg_catalog.int8), scheduled_at, execution_id"
							  "  LIMIT $7 FOR UPDATE SKIP LOCKED))"
							  " RETURNING j.execution_id, j.attempt_number, j.handler_address",
							  8, (Oid[]) {TIMESTAMPTZOID, TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID, TEXTOID,
								  INT4OID, TIMESTAMPTZOID}),
						 values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "vq_job: announcing NOTIFY jobs again failed");
	for (uint64 k = 0; k < SPI_processed; k++)
	{
		HeapTuple	tup = SPI_tuptable->vals[k];
		bool		isnull;
		char	   *address = SPI_getvalue(tup, SPI_tuptable->tupdesc, 3);

		if (strncmp(address, "notify:", 7) == 0)
			Announce(address + 7, DatumGetUUIDP(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull)),
					 DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull)));
		/* (counted again: it was not, once its take timeout passed) */
		VqNoteAnnounced(queue->name);
	}
}

/*
 * Announce again NOTIFY jobs that no consumer took within
 * vq.notify_take_timeout_ms (they hold no capacity meanwhile, and no attempt
 * is consumed): for one queue that has some, as many as its free capacity
 * allows, and only while none of its jobs is due. Each counts against the
 * capacity again for a take timeout. Each handler's waiting jobs are looked
 * for after its pull position (pullpos.c), not among every answered job's
 * row versions. In the caller's transaction; returns true when room was
 * reserved (release it after the commit).
 */
bool
VqReannounceWaiting(VqRegistry *registry, TimestampTz now)
{
	static SPIPlanPtr queues_plan = NULL;
	HASH_SEQ_STATUS seq;
	VqHandler  *handler;
	Datum		values[8];
	int			index_scans;

	values[0] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, -(int64) vq_notify_take_timeout_ms));
	index_scans = VqIndexScansBegin();
	hash_seq_init(&seq, registry->handler_hash);
	while ((handler = hash_seq_search(&seq)) != NULL)
	{
		List	   *queues = NIL;
		VqPullKey	from;
		ListCell   *lc;

		if (handler->is_function)
			continue;
		from = VqPullPositionOf(handler->name);
		values[1] = handler->name_datum;
		VqPullKeyDatums(&from, &values[2]);
		if (SPI_execute_plan(VqKeepPlan(&queues_plan,
								  "SELECT DISTINCT queue FROM vq.job_active WHERE" WAITING_SINCE,
								  5, (Oid[]) {TIMESTAMPTZOID, TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID}),
							 values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: looking for unannounced NOTIFY jobs failed");
		for (uint64 i = 0; i < SPI_processed; i++)
			queues = lappend(queues, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		foreach(lc, queues)		/* (the statements below replace SPI_tuptable) */
		{
			VqQueue    *queue = VqLookupQueue(registry, lfirst(lc));
			int			room = queue ? VqRoomToReannounce(registry, queue, now) : 0;

			if (room == 0)
				continue;
			AnnounceAgain(values, queue, room, now);
			hash_seq_term(&seq);
			VqIndexScansEnd(index_scans);
			return true;		/* one queue per call: the reservation is per queue */
		}
	}
	VqIndexScansEnd(index_scans);
	return false;
}
#undef WAITING_SINCE

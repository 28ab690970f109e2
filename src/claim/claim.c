/*
 * claim.c: choosing what an executor claims.
 *
 * Polling. Each queue is polled every sleep_delay_ms; while a queue is empty
 * the interval doubles up to 4x, capped at 60 s, and resets when work is
 * found. A committed due enqueue (or a due time that passed) makes every
 * queue due for a poll at once. Queues are visited in a rotating order, so
 * that one busy queue cannot starve the others; an executor just woken from
 * sleep looks first at the queue the wake-up named (the common case of one
 * job enqueued into an idle system) instead of polling empty queues before
 * it; busy executors do not sleep, so they keep the plain rotation.
 *
 * Capacity. A queue runs at most instances x max_concurrent_jobs jobs at
 * once, counted across the database's executors in shared memory: before a
 * claim, an executor reserves room under the database slot's lock (its own
 * "claimed" count, which the other executors read there), and lowers the
 * count as its jobs finish. Announced NOTIFY jobs hold capacity too (they
 * are counted in the table). An executor that finds a queue at capacity
 * says so in its entry; one whose jobs of that queue finish wakes it.
 *
 * The claim takes up to min(vq.batch_size, room) due jobs, highest priority
 * first then earliest scheduled_at, FOR UPDATE SKIP LOCKED, so no two
 * executors ever hold the same job.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "main/guc.h"
#include "main/job.h"
#include "main/limits.h"
#include "main/shmem.h"
#include "main/wake.h"
#include "util/spi_util.h"
#include "claim/claim.h"
#include "claim/claimpos.h"
#include "claim/inflight.h"

/* Local polling schedule of one queue. */
typedef struct QueuePoll
{
	char		name[VQ_NAME_MAX + 1];	/* hash key */
	int			delay_ms;		/* current interval: base, doubled while empty */
	TimestampTz next_poll;
	bool		seen;
} QueuePoll;

static HTAB *queue_polls = NULL;
static int	queue_rotation = 0;
static SPIPlanPtr claim_plan = NULL;

/* Set up this executor's polling schedule (once per executor). */
void
VqClaimInit(void)
{
	queue_polls = VqNameTable("vq_job queue polls", 16, sizeof(QueuePoll), TopMemoryContext);
}

/* Bring the local polling schedule in line with the configured queues. */
void
VqSyncQueuePolls(VqRegistry *registry, TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;
	VqQueue    *q;

	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		p->seen = false;
	hash_seq_init(&seq, registry->queue_hash);
	while ((q = hash_seq_search(&seq)) != NULL)
	{
		bool		found;

		p = hash_search(queue_polls, q->name, HASH_ENTER, &found);
		if (!found)
		{
			p->delay_ms = q->sleep_delay_ms;
			p->next_poll = now;
		}
		p->seen = true;
	}
	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		if (!p->seen)
			hash_search(queue_polls, p->name, HASH_REMOVE, NULL);
}

/* Poll every queue at once. */
void
VqPollAllNow(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;

	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		p->next_poll = now;
}

/* When the next queue poll is due (now + 60 s at the latest). */
TimestampTz
VqNextQueuePoll(TimestampTz now)
{
	TimestampTz next = TimestampTzPlusMilliseconds(now, 60000);
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;

	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		next = Min(next, p->next_poll);
	return next;
}

/* After a poll: reset the interval when work was found, else double it (up to 4x base, 60 s). */
static void
Reschedule(QueuePoll *p, VqQueue *q, bool found_work, TimestampTz now)
{
	if (found_work)
	{
		p->delay_ms = q->sleep_delay_ms;
		p->next_poll = now;
		return;
	}
	p->next_poll = TimestampTzPlusMilliseconds(now, p->delay_ms);
	p->delay_ms = Min(Min((int64) p->delay_ms * 2, (int64) q->sleep_delay_ms * 4), 60000);
}

/*
 * Reserve room for up to want jobs of a queue whose capacity is cap; returns
 * how many may be claimed (the reservation is this executor's "claimed"
 * count until it is lowered again) and, in *others, how many the other
 * executors hold; in *notify_bound, the queue's bound of NOTIFY jobs in
 * flight (-1: none known), read at the same moment.
 */
static int
ReserveCapacity(const char *queue, int cap, int want, int *others, int *notify_bound)
{
	VqExecutorSlot *me = VqMyExecutorSlot;
	int			n;

	*others = 0;
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

		if (e != me && e->pid != 0 && e->claimed > 0 && strcmp(e->queue, queue) == 0)
			*others += e->claimed;
	}
	n = Max(0, Min(want, cap - *others));
	strlcpy(me->queue, queue, sizeof(me->queue));
	me->claimed = n;
	strlcpy(me->capacity_wait, n == 0 ? queue : "", sizeof(me->capacity_wait));
	*notify_bound = VqNotifyBoundLocked(VqMyDatabaseSlot, queue);
	LWLockRelease(VqMyDatabaseSlot->lock);
	return n;
}

/*
 * An executor takes or leaves its entry: it has claimed nothing, waits for
 * no queue and runs no limited handler (caller holds the slot's lock).
 */
void
VqClaimAccountingReset(VqExecutorSlot *e)
{
	e->queue[0] = '\0';
	e->claimed = 0;
	e->capacity_wait[0] = '\0';
	e->limited_handler[0] = '\0';
}

/* Set this executor's count of claimed, unfinished jobs (see claim.h). */
void
VqSetClaimed(int n, bool jobs_finished)
{
	VqExecutorSlot *me = VqMyExecutorSlot;
	bool		someone_waits = false;

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	if (jobs_finished && n < me->claimed)
	{
		for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		{
			VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

			if (e != me && e->pid != 0 && strcmp(e->capacity_wait, me->queue) == 0)
				someone_waits = true;
		}
	}
	me->claimed = n;
	LWLockRelease(VqMyDatabaseSlot->lock);
	if (someone_waits)
		VqWakeExecutors(VqMyDatabase, true, 0, 0);
}

/*
 * How many jobs of a queue this executor may claim now (0: at capacity, or
 * paused). Leaves that many reserved.
 */
static int
RoomInQueue(VqRegistry *registry, VqQueue *queue, TimestampTz now)
{
	int			cap = queue->instances * queue->max_concurrent_jobs;
	int			others;
	int			notify_bound;
	int			room = ReserveCapacity(queue->name, cap, vq_batch_size, &others, &notify_bound);

	if (room > 0 && registry->has_notify_handlers)
	{
		/*
		 * Jobs workers took hold capacity too. The bound was read with the
		 * reservation, and a count is made after it: a take is in the bound
		 * from before its scan until its transaction ends, and in the table
		 * after (inflight.c). Counting only when the bound leaves too little
		 * room keeps claims from walking the queue's taken jobs each time.
		 */
		if (notify_bound < 0 || cap - others - notify_bound < room)
			notify_bound = VqCountNotifyInFlight(queue);
		room = Min(room, Max(0, cap - others - notify_bound));
		if (room == 0)
			VqSetClaimed(0, false);
	}
	return room;
}

/* Copy one claimed row out of SPI memory (into the current memory context). */
static VqJob *
CopyJob(HeapTuple tup, TupleDesc desc)
{
	VqJob	   *job = palloc0(sizeof(VqJob));
	bool		isnull;
	Datum		d;

	memcpy(&job->execution_id, DatumGetUUIDP(SPI_getbinval(tup, desc, 1, &isnull)), sizeof(pg_uuid_t));
	job->job_id = SPI_getvalue(tup, desc, 2);
	job->handler = SPI_getvalue(tup, desc, 3);
	job->address = SPI_getvalue(tup, desc, 4);
	job->queue = SPI_getvalue(tup, desc, 5);
	job->priority = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	job->attempt_number = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	job->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
	job->scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 9, &isnull));
	d = SPI_getbinval(tup, desc, 10, &isnull);
	job->payload = isnull ? NULL : DatumGetJsonbPCopy(d);
	job->metadata = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 11, &isnull));
	job->enqueued_by = DatumGetObjectId(SPI_getbinval(tup, desc, 12, &isnull));
	d = SPI_getbinval(tup, desc, 13, &isnull);
	job->handler_fn = isnull ? InvalidOid : DatumGetObjectId(d);
	return job;
}

/* How many executors run a job of this limited handler now (slot lock held). */
static int
RunningOfHandler(const char *handler)
{
	int			n = 0;

	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

		if (e->pid != 0 && strcmp(e->limited_handler, handler) == 0)
			n++;
	}
	return n;
}

/*
 * The handlers whose max_running is reached now (a text[] of names, *n of
 * them): their jobs are left out of claims, so they never take a shared
 * queue's capacity from the other handlers.
 */
static Datum
HandlersAtLimit(VqRegistry *registry, int *n)
{
	Datum	   *names = palloc(sizeof(Datum) * Max(registry->nhandlers, 1));

	*n = 0;
	if (registry->has_limited_handlers)
	{
		LWLockAcquire(VqMyDatabaseSlot->lock, LW_SHARED);
		for (int i = 0; i < registry->nhandlers; i++)
		{
			VqHandler  *h = registry->handlers[i];

			if (h->max_running > 0 && RunningOfHandler(h->name) >= h->max_running)
				names[(*n)++] = h->name_datum;
		}
		LWLockRelease(VqMyDatabaseSlot->lock);
	}
	return PointerGetDatum(construct_array(names, *n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * Before running a job of a handler with max_running: take one of its turns
 * (false: all are taken; the job is released). Claims leave such handlers out
 * already; this closes the race between two executors' claims.
 */
bool
VqTakeHandlerTurn(VqHandler *handler)
{
	bool		ok;

	if (handler == NULL || handler->max_running <= 0)
		return true;
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	ok = RunningOfHandler(handler->name) < handler->max_running;
	if (ok)
		strlcpy(VqMyExecutorSlot->limited_handler, handler->name, sizeof(VqMyExecutorSlot->limited_handler));
	LWLockRelease(VqMyDatabaseSlot->lock);
	return ok;
}

/* The job of a limited handler ended: give its turn back, and let the executors claim its next one. */
void
VqEndHandlerTurn(void)
{
	if (VqMyExecutorSlot->limited_handler[0] == '\0')
		return;
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	VqMyExecutorSlot->limited_handler[0] = '\0';
	LWLockRelease(VqMyDatabaseSlot->lock);
	VqWakeExecutors(VqMyDatabase, true, 0, 0);
}

#define CLAIM_COLUMNS \
	"SELECT execution_id, job_id, handler, handler_address, queue, priority," \
	" attempt_number, max_attempts, scheduled_at, payload, metadata, enqueued_by, handler_function" \
	" FROM vq.job_active" \
	" WHERE queue OPERATOR(pg_catalog.=) $1" \
	" AND" VQ_CLAIMABLE \
	" AND scheduled_at OPERATOR(pg_catalog.<=) $2" \
	" AND handler OPERATOR(pg_catalog.<>) ALL ($3)"

/* Append the rows the last claim statement returned to jobs, copied into mcxt. */
static List *
CopyJobs(List *jobs, MemoryContext mcxt)
{
	MemoryContext old = MemoryContextSwitchTo(mcxt);

	for (uint64 i = 0; i < SPI_processed; i++)
		jobs = lappend(jobs, CopyJob(SPI_tuptable->vals[i], SPI_tuptable->tupdesc));
	MemoryContextSwitchTo(old);
	return jobs;
}

/*
 * Claim up to n due jobs of a queue from the start of claim order (row locks
 * only), but none of the handlers in excluded (text[]).
 */
static List *
ClaimFromStart(VqQueue *queue, int n, TimestampTz now, Datum excluded, MemoryContext mcxt)
{
	Datum		values[4] = {queue->name_datum, TimestampTzGetDatum(now), excluded, Int32GetDatum(n)};

	if (SPI_execute_plan(VqKeepGenericPlan(&claim_plan,
								  CLAIM_COLUMNS
								  " ORDER BY priority DESC, scheduled_at, execution_id"
								  " LIMIT $4 FOR UPDATE SKIP LOCKED",
								  4, (Oid[]) {TEXTOID, TIMESTAMPTZOID, TEXTARRAYOID, INT4OID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: claim failed");
	return CopyJobs(NIL, mcxt);
}

/*
 * Claim up to n due jobs of one priority level, after its position, but none
 * of the handlers in excluded (text[]); appends them to jobs. With handlers
 * excluded, the position stays: it must never pass a job left behind.
 */
static List *
ClaimFromLevel(VqQueue *queue, VqClaimScan *scan, int n, TimestampTz now, Datum excluded, bool excluding,
			   MemoryContext mcxt, List *jobs)
{
	static SPIPlanPtr level_plan = NULL;
	Datum		values[7];
	VqJob	   *last;

	values[0] = queue->name_datum;
	values[1] = TimestampTzGetDatum(now);
	values[2] = excluded;
	values[3] = Int32GetDatum(scan->priority);
	values[4] = TimestampTzGetDatum(scan->from.scheduled_at);
	values[5] = UUIDPGetDatum(&scan->from.execution_id);
	values[6] = Int32GetDatum(n);
	if (SPI_execute_plan(VqKeepGenericPlan(&level_plan,
								  CLAIM_COLUMNS
								  " AND priority OPERATOR(pg_catalog.=) $4"
								  " AND (scheduled_at, execution_id) OPERATOR(pg_catalog.>) ($5, $6)"
								  " ORDER BY scheduled_at, execution_id"
								  " LIMIT $7 FOR UPDATE SKIP LOCKED",
								  7, (Oid[]) {TEXTOID, TIMESTAMPTZOID, TEXTARRAYOID, INT4OID, TIMESTAMPTZOID,
								  UUIDOID, INT4OID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: claim failed");
	if (SPI_processed == 0)
		return jobs;
	jobs = CopyJobs(jobs, mcxt);
	if (excluding)
		return jobs;
	last = llast(jobs);
	scan->took = true;
	scan->last.scheduled_at = last->scheduled_at;
	scan->last.execution_id = last->execution_id;
	return jobs;
}

/*
 * Find the priority levels that have ENQUEUED jobs in a queue (one index
 * probe per level) and tell the positions; claims then scan each level from
 * its position. Done once per queue after the executors start or forgot
 * their positions.
 */
static void
LearnLevels(VqQueue *queue)
{
	static SPIPlanPtr levels_plan = NULL;
	int32		priorities[VQ_MAX_CLAIM_LEVELS];
	uint64		misses = VqClaimPositionsMisses(VqMyDatabaseSlot);
	int			n;

	if (SPI_execute_plan(VqKeepPlan(&levels_plan,
								  "WITH RECURSIVE l(p) AS ("
								  " SELECT pg_catalog.max(priority) FROM vq.job_active"
								  "  WHERE queue OPERATOR(pg_catalog.=) $1 AND" VQ_CLAIMABLE
								  " UNION ALL"
								  " SELECT (SELECT pg_catalog.max(priority) FROM vq.job_active"
								  "  WHERE queue OPERATOR(pg_catalog.=) $1 AND" VQ_CLAIMABLE
								  "  AND priority OPERATOR(pg_catalog.<) l.p)"
								  " FROM l WHERE l.p IS NOT NULL)"
								  " SELECT p FROM l WHERE p IS NOT NULL LIMIT $2",
								  2, (Oid[]) {TEXTOID, INT4OID}),
						 (Datum[]) {queue->name_datum, Int32GetDatum(VQ_MAX_CLAIM_LEVELS + 1)},
						 NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: finding a queue's priority levels failed");
	n = (int) Min(SPI_processed, VQ_MAX_CLAIM_LEVELS);
	for (int i = 0; i < n; i++)
	{
		bool		isnull;

		priorities[i] = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
	}
	VqClaimPositionsLearn(VqMyDatabaseSlot, queue->name, priorities, n, SPI_processed > VQ_MAX_CLAIM_LEVELS,
						  misses);
}

/*
 * Claim up to n due jobs of a queue (row locks only); returns them in claim
 * order, in mcxt. Each priority level is scanned from where the claims got to
 * (claimpos.c); a queue whose levels are not known is claimed from the start.
 */
static List *
ClaimJobsByIndex(VqRegistry *registry, VqQueue *queue, int n, TimestampTz now, MemoryContext mcxt)
{
	VqClaimScan *scans = palloc(sizeof(VqClaimScan) * VQ_MAX_CLAIM_LEVELS);
	int			nscans;
	List	   *jobs = NIL;
	int			nexcluded;
	Datum		excluded = HandlersAtLimit(registry, &nexcluded);

	if (!VqClaimPositionsBegin(VqMyDatabaseSlot, VqMyExecutorIndex, queue->name, scans, &nscans))
	{
		if (VqMyDatabaseSlot->positions.overflow)	/* (read unlocked: a hint) */
			return ClaimFromStart(queue, n, now, excluded, mcxt);
		LearnLevels(queue);
		if (!VqClaimPositionsBegin(VqMyDatabaseSlot, VqMyExecutorIndex, queue->name, scans, &nscans))
			return ClaimFromStart(queue, n, now, excluded, mcxt);
	}
	for (int i = 0; i < nscans && list_length(jobs) < n; i++)
		jobs = ClaimFromLevel(queue, &scans[i], n - list_length(jobs), now, excluded, nexcluded > 0, mcxt, jobs);
	VqClaimPositionsEnd(VqMyDatabaseSlot, VqMyExecutorIndex, queue->name, scans, nscans);
	return jobs;
}

/* ClaimJobsByIndex, planned as ordered index scans whatever the statistics say (spi_util.h). */
static List *
ClaimJobs(VqRegistry *registry, VqQueue *queue, int n, TimestampTz now, MemoryContext mcxt)
{
	int			level = VqIndexScansBegin();
	List	   *jobs = ClaimJobsByIndex(registry, queue, n, now, mcxt);

	VqIndexScansEnd(level);
	return jobs;
}

/*
 * The queues in the order to visit them: rotating, with the queue the last
 * wake-up named (if use_hint) moved to the front. Returns how many.
 */
static int
VisitOrder(bool use_hint, QueuePoll ***order_out)
{
	int			nqueues = hash_get_num_entries(queue_polls);
	QueuePoll **order = palloc(sizeof(QueuePoll *) * Max(nqueues, 1));
	QueuePoll **rotated = palloc(sizeof(QueuePoll *) * Max(nqueues, 1));
	uint32		hint = use_hint ? VqTakeDueQueueHint(VqMyDatabaseSlot) : 0;
	HASH_SEQ_STATUS seq;
	QueuePoll  *p;
	int			i = 0;

	hash_seq_init(&seq, queue_polls);
	while ((p = hash_seq_search(&seq)) != NULL)
		order[i++] = p;
	queue_rotation++;
	for (int k = 0; k < nqueues; k++)
		rotated[k] = order[(k + queue_rotation) % nqueues];
	for (int k = 1; hint != 0 && k < nqueues; k++)
	{
		if (VqNameHash(rotated[k]->name) == hint)
		{
			QueuePoll  *tmp = rotated[0];

			rotated[0] = rotated[k];
			rotated[k] = tmp;
			break;
		}
	}
	*order_out = rotated;
	return nqueues;
}

/* Claim from the first queue that is due for a poll and has due jobs and room (see claim.h). */
bool
VqClaimNext(VqRegistry *registry, TimestampTz now, bool use_hint, MemoryContext mcxt, VqClaim *claim)
{
	QueuePoll **order;
	int			nqueues = VisitOrder(use_hint, &order);

	claim->queue = NULL;
	claim->jobs = NIL;
	for (int k = 0; k < nqueues; k++)
	{
		QueuePoll  *poll = order[k];
		VqQueue    *queue = VqLookupQueue(registry, poll->name);
		int			room;

		if (queue == NULL || poll->next_poll > now)
			continue;
		/* a paused queue costs a look per sleep_delay_ms, like one at capacity */
		room = queue->paused ? 0 : RoomInQueue(registry, queue, now);
		if (room == 0)
		{
			/* at capacity: whoever frees room wakes us; until then, poll as usual */
			poll->next_poll = TimestampTzPlusMilliseconds(now, queue->sleep_delay_ms);
			continue;
		}
		claim->jobs = ClaimJobs(registry, queue, room, now, mcxt);
		Reschedule(poll, queue, claim->jobs != NIL, now);
		VqSetClaimed(list_length(claim->jobs), false);
		if (claim->jobs == NIL)
			continue;
		claim->queue = queue;
		/* a full batch: more may be due; let another executor help */
		if (list_length(claim->jobs) == room)
			VqWakeExecutors(VqMyDatabase, true, 0, 0);
		return true;
	}
	return false;
}

/* The earliest scheduled_at of any ENQUEUED job still in the future (plain query over every queue). */
static TimestampTz
EarliestFutureDueAnywhere(TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[1] = {TimestampTzGetDatum(now)};
	bool		isnull;
	Datum		d;

	if (SPI_execute_plan(VqKeepPlan(&plan,
								  "SELECT pg_catalog.min(scheduled_at) FROM vq.job_active"
								  " WHERE state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state"
								  " AND scheduled_at OPERATOR(pg_catalog.>) $1",
								  1, (Oid[]) {TIMESTAMPTZOID}),
						 values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for the next due job failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? VQ_NO_NEXT_DUE : DatumGetTimestampTz(d);
}

/*
 * The result of a next-due probe just run (SPI_execute_plan's rc): the
 * scheduled_at of its one row, or VQ_NO_NEXT_DUE when it found none.
 */
TimestampTz
VqNextDueResult(int rc)
{
	bool		isnull;

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for the next due job failed");
	if (SPI_processed == 0)
		return VQ_NO_NEXT_DUE;
	return DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* The earliest scheduled_at of a queue's level still in the future, or VQ_NO_NEXT_DUE. */
static TimestampTz
EarliestFutureDueInLevel(VqQueue *queue, int32 priority, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[3] = {queue->name_datum, Int32GetDatum(priority), TimestampTzGetDatum(now)};

	return VqNextDueResult(SPI_execute_plan(VqKeepPlan(&plan,
								  "SELECT scheduled_at FROM vq.job_active"
								  " WHERE queue OPERATOR(pg_catalog.=) $1"
								  " AND state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state"
								  " AND priority OPERATOR(pg_catalog.=) $2"
								  " AND scheduled_at OPERATOR(pg_catalog.>) $3"
								  " ORDER BY scheduled_at LIMIT 1",
								  3, (Oid[]) {TEXTOID, INT4OID, TIMESTAMPTZOID}),
						 values, NULL, false, 1));
}

/*
 * The earliest scheduled_at of an ENQUEUED job still in the future, or
 * VQ_NO_NEXT_DUE: one index probe per known priority level (future jobs come
 * after the due ones in a level's order, so the probe starts at now and walks
 * no finished job); the plain query over the whole claim index when some
 * queue's levels are not known.
 */
static TimestampTz
EarliestFutureDue(VqRegistry *registry, TimestampTz now)
{
	VqClaimScan *scans = palloc(sizeof(VqClaimScan) * VQ_MAX_CLAIM_LEVELS);
	TimestampTz next = VQ_NO_NEXT_DUE;
	HASH_SEQ_STATUS seq;
	VqQueue    *q;

	hash_seq_init(&seq, registry->queue_hash);
	while ((q = hash_seq_search(&seq)) != NULL)
	{
		int			n;

		if (!VqClaimPositionsLevels(VqMyDatabaseSlot, q->name, scans, &n))
		{
			hash_seq_term(&seq);
			return EarliestFutureDueAnywhere(now);
		}
		for (int i = 0; i < n; i++)
			next = Min(next, EarliestFutureDueInLevel(q, scans[i].priority, now));
	}
	return next;
}

/* EarliestFutureDue, planned as ordered index scans (spi_util.h). */
TimestampTz
VqEarliestFutureDue(VqRegistry *registry, TimestampTz now)
{
	int			level = VqIndexScansBegin();
	TimestampTz next = EarliestFutureDue(registry, now);

	VqIndexScansEnd(level);
	return next;
}

/*
 * take.c: the takes of workers outside the server.
 *
 * An external handler's jobs are never claimed by the executors: a worker
 * takes them with vq_take_jobs, which makes up to max_jobs due jobs RUNNING
 * under a lease, in one statement per priority level. Each (queue, handler)
 * pair is a claim lane ("queue/handler") of the partial index job_take_idx,
 * with its claim positions (claimpos.c), so that a take starts where the last
 * one got to instead of walking the entries of every job taken since a held
 * snapshot began. A take is a claimer of the positions like an executor:
 * while its statement runs it holds one of VQ_MAX_TAKERS entries of the
 * database's slot (takers[], written here only), and it moves each level's
 * position when it ends. A take that finds no entry free scans from the
 * positions without moving them.
 *
 * What the positions need of a take, beyond what an executor's claim does:
 *  - its transaction may abort after the take moved positions past the jobs
 *    it took: the abort (or a subtransaction's, or a PREPARE, since a
 *    prepared transaction may still roll back) lowers each level again to the
 *    first job taken there, before the row locks go;
 *  - it may run in a transaction that keeps its snapshot (REPEATABLE READ):
 *    vq_take_jobs refuses that (a row taken by another worker since the
 *    snapshot would make it fail to serialize anyway);
 *  - a caller that is not granted the handler takes only the jobs of roles it
 *    is a member of, and must not move a position past the others' jobs: after
 *    taking, a fresh look for a job left behind between where it began and
 *    the last job it took limits the move to just before that job.
 * Capacity: every job taken holds its queue's capacity until the reply
 * (inflight.c reserves it before the scan); a handler's max_running is
 * counted in the table under a transaction advisory lock on the handler, so
 * two takes of a limited handler never both see room for the same turn.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/limits.h"
#include "main/shmem.h"
#include "main/wake.h"
#include "util/spi_util.h"
#include "claim/claim.h"
#include "claim/claimpos.h"
#include "claim/inflight.h"
#include "claim/take.h"

/* The advisory lock class of a limited handler's takes (the other key is the name's hash). */
#define TAKE_LOCK_CLASS 0x7671	/* "vq" */

/* One lane a take scans: a queue's jobs of one handler. */
typedef struct TakeLane
{
	VqHandler  *handler;
	int			handler_index;	/* in the request's handlers */
	VqQueue    *queue;
	char		name[VQ_LANE_MAX + 1];
	bool		positioned;		/* its levels are known: scanned from their positions */
	bool		granted;		/* the caller may take every job of the handler */
	int			nscans;
	VqClaimScan scans[VQ_MAX_CLAIM_LEVELS];
	int			quota[VQ_MAX_CLAIM_LEVELS]; /* merged takes: how many to take from each level ... */
	int			start_quota;	/* ... or from the start of a lane not positioned */
} TakeLane;

/* A job a merged take saw first, in claim order across its lanes. */
typedef struct Candidate
{
	TakeLane   *lane;
	int			level;			/* in lane->scans (-1: the lane is not positioned) */
	int32		priority;
	VqClaimKey	key;
} Candidate;

/* The columns every take statement returns, in the order of vq_take_jobs' result. */
#define TAKEN_COLUMNS \
	" execution_id, attempt_number, handler, job_id, payload, metadata, queue, priority," \
	" max_attempts, scheduled_at, lease_until"

/* This backend's entry in takers[] while a take runs (-1: none). */
static int	my_taker = -1;
static VqDatabaseSlot *my_taker_slot = NULL;
static bool taker_exit_registered = false;

/* ---- the takers' entries ---------------------------------------------------------- */

/* Give the entry back (at the end of the take, on its error, or when the process exits). */
static void
ReleaseTaker(void)
{
	if (my_taker < 0)
		return;
	LWLockAcquire(my_taker_slot->lock, LW_EXCLUSIVE);
	if (my_taker_slot->takers[my_taker].pid == MyProcPid)
		my_taker_slot->takers[my_taker].pid = 0;
	LWLockRelease(my_taker_slot->lock);
	my_taker = -1;
	my_taker_slot = NULL;
}

static void
ReleaseTakerAtExit(int code, Datum arg)
{
	ReleaseTaker();
}

/* Take a free entry of the slot: returns the claimer number (-1: none free, or no slot). */
static int
AcquireTaker(VqDatabaseSlot *slot)
{
	if (slot == NULL)
		return -1;
	if (!taker_exit_registered)
	{
		before_shmem_exit(ReleaseTakerAtExit, (Datum) 0);
		taker_exit_registered = true;
	}
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_TAKERS && my_taker < 0 && slot->dboid == MyDatabaseId; i++)
		if (slot->takers[i].pid == 0)
		{
			slot->takers[i].pid = MyProcPid;
			my_taker = i;
			my_taker_slot = slot;
		}
	LWLockRelease(slot->lock);
	return my_taker < 0 ? -1 : VQ_MAX_EXECUTORS + my_taker;
}

/* The launcher gives the slot to a database (see take.h). */
void
VqTakersForget(VqDatabaseSlot *slot)
{
	memset(slot->takers, 0, sizeof(slot->takers));
}

/* ---- undoing a take's moves when its transaction aborts ------------------------------ */

/* The first job each take of this transaction took in a level: where to lower it if it aborts. */
#define TAKEN_LEVELS 32
typedef struct TakenLevel
{
	char		lane[VQ_LANE_MAX + 1];
	char		handler[VQ_NAME_MAX + 1];
	int32		priority;
	TimestampTz scheduled_at;
} TakenLevel;

static TakenLevel taken_levels[TAKEN_LEVELS];
static int	n_taken_levels = 0;
static bool taken_overflow = false;
static bool undo_callbacks_registered = false;

static void
LowerTakenLocked(VqDatabaseSlot *slot, void *arg)
{
	if (taken_overflow)
		VqClaimPositionsForget(slot);
	else
		for (int i = 0; i < n_taken_levels; i++)
			VqClaimPositionLower(slot, taken_levels[i].lane, taken_levels[i].priority,
								 taken_levels[i].scheduled_at);
}

/* The takes of this transaction may be undone: lower the positions to their jobs, wake the workers. */
static void
UndoTakes(void)
{
	if (n_taken_levels == 0 && !taken_overflow)
		return;
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, LowerTakenLocked, NULL);
	for (int i = 0; i < n_taken_levels; i++)
		VqWakeTakers(MyDatabaseId, VqTakeWakeBit(VqNameHash(taken_levels[i].handler)));
	n_taken_levels = 0;
	taken_overflow = false;
}

static void
TakeXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PREPARE)
		UndoTakes();
	else if (event == XACT_EVENT_COMMIT)
	{
		n_taken_levels = 0;
		taken_overflow = false;
	}
}

static void
TakeSubXactCallback(SubXactEvent event, SubTransactionId mySubid, SubTransactionId parentSubid, void *arg)
{
	/* (every take of the transaction is lowered again: lowering needlessly costs a longer scan) */
	if (event == SUBXACT_EVENT_ABORT_SUB)
		UndoTakes();
}

/* A take took jobs of (lane, priority), the first of them due at scheduled_at. */
static void
NoteTakenLevel(const TakeLane *lane, int32 priority, TimestampTz scheduled_at)
{
	TakenLevel *t;

	if (!undo_callbacks_registered)
	{
		RegisterXactCallback(TakeXactCallback, NULL);
		RegisterSubXactCallback(TakeSubXactCallback, NULL);
		undo_callbacks_registered = true;
	}
	for (int i = 0; i < n_taken_levels; i++)
		if (taken_levels[i].priority == priority && strcmp(taken_levels[i].lane, lane->name) == 0)
		{
			taken_levels[i].scheduled_at = Min(taken_levels[i].scheduled_at, scheduled_at);
			return;
		}
	if (n_taken_levels == TAKEN_LEVELS)
	{
		taken_overflow = true;
		return;
	}
	t = &taken_levels[n_taken_levels++];
	strlcpy(t->lane, lane->name, sizeof(t->lane));
	strlcpy(t->handler, lane->handler->name, sizeof(t->handler));
	t->priority = priority;
	t->scheduled_at = scheduled_at;
}

/* ---- lanes and their levels --------------------------------------------------------- */

/* The levels holding external handlers' jobs, as a query found them. */
typedef struct FoundLevels
{
	int			n;
	char	  **lanes;			/* "queue/handler", in index order: a lane's levels together */
	int32	   *priorities;
} FoundLevels;

/*
 * Every level of an external handler's lane that has ENQUEUED jobs: a skip
 * scan of job_take_idx (planned as index scans: VqIndexScansBegin), one index
 * probe per level and two from one lane to the next, whatever the number of
 * handlers and queues.
 */
static void
FindLevels(FoundLevels *found)
{
	static SPIPlanPtr plan = NULL;

#define TAKE_IDX_ORDER " ORDER BY queue, handler, priority DESC LIMIT 1"
	if (SPI_execute_plan(VqKeepPlan(&plan,
								  "WITH RECURSIVE l(q, h, p) AS ("
								  " (SELECT queue, handler, priority FROM vq.job_active WHERE" VQ_TAKEABLE TAKE_IDX_ORDER ")"
								  " UNION ALL"
								  " SELECT n.queue, n.handler, n.priority FROM l CROSS JOIN LATERAL ("
								  "  (SELECT queue, handler, priority FROM vq.job_active"
								  "   WHERE queue OPERATOR(pg_catalog.=) l.q AND handler OPERATOR(pg_catalog.=) l.h"
								  "   AND" VQ_TAKEABLE " AND priority OPERATOR(pg_catalog.<) l.p" TAKE_IDX_ORDER ")"
								  "  UNION ALL"
								  "  (SELECT queue, handler, priority FROM vq.job_active"
								  "   WHERE" VQ_TAKEABLE " AND (queue, handler) OPERATOR(pg_catalog.>) (l.q, l.h)" TAKE_IDX_ORDER ")"
								  "  LIMIT 1) n)"
								  " SELECT q, h, p FROM l",
								  0, NULL),
						 NULL, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: finding the lanes with jobs failed");
	found->n = (int) SPI_processed;
	found->lanes = palloc(sizeof(char *) * Max(found->n, 1));
	found->priorities = palloc(sizeof(int32) * Max(found->n, 1));
	for (int i = 0; i < found->n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;

		found->lanes[i] = palloc(VQ_LANE_MAX + 1);
		VqLaneName(found->lanes[i], SPI_getvalue(tup, SPI_tuptable->tupdesc, 1),
				   SPI_getvalue(tup, SPI_tuptable->tupdesc, 2));
		found->priorities[i] = DatumGetInt32(SPI_getbinval(tup, SPI_tuptable->tupdesc, 3, &isnull));
	}
}

/*
 * The external lanes that may hold jobs (names): the known ones while they
 * are all those that hold jobs (claimpos.c); else the lanes a query finds
 * holding jobs, which it makes known when they fit (so that the next take
 * need not look).
 */
static List *
LanesWithJobs(VqDatabaseSlot *slot)
{
	List	   *lanes = NIL;
	uint64		misses = 0;
	FoundLevels found;

	if (slot != NULL && VqClaimExternalLanes(slot, &lanes, &misses))
		return lanes;
	list_free_deep(lanes);
	lanes = NIL;
	FindLevels(&found);
	if (slot != NULL && VqClaimLearnExternal(slot, misses, found.lanes, found.priorities, found.n))
	{
		if (VqClaimExternalLanes(slot, &lanes, &misses))
			return lanes;
		list_free_deep(lanes);
		lanes = NIL;
	}
	for (int i = 0; i < found.n; i++)
		if (i == 0 || strcmp(found.lanes[i], found.lanes[i - 1]) != 0)
			lanes = lappend(lanes, found.lanes[i]);
	return lanes;
}

/* Split a lane's name into its queue (room for VQ_LANE_MAX + 1) and handler; false if it is not an external lane. */
static bool
SplitLane(const char *lane, char *queue, const char **handler)
{
	char	   *slash;

	strlcpy(queue, lane, VQ_LANE_MAX + 1);
	slash = strchr(queue, '/');
	if (slash == NULL)
		return false;
	*slash = '\0';
	*handler = lane + (slash - queue) + 1;
	return true;
}

/* ---- one take ----------------------------------------------------------------------- */

/* The take in progress: its request, what it may still take, and where. */
typedef struct Take
{
	const VqTakeRequest *req;
	VqDatabaseSlot *slot;
	int			claimer;		/* -1: moves no position */
	TimestampTz now;
	int			left;			/* jobs it may still take */
	HTAB	   *rooms;			/* queue name -> QueueRoom */
	Tuplestorestate *store;
	TupleDesc	desc;
	int			ntaken;			/* jobs taken so far: their ids and attempts */
	Datum	   *ids;
	Datum	   *attempts;
	int		   *turns;			/* per handler of the request: jobs it may still start (-1: not counted yet) */
} Take;

/* The room a take reserved in a queue, and what it used. */
typedef struct QueueRoom
{
	char		queue[VQ_NAME_MAX + 1];
	VqQueue    *q;
	int			reserved;
	int			used;
} QueueRoom;

/* How many jobs the take may still take from a queue (reserving room the first time). */
static int
RoomIn(Take *t, VqQueue *queue)
{
	bool		found;
	QueueRoom  *r = hash_search(t->rooms, queue->name, HASH_ENTER, &found);

	if (!found)
	{
		r->q = queue;
		r->reserved = VqReserveTakeRoom(queue, t->left);
		r->used = 0;
	}
	return r->reserved - r->used;
}

static void
UseRoom(Take *t, VqQueue *queue, int n)
{
	QueueRoom  *r = hash_search(t->rooms, queue->name, HASH_FIND, NULL);

	r->used += n;
}

/* Give back the room the take reserved and did not use. */
static void
ReleaseRooms(Take *t)
{
	HASH_SEQ_STATUS seq;
	QueueRoom  *r;

	hash_seq_init(&seq, t->rooms);
	while ((r = hash_seq_search(&seq)) != NULL)
		VqReleaseTakeRoom(r->q, r->reserved - r->used);
}

/*
 * How many more jobs of a handler with max_running the take may start
 * (counted under an advisory lock held until the transaction ends).
 */
static int
HandlerTurnsLeft(VqHandler *handler)
{
	static SPIPlanPtr lock_plan = NULL;
	static SPIPlanPtr count_plan = NULL;
	bool		isnull;
	int64		running;

	if (handler->max_running <= 0)
		return INT_MAX;
	if (SPI_execute_plan(VqKeepPlan(&lock_plan, "SELECT pg_catalog.pg_advisory_xact_lock($1, $2)",
									2, (Oid[]) {INT4OID, INT4OID}),
						 (Datum[]) {Int32GetDatum(TAKE_LOCK_CLASS), Int32GetDatum((int32) VqNameHash(handler->name))},
						 NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: locking a handler's turns failed");
	if (SPI_execute_plan(VqKeepCustomPlan(&count_plan,
										  "SELECT pg_catalog.count(*) FROM vq.job_active"
										  " WHERE state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state"
										  " AND worker_pid IS NULL AND handler OPERATOR(pg_catalog.=) $1",
										  1, (Oid[]) {TEXTOID}),
						 &handler->name_datum, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: counting a handler's running jobs failed");
	running = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	return (int) Max(0, handler->max_running - running);
}

/* Turns left of a lane's handler in this take (counted once per take). */
static int
TurnsLeft(Take *t, TakeLane *lane)
{
	if (t->turns[lane->handler_index] < 0)
		t->turns[lane->handler_index] = HandlerTurnsLeft(lane->handler);
	return t->turns[lane->handler_index];
}

/* Jobs taken from a lane: its queue's room and its handler's turns are used up by n. */
static void
Took(Take *t, TakeLane *lane, int n)
{
	UseRoom(t, lane->queue, n);
	if (t->turns[lane->handler_index] != INT_MAX)
		t->turns[lane->handler_index] -= n;
	t->left -= n;
}

/* How many jobs the take may still take from a lane. */
static int
MayTake(Take *t, TakeLane *lane)
{
	return t->left == 0 ? 0 : Min(t->left, Min(RoomIn(t, lane->queue), TurnsLeft(t, lane)));
}

/* The key just before key (no job can sit between them): a position there makes the next scan start at key. */
static VqClaimKey
KeyBefore(VqClaimKey key)
{
	for (int i = UUID_LEN - 1; i >= 0; i--)
		if (key.execution_id.data[i]-- != 0)
			return key;			/* (no borrow left) */
	key.scheduled_at--;			/* the id was all zeros: the last id of the previous instant */
	return key;
}

/*
 * A caller that is not granted the handler left behind the jobs of roles it
 * is not a member of: the first job still waiting in the scan's range, in a
 * fresh look. False if none.
 */
static bool
FirstLeftBehind(TakeLane *lane, VqClaimScan *scan, VqClaimKey *left)
{
	static SPIPlanPtr left_plan = NULL;
	Datum		values[7];
	bool		isnull;

	values[0] = lane->queue->name_datum;
	values[1] = lane->handler->name_datum;
	values[2] = Int32GetDatum(scan->priority);
	values[3] = TimestampTzGetDatum(scan->from.scheduled_at);
	values[4] = UUIDPGetDatum(&scan->from.execution_id);
	values[5] = TimestampTzGetDatum(scan->last.scheduled_at);
	values[6] = UUIDPGetDatum(&scan->last.execution_id);
	if (SPI_execute_plan(VqKeepGenericPlan(&left_plan,
										   "SELECT scheduled_at, execution_id FROM vq.job_active"
										   " WHERE queue OPERATOR(pg_catalog.=) $1 AND handler OPERATOR(pg_catalog.=) $2"
										   " AND" VQ_TAKEABLE " AND priority OPERATOR(pg_catalog.=) $3"
										   " AND (scheduled_at, execution_id) OPERATOR(pg_catalog.>) ($4, $5)"
										   " AND (scheduled_at, execution_id) OPERATOR(pg_catalog.<=) ($6, $7)"
										   " ORDER BY scheduled_at, execution_id LIMIT 1",
										   7, (Oid[]) {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, UUIDOID,
										   TIMESTAMPTZOID, UUIDOID}),
						 values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking behind a take failed");
	if (SPI_processed == 0)
		return false;
	left->scheduled_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	memcpy(&left->execution_id, DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)),
		   sizeof(pg_uuid_t));
	return true;
}

/* The SET list and the select list of a take statement ($7 now, $8 lease until, $9 granted, $10 caller). */
#define TAKE_UPDATE \
	"WITH taken AS (" \
	" UPDATE vq.job_active j SET state = 'RUNNING', started_at = $7, consumer_claimed_at = $7," \
	"  updated_at = $7, lease_until = $8" \
	" WHERE j.execution_id OPERATOR(pg_catalog.=) ANY (ARRAY(" \
	"  SELECT execution_id FROM vq.job_active" \
	"  WHERE queue OPERATOR(pg_catalog.=) $1 AND handler OPERATOR(pg_catalog.=) $2 AND" VQ_TAKEABLE \
	"  AND scheduled_at OPERATOR(pg_catalog.<=) $7" \
	"  AND ($9 OR pg_catalog.pg_has_role($10, enqueued_by, 'USAGE'))"
#define TAKE_RETURN \
	" RETURNING" TAKEN_COLUMNS ")" \
	" SELECT" TAKEN_COLUMNS " FROM taken"

/* Put the rows the last take statement returned into the result; returns how many. */
static int
StoreTaken(Take *t)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		row[VQ_TAKE_COLUMNS];
		bool		nulls[VQ_TAKE_COLUMNS];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, row, nulls);
		tuplestore_putvalues(t->store, t->desc, row, nulls);
		t->ids[t->ntaken] = datumCopy(row[0], false, UUID_LEN);
		t->attempts[t->ntaken++] = row[1];
	}
	return (int) SPI_processed;
}

/* The key of the i-th row the last take statement returned. */
static VqClaimKey
TakenKey(uint64 i)
{
	VqClaimKey	key;
	bool		isnull;

	key.scheduled_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 10, &isnull));
	memcpy(&key.execution_id, DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull)),
		   sizeof(pg_uuid_t));
	return key;
}

/* Take up to n jobs of one level of a lane, after its position; returns how many. */
static int
TakeFromLevel(Take *t, TakeLane *lane, VqClaimScan *scan, int n)
{
	static SPIPlanPtr level_plan = NULL;
	Datum		values[11];
	int			got;

	values[0] = lane->queue->name_datum;
	values[1] = lane->handler->name_datum;
	values[2] = Int32GetDatum(scan->priority);
	values[3] = TimestampTzGetDatum(scan->from.scheduled_at);
	values[4] = UUIDPGetDatum(&scan->from.execution_id);
	values[5] = Int32GetDatum(n);
	values[6] = TimestampTzGetDatum(t->now);
	values[7] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(t->now, t->req->lease_ms));
	values[8] = BoolGetDatum(lane->granted);
	values[9] = ObjectIdGetDatum(t->req->caller);
	if (SPI_execute_plan(VqKeepGenericPlan(&level_plan,
										   TAKE_UPDATE
										   "  AND priority OPERATOR(pg_catalog.=) $3"
										   "  AND (scheduled_at, execution_id) OPERATOR(pg_catalog.>) ($4, $5)"
										   "  ORDER BY scheduled_at, execution_id LIMIT $6 FOR UPDATE SKIP LOCKED))"
										   TAKE_RETURN " ORDER BY scheduled_at, execution_id",
										   10, (Oid[]) {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, UUIDOID, INT4OID,
										   TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, OIDOID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: taking jobs failed");
	if (SPI_processed == 0)
		return 0;
	NoteTakenLevel(lane, scan->priority, TakenKey(0).scheduled_at);
	scan->took = true;
	scan->last = TakenKey(SPI_processed - 1);
	got = StoreTaken(t);
	if (!lane->granted)
	{
		VqClaimKey	left;

		if (FirstLeftBehind(lane, scan, &left))
			scan->last = KeyBefore(left);
	}
	return got;
}

/* Take up to n jobs of a lane whose levels are not known, from the start of its order. */
static int
TakeFromStart(Take *t, TakeLane *lane, int n)
{
	static SPIPlanPtr start_plan = NULL;
	Datum		values[11];

	values[0] = lane->queue->name_datum;
	values[1] = lane->handler->name_datum;
	values[2] = values[3] = values[4] = (Datum) 0;	/* ($3 to $5 are the level's, unused here) */
	values[5] = Int32GetDatum(n);
	values[6] = TimestampTzGetDatum(t->now);
	values[7] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(t->now, t->req->lease_ms));
	values[8] = BoolGetDatum(lane->granted);
	values[9] = ObjectIdGetDatum(t->req->caller);
	if (SPI_execute_plan(VqKeepGenericPlan(&start_plan,
										   TAKE_UPDATE
										   "  ORDER BY priority DESC, scheduled_at, execution_id LIMIT $6 FOR UPDATE SKIP LOCKED))"
										   TAKE_RETURN " ORDER BY priority DESC, scheduled_at, execution_id",
										   10, (Oid[]) {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, UUIDOID, INT4OID,
										   TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, OIDOID}),
						 values, (const char[]) {' ', ' ', 'n', 'n', 'n', ' ', ' ', ' ', ' ', ' '}, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: taking jobs failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		NoteTakenLevel(lane, DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 8, &isnull)),
					   TakenKey(i).scheduled_at);
	}
	return StoreTaken(t);
}

/* Is the caller granted the handler (a consumer grant, or a superuser)? */
static bool
Granted(Oid caller, VqHandler *handler)
{
	static SPIPlanPtr grant_plan = NULL;

	if (superuser_arg(caller))
		return true;
	if (SPI_execute_plan(VqKeepPlan(&grant_plan,
									"SELECT grantee FROM vq.consumer_grant WHERE handler OPERATOR(pg_catalog.=) $1",
									1, (Oid[]) {TEXTOID}),
						 &handler->name_datum, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: reading consumer grants failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;

		if (has_privs_of_role(caller, DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i],
																	 SPI_tuptable->tupdesc, 1, &isnull))))
			return true;
	}
	return false;
}

/* Lanes in the order of their handlers in the request, then by name. */
static int
ByHandlerThenName(const ListCell *a, const ListCell *b)
{
	const TakeLane *x = lfirst(a);
	const TakeLane *y = lfirst(b);

	if (x->handler_index != y->handler_index)
		return x->handler_index < y->handler_index ? -1 : 1;
	return strcmp(x->name, y->name);
}

/*
 * The lanes of the request that may hold jobs (of its handlers, in unpaused
 * queues), with their levels, in the order of the request's handlers: those
 * the claim positions list, not handlers x queues.
 */
static List *
BeginLanes(Take *t, VqRegistry *registry)
{
	List	   *lanes = NIL;
	List	   *names = LanesWithJobs(t->slot);
	int		   *granted = palloc(sizeof(int) * t->req->nhandlers);	/* -1: not asked yet */
	ListCell   *lc;

	for (int h = 0; h < t->req->nhandlers; h++)
		granted[h] = -1;
	foreach(lc, names)
	{
		const char *name = lfirst(lc);
		char		queue_name[VQ_LANE_MAX + 1];
		const char *handler_name;
		VqQueue    *q;
		TakeLane   *lane;
		int			h;

		if (!SplitLane(name, queue_name, &handler_name))
			continue;
		for (h = 0; h < t->req->nhandlers && strcmp(t->req->handlers[h]->name, handler_name) != 0; h++)
			;
		if (h == t->req->nhandlers || strlen(queue_name) > VQ_NAME_MAX)
			continue;
		q = VqLookupQueue(registry, queue_name);
		if (q == NULL || q->paused)
			continue;
		lane = palloc0(sizeof(TakeLane));
		lane->handler = t->req->handlers[h];
		lane->handler_index = h;
		lane->queue = q;
		if (granted[h] < 0)
			granted[h] = Granted(t->req->caller, lane->handler) ? 1 : 0;
		lane->granted = granted[h] == 1;
		strlcpy(lane->name, name, sizeof(lane->name));
		lane->positioned = t->slot != NULL &&
			VqClaimPositionsBegin(t->slot, t->claimer, lane->name, lane->scans, &lane->nscans);
		if (lane->positioned && lane->nscans == 0)
		{
			pfree(lane);
			continue;			/* nothing waits in it (claimer registered on no level) */
		}
		lanes = lappend(lanes, lane);
	}
	list_sort(lanes, ByHandlerThenName);
	return lanes;
}

/* Take from one lane: from its start when not positioned, else level by level, highest priority first. */
static int
TakeFromOneLane(Take *t, TakeLane *lane)
{
	int			total = 0;
	int			n;

	if (!lane->positioned)
	{
		if ((n = MayTake(t, lane)) > 0 && (n = TakeFromStart(t, lane, n)) > 0)
		{
			Took(t, lane, n);
			total += n;
		}
		return total;
	}
	for (int i = 0; i < lane->nscans && t->left > 0; i++)	/* (CopyLevels sorted them) */
		if ((n = MayTake(t, lane)) > 0 && (n = TakeFromLevel(t, lane, &lane->scans[i], n)) > 0)
		{
			Took(t, lane, n);
			total += n;
		}
	return total;
}

/* Candidates of a merged take, growing as the looks append to them. */
typedef struct Candidates
{
	Candidate  *items;
	int			n;
	int			size;
} Candidates;

/*
 * The first due jobs of a lane's level (level >= 0), or of a lane not
 * positioned from its start, that the caller may take, at most n, without
 * locking them: appended to cands.
 */
static void
PeekCandidates(Take *t, TakeLane *lane, int level, int n, Candidates *cands)
{
	static SPIPlanPtr level_plan = NULL;
	static SPIPlanPtr start_plan = NULL;
	VqClaimScan *scan = level >= 0 ? &lane->scans[level] : NULL;
	Datum		values[9];
	int			rc;

#define PEEK_WHERE \
	"SELECT priority, scheduled_at, execution_id FROM vq.job_active" \
	" WHERE queue OPERATOR(pg_catalog.=) $1 AND handler OPERATOR(pg_catalog.=) $2 AND" VQ_TAKEABLE \
	" AND scheduled_at OPERATOR(pg_catalog.<=) $6 AND ($7 OR pg_catalog.pg_has_role($8, enqueued_by, 'USAGE'))"

	values[0] = lane->queue->name_datum;
	values[1] = lane->handler->name_datum;
	values[2] = Int32GetDatum(scan ? scan->priority : 0);
	values[3] = TimestampTzGetDatum(scan ? scan->from.scheduled_at : 0);
	values[4] = UUIDPGetDatum(scan ? &scan->from.execution_id : &(pg_uuid_t) {{0}});
	values[5] = TimestampTzGetDatum(t->now);
	values[6] = BoolGetDatum(lane->granted);
	values[7] = ObjectIdGetDatum(t->req->caller);
	values[8] = Int32GetDatum(n);
	if (scan != NULL)
		rc = SPI_execute_plan(VqKeepGenericPlan(&level_plan,
												PEEK_WHERE " AND priority OPERATOR(pg_catalog.=) $3"
												" AND (scheduled_at, execution_id) OPERATOR(pg_catalog.>) ($4, $5)"
												" ORDER BY scheduled_at, execution_id LIMIT $9",
												9, (Oid[]) {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, UUIDOID,
												TIMESTAMPTZOID, BOOLOID, OIDOID, INT4OID}),
							  values, NULL, true, 0);
	else
		rc = SPI_execute_plan(VqKeepGenericPlan(&start_plan,
												PEEK_WHERE " ORDER BY priority DESC, scheduled_at, execution_id LIMIT $9",
												9, (Oid[]) {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID, UUIDOID,
												TIMESTAMPTZOID, BOOLOID, OIDOID, INT4OID}),
							  values, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking at due jobs failed");
	if (cands->n + (int) SPI_processed > cands->size)
	{
		cands->size = Max(cands->size * 2, cands->n + (int) SPI_processed);
		cands->items = cands->items == NULL ? palloc(sizeof(Candidate) * cands->size)
			: repalloc(cands->items, sizeof(Candidate) * cands->size);
	}
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Candidate  *c = &cands->items[cands->n++];
		bool		isnull;

		c->lane = lane;
		c->level = level;
		c->priority = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		c->key.scheduled_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, &isnull));
		memcpy(&c->key.execution_id, DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull)),
			   sizeof(pg_uuid_t));
	}
}

/* Claim order: priority DESC, then scheduled_at, then execution_id. */
static int
ByClaimOrder(const void *a, const void *b)
{
	const Candidate *x = a;
	const Candidate *y = b;

	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	if (x->key.scheduled_at != y->key.scheduled_at)
		return x->key.scheduled_at < y->key.scheduled_at ? -1 : 1;
	return memcmp(x->key.execution_id.data, y->key.execution_id.data, UUID_LEN);
}

/*
 * Several lanes: look at the first due jobs of each (without locks), merge
 * them in claim order, and give each level as many of the first max_jobs as
 * came from it (within its queue's room and its handler's turns); then take
 * those, level by level. A job another take holds meanwhile is skipped, and
 * this take ends with fewer.
 */
static int
TakeMerged(Take *t, List *lanes)
{
	Candidates	cands = {NULL, 0, 0};
	int			total = 0;
	ListCell   *lc;

	foreach(lc, lanes)
	{
		TakeLane   *lane = lfirst(lc);
		int			n = MayTake(t, lane);

		if (n > 0 && !lane->positioned)
			PeekCandidates(t, lane, -1, n, &cands);
		for (int i = 0; n > 0 && lane->positioned && i < lane->nscans; i++)
			PeekCandidates(t, lane, i, n, &cands);
	}
	if (cands.n > 0)
		qsort(cands.items, cands.n, sizeof(Candidate), ByClaimOrder);
	for (int i = 0; i < cands.n && t->left > 0; i++)
	{
		TakeLane   *lane = cands.items[i].lane;

		if (MayTake(t, lane) <= 0)
			continue;
		Took(t, lane, 1);		/* (planned: given back below, before the take uses it) */
		if (cands.items[i].level < 0)
			lane->start_quota++;
		else
			lane->quota[cands.items[i].level]++;
	}
	foreach(lc, lanes)
	{
		TakeLane   *lane = lfirst(lc);
		int			n;

		if (lane->start_quota > 0)
		{
			Took(t, lane, -lane->start_quota);
			if ((n = TakeFromStart(t, lane, lane->start_quota)) > 0)
			{
				Took(t, lane, n);
				total += n;
			}
		}
		for (int i = 0; i < lane->nscans; i++)
		{
			if (lane->quota[i] == 0)
				continue;
			Took(t, lane, -lane->quota[i]);
			if ((n = TakeFromLevel(t, lane, &lane->scans[i], lane->quota[i])) > 0)
			{
				Took(t, lane, n);
				total += n;
			}
		}
	}
	return total;
}

/*
 * Take from the lanes, in claim order (priority DESC, scheduled_at,
 * execution_id) across them, within each queue's room and each handler's
 * turns.
 */
static int
TakeFromLanes(Take *t, List *lanes)
{
	if (list_length(lanes) == 0)
		return 0;
	if (list_length(lanes) == 1)
		return TakeFromOneLane(t, linitial(lanes));
	return TakeMerged(t, lanes);
}

/* End the claims of every lane: positions move to what each level's take reached. */
static void
EndLanes(Take *t, List *lanes)
{
	ListCell   *lc;

	if (t->slot == NULL)
		return;
	foreach(lc, lanes)
	{
		TakeLane   *lane = lfirst(lc);

		if (lane->positioned)
			VqClaimPositionsEnd(t->slot, t->claimer, lane->name, lane->scans, lane->nscans);
	}
}

/* With transition listeners registered, the take records the CLAIMED transitions itself (they see them). */
static void
RecordClaimed(Take *t)
{
	static SPIPlanPtr claimed_plan = NULL;
	Datum		values[3];

	values[0] = PointerGetDatum(construct_array(t->ids, t->ntaken, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[1] = PointerGetDatum(construct_array(t->attempts, t->ntaken, INT4OID, 4, true, TYPALIGN_INT));
	values[2] = TimestampTzGetDatum(t->now);
	if (SPI_execute_plan(VqKeepPlan(&claimed_plan,
									"INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state, at)"
									" SELECT e, a, 'CLAIMED', 'ENQUEUED', 'RUNNING', $3"
									" FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(e, a)",
									3, (Oid[]) {UUIDARRAYOID, INT4ARRAYOID, TIMESTAMPTZOID}),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: recording CLAIMED transitions failed");
}

/* Take up to max_jobs due jobs (see take.h). */
int
VqTakeJobs(VqRegistry *registry, const VqTakeRequest *req, Tuplestorestate *store, TupleDesc desc)
{
	Take		t = {req};
	HASHCTL		ctl = {.keysize = VQ_NAME_MAX + 1, .entrysize = sizeof(QueueRoom), .hcxt = CurrentMemoryContext};
	List	   *lanes;
	volatile int total = 0;
	int			level;
	uint64		waiting = 0;

	/* before any scan takes its snapshot: a job committed after it wakes this worker (wake.c) */
	for (int h = 0; h < req->nhandlers; h++)
		waiting |= VqTakeWakeBit(VqNameHash(req->handlers[h]->name));
	VqTakersWaiting(MyDatabaseId, waiting);

	t.now = GetCurrentTimestamp();
	t.left = req->max_jobs;
	t.store = store;
	t.desc = desc;
	t.ids = palloc(sizeof(Datum) * req->max_jobs);
	t.attempts = palloc(sizeof(Datum) * req->max_jobs);
	t.turns = palloc(sizeof(int) * req->nhandlers);
	for (int h = 0; h < req->nhandlers; h++)
		t.turns[h] = -1;
	t.rooms = hash_create("vq_job take rooms", 8, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	t.slot = VqDatabaseSlotOf(MyDatabaseId);
	t.claimer = AcquireTaker(t.slot);
	PG_TRY();
	{
		level = VqIndexScansBegin();
		lanes = BeginLanes(&t, registry);
		total = TakeFromLanes(&t, lanes);
		EndLanes(&t, lanes);
		VqIndexScansEnd(level);
		ReleaseRooms(&t);
		if (total > 0 && registry->has_listeners)
			RecordClaimed(&t);
		/* (the executors look for expired leases when the first may have ended) */
		if (total > 0)
			VqLeaseEndsAt(MyDatabaseId, TimestampTzPlusMilliseconds(t.now, req->lease_ms));
	}
	PG_FINALLY();
	{
		ReleaseTaker();
	}
	PG_END_TRY();
	return total;
}

/* ---- due times, for the executors ---------------------------------------------------- */

/* The earliest scheduled_at still in the future of one level of a lane, or VQ_NO_NEXT_DUE. */
static TimestampTz
EarliestInLevel(Datum queue, Datum handler, int32 priority, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[4] = {queue, handler, Int32GetDatum(priority), TimestampTzGetDatum(now)};

	return VqNextDueResult(SPI_execute_plan(VqKeepPlan(&plan,
									"SELECT scheduled_at FROM vq.job_active"
									" WHERE queue OPERATOR(pg_catalog.=) $1 AND handler OPERATOR(pg_catalog.=) $2"
									" AND" VQ_TAKEABLE " AND priority OPERATOR(pg_catalog.=) $3"
									" AND scheduled_at OPERATOR(pg_catalog.>) $4"
									" ORDER BY scheduled_at LIMIT 1",
									4, (Oid[]) {TEXTOID, TEXTOID, INT4OID, TIMESTAMPTZOID}),
						 values, NULL, false, 1));
}

/* The same for a lane whose levels are not known (a walk of the lane's index range). */
static TimestampTz
EarliestInLane(Datum queue, Datum handler, TimestampTz now)
{
	static SPIPlanPtr plan = NULL;
	Datum		values[3] = {queue, handler, TimestampTzGetDatum(now)};
	bool		isnull;
	Datum		d;

	if (SPI_execute_plan(VqKeepPlan(&plan,
									"SELECT pg_catalog.min(scheduled_at) FROM vq.job_active"
									" WHERE queue OPERATOR(pg_catalog.=) $1 AND handler OPERATOR(pg_catalog.=) $2"
									" AND" VQ_TAKEABLE " AND scheduled_at OPERATOR(pg_catalog.>) $3",
									3, (Oid[]) {TEXTOID, TEXTOID, TIMESTAMPTZOID}),
						 values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for the next due job failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? VQ_NO_NEXT_DUE : DatumGetTimestampTz(d);
}

/*
 * The earliest future scheduled_at of any external handler's job (see
 * take.h): the lanes that may hold jobs (LanesWithJobs), one index probe per
 * level of each.
 */
TimestampTz
VqTakeEarliestFutureDue(VqRegistry *registry, TimestampTz now)
{
	VqClaimScan *scans = palloc(sizeof(VqClaimScan) * VQ_MAX_CLAIM_LEVELS);
	TimestampTz next = VQ_NO_NEXT_DUE;
	int			index_scans = VqIndexScansBegin();
	List	   *lanes = LanesWithJobs(VqMyDatabaseSlot);
	ListCell   *lc;

	VqIndexScansEnd(index_scans);
	foreach(lc, lanes)
	{
		const char *lane = lfirst(lc);
		char		queue[VQ_LANE_MAX + 1];
		const char *handler;
		Datum		queue_datum;
		Datum		handler_datum;
		int			n;

		if (!SplitLane(lane, queue, &handler))
			continue;
		queue_datum = CStringGetTextDatum(queue);
		handler_datum = CStringGetTextDatum(handler);
		if (!VqClaimPositionsLevels(VqMyDatabaseSlot, lane, scans, &n))
			next = Min(next, EarliestInLane(queue_datum, handler_datum, now));
		else
			for (int i = 0; i < n; i++)
				next = Min(next, EarliestInLevel(queue_datum, handler_datum, scans[i].priority, now));
	}
	return next;
}

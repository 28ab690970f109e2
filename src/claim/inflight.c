/*
 * inflight.c: the external jobs in flight that claims and takes must leave
 * room for.
 *
 * A job a worker took holds its queue's capacity until the worker answers
 * (or its lease expires), so a claim or a take in a queue with external
 * handlers must know how many there are. Counting them in the table walks
 * every row version of the queue's taken jobs, which a held snapshot keeps:
 * at a few thousand jobs a second and a claim every few milliseconds that
 * would be the executors' main cost. So each queue has an upper bound in the
 * database's slot: the last count (of all its RUNNING external jobs) plus
 * every job taken since that count began, minus the replies committed since;
 * a claim or a take counts only when the bound leaves it less room than it
 * could take (claim.c, RoomInQueue; VqReserveTakeRoom here).
 *
 * Why it stays an upper bound:
 *  - a take reserves its room in the bound (since) under the slot's lock,
 *    before its scan, and keeps what it took there (takes_open) until its
 *    transaction ends; a count begins with since = takes_open, so a take that
 *    its snapshot may not see is still in the bound;
 *  - a claim reads the executors' reservations and the bound at once;
 *  - a reply lowers the bound only if no count began since the reply read
 *    the count's generation (before its commit): otherwise that count may not
 *    have seen the job at all;
 *  - a count begun later replaces a count in progress; until a count ends the
 *    bound is unknown and claims and takes count.
 * A take that aborts leaves its jobs in the bound until the next count: an
 * overcount only costs a count.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "main/guc.h"
#include "main/limits.h"
#include "main/shmem.h"
#include "util/spi_util.h"
#include "claim/inflight.h"

/*
 * The bound entry of a queue (caller holds the slot's lock), created if
 * asked; NULL when it has none and none is free (its claims then count).
 */
static VqNotifyBound *
FindNotifyBound(VqDatabaseSlot *slot, const char *queue, bool create)
{
	VqNotifyBound *free_entry = NULL;

	for (int i = 0; i < VQ_MAX_CLAIM_QUEUES; i++)
	{
		VqNotifyBound *b = &slot->notify_bounds[i];

		if (strcmp(b->queue, queue) == 0)
			return b;
		if (b->queue[0] == '\0' && free_entry == NULL)
			free_entry = b;
	}
	if (!create || free_entry == NULL)
		return NULL;
	memset(free_entry, 0, sizeof(VqNotifyBound));
	strlcpy(free_entry->queue, queue, sizeof(free_entry->queue));
	return free_entry;
}

/* A database takes the slot: no bound carries over (caller holds the slot's lock exclusively). */
void
VqNotifyBoundsForget(VqDatabaseSlot *slot)
{
	memset(slot->notify_bounds, 0, sizeof(slot->notify_bounds));
}

/* The bound of a queue (see inflight.h). */
int
VqNotifyBoundLocked(VqDatabaseSlot *slot, const char *queue)
{
	VqNotifyBound *bound = FindNotifyBound(slot, queue, false);

	return bound != NULL && bound->valid ? bound->counted + bound->since : -1;
}

/* The external jobs of a queue that workers hold now (RUNNING, no executor), in a fresh snapshot. */
static int
ExternalInFlight(VqQueue *queue)
{
	static SPIPlanPtr inflight_plan = NULL;
	Datum		values[1] = {queue->name_datum};
	bool		isnull;

	/*
	 * Planned at each call (a custom plan): a generic plan made while
	 * vq.job_active was empty (after a VACUUM or ANALYZE of it) is a
	 * sequential scan, which every claim would then pay over the whole due
	 * backlog; planned with the table's current size, it is a scan of
	 * job_running_idx (worker_pid IS NULL and the queue: only its taken jobs).
	 */
	if (SPI_execute_plan(VqKeepCustomPlan(&inflight_plan,
								  "SELECT pg_catalog.count(*)::pg_catalog.int4 FROM vq.job_active"
								  " WHERE state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state AND worker_pid IS NULL"
								  " AND queue OPERATOR(pg_catalog.=) $1",
								  1, (Oid[]) {TEXTOID}),
						 values, NULL, false, 1) != SPI_OK_SELECT)	/* a fresh snapshot */
		elog(ERROR, "vq_job: counting external jobs in flight failed");
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/* Begin a count (caller holds the slot's lock): the bound is unknown until it ends. */
typedef struct CountArgs
{
	const char *queue;
	uint64		generation;
	int			counted;
	int			bound;			/* out: the bound once counted */
} CountArgs;

static void
CountBeginsLocked(VqDatabaseSlot *slot, void *arg)
{
	CountArgs  *a = arg;
	VqNotifyBound *bound = FindNotifyBound(slot, a->queue, true);

	a->generation = 0;
	if (bound == NULL)
		return;
	a->generation = ++bound->generation;
	bound->valid = false;
	bound->since = bound->takes_open;	/* (takes the count may not see) */
}

static void
CountEndsLocked(VqDatabaseSlot *slot, void *arg)
{
	CountArgs  *a = arg;
	VqNotifyBound *bound = FindNotifyBound(slot, a->queue, false);

	a->bound = a->counted + (bound != NULL ? bound->takes_open : 0);
	if (bound != NULL && a->generation != 0 && bound->generation == a->generation)
	{
		bound->counted = a->counted;
		bound->valid = true;
		a->bound = a->counted + bound->since;
	}
}

/*
 * Count a queue's external jobs in flight in the table, and make the count
 * the queue's new bound. The bound's takes start from those still open before
 * the count's snapshot is taken, so every take is in the count or in since
 * (or both); a count begun later replaces this one. Returns the new bound.
 */
int
VqCountNotifyInFlight(VqQueue *queue)
{
	CountArgs	a = {queue->name, 0, 0, 0};

	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, CountBeginsLocked, &a);
	a.counted = ExternalInFlight(queue);
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, CountEndsLocked, &a);
	return a.bound;
}

/* The takes of this transaction, by queue: what they hold in takes_open until it ends. */
#define TAKE_QUEUES 8
static struct
{
	char		queue[VQ_NAME_MAX + 1];
	int			n;
}			taken[TAKE_QUEUES];
static int	n_taken_queues = 0;
static bool take_callbacks = false;

static void
TakesEndLocked(VqDatabaseSlot *slot, void *arg)
{
	for (int i = 0; i < n_taken_queues; i++)
	{
		VqNotifyBound *bound = FindNotifyBound(slot, taken[i].queue, false);

		if (bound != NULL)
			bound->takes_open = Max(0, bound->takes_open - taken[i].n);
	}
}

/* End of the top-level transaction: its takes are committed (in the table) or undone. */
static void
TakesReleaseCallback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel || n_taken_queues == 0)
		return;
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, TakesEndLocked, NULL);
	n_taken_queues = 0;
}

/* Remember n jobs taken from queue in this transaction (caller holds the slot's lock). */
static void
NoteTakeOpen(VqNotifyBound *bound, int n)
{
	int			i;

	if (!take_callbacks)
	{
		RegisterResourceReleaseCallback(TakesReleaseCallback, NULL);
		take_callbacks = true;
	}
	for (i = 0; i < n_taken_queues; i++)
		if (strcmp(taken[i].queue, bound->queue) == 0)
			break;
	if (i == n_taken_queues)
	{
		if (n_taken_queues == TAKE_QUEUES)
			return;				/* (takes_open stays higher: an overcount until the next count) */
		strlcpy(taken[i].queue, bound->queue, sizeof(taken[i].queue));
		taken[i].n = 0;
		n_taken_queues++;
	}
	taken[i].n += n;
	bound->takes_open += n;
}

typedef struct ReserveArgs
{
	const char *queue;
	int			cap;
	int			want;
	int			bound;			/* the bound a count just gave (-1: use the slot's, if known) */
	int			got;			/* out: reserved (-1: no bound known and none given: count first) */
} ReserveArgs;

static void
ReserveLocked(VqDatabaseSlot *slot, void *arg)
{
	ReserveArgs *a = arg;
	VqNotifyBound *bound = FindNotifyBound(slot, a->queue, true);
	int			in_flight = a->bound;
	int			others = 0;
	int			room;

	a->got = -1;
	if (in_flight < 0 && bound != NULL && bound->valid)
		in_flight = bound->counted + bound->since;
	if (in_flight < 0)
		return;
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &slot->executors[i];

		if (e->pid != 0 && e->claimed > 0 && strcmp(e->queue, a->queue) == 0)
			others += e->claimed;
	}
	room = Max(0, a->cap - others - in_flight);
	if (room < a->want && a->bound < 0)
		return;					/* (the bound leaves too little: a count may find more room) */
	a->got = Min(a->want, room);
	if (bound != NULL)
	{
		bound->since += a->got;
		NoteTakeOpen(bound, a->got);
	}
}

/*
 * A take: reserve room in a queue for up to want jobs (see inflight.h);
 * counts the queue's jobs in flight when the bound leaves too little.
 */
int
VqReserveTakeRoom(VqQueue *queue, int want)
{
	ReserveArgs a = {queue->name, queue->instances * queue->max_concurrent_jobs, want, -1, -1};

	if (!VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, ReserveLocked, &a))
		return Max(0, Min(want, a.cap - ExternalInFlight(queue)));	/* (no executors here: nothing to share) */
	if (a.got >= 0)
		return a.got;
	a.bound = VqCountNotifyInFlight(queue);
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, ReserveLocked, &a);
	return Max(a.got, 0);
}

typedef struct UnusedArgs
{
	const char *queue;
	int			unused;
} UnusedArgs;

static void
UnusedLocked(VqDatabaseSlot *slot, void *arg)
{
	UnusedArgs *a = arg;
	VqNotifyBound *bound = FindNotifyBound(slot, a->queue, false);

	if (bound == NULL)
		return;
	bound->since = Max(0, bound->since - a->unused);
	bound->takes_open = Max(0, bound->takes_open - a->unused);
	for (int i = 0; i < n_taken_queues; i++)
		if (strcmp(taken[i].queue, a->queue) == 0)
			taken[i].n = Max(0, taken[i].n - a->unused);
}

/* The take used fewer jobs than it reserved: give the rest back (see inflight.h). */
void
VqReleaseTakeRoom(VqQueue *queue, int unused)
{
	UnusedArgs	a = {queue->name, unused};

	if (unused > 0)
		(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, UnusedLocked, &a);
}

/* Jobs that replies end in this transaction, by queue, with the generation of its bound then. */
#define ENDING_QUEUES 4
static struct
{
	char		queue[VQ_NAME_MAX + 1];
	uint64		generation;
	int			n;
}			ending[ENDING_QUEUES];
static int	n_ending = 0;
static bool ending_callbacks = false;

typedef struct GenerationArgs
{
	const char *queue;
	bool		known;
	uint64		generation;
} GenerationArgs;

static void
GenerationLocked(VqDatabaseSlot *slot, void *arg)
{
	GenerationArgs *a = arg;
	VqNotifyBound *bound = FindNotifyBound(slot, a->queue, false);

	a->known = bound != NULL && bound->valid;
	a->generation = a->known ? bound->generation : 0;
}

static void
EndingLocked(VqDatabaseSlot *slot, void *arg)
{
	for (int i = 0; i < n_ending; i++)
	{
		VqNotifyBound *bound = FindNotifyBound(slot, ending[i].queue, false);

		if (bound != NULL && bound->valid && bound->generation == ending[i].generation)
		{
			int			from_since = Min(ending[i].n, bound->since - bound->takes_open);

			/* (only the total counts: take from either part, never from the open takes) */
			from_since = Max(0, from_since);
			bound->since -= from_since;
			bound->counted = Max(0, bound->counted - (ending[i].n - from_since));
		}
	}
}

/* End of the top-level transaction: lower the bounds if it committed. */
static void
EndingReleaseCallback(ResourceReleasePhase phase, bool isCommit, bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	if (isCommit && n_ending > 0)
		(void) VqWithDatabaseSlot(MyDatabaseId, LW_EXCLUSIVE, EndingLocked, NULL);
	n_ending = 0;
}

/* PREPARE: the replies commit later, in another session; the bounds stay (higher than needed). */
static void
EndingXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PREPARE)
		n_ending = 0;
}

/* A reply ends a taken job (see inflight.h). */
void
VqNotifyJobEnding(const char *queue)
{
	GenerationArgs a = {queue, false, 0};

	if (!ending_callbacks)
	{
		RegisterResourceReleaseCallback(EndingReleaseCallback, NULL);
		RegisterXactCallback(EndingXactCallback, NULL);
		ending_callbacks = true;
	}
	for (int i = 0; i < n_ending; i++)
		if (strcmp(ending[i].queue, queue) == 0)
		{
			ending[i].n++;		/* (the generation first seen: a count since then skips them all) */
			return;
		}
	if (n_ending == ENDING_QUEUES)
		return;					/* (not lowering only costs a count) */
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_SHARED, GenerationLocked, &a);
	if (!a.known)
		return;
	strlcpy(ending[n_ending].queue, queue, sizeof(ending[0].queue));
	ending[n_ending].generation = a.generation;
	ending[n_ending++].n = 1;
}

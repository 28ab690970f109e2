/*
 * inflight.c: the NOTIFY jobs in flight that a claim must leave room for.
 *
 * Announced NOTIFY jobs hold their queue's capacity until a consumer answers
 * (or their take timeout passes untaken), so a claim of a queue with NOTIFY
 * handlers must know how many there are. Counting them in the table walks
 * every row version of the queue's NOTIFY jobs, which a held snapshot keeps:
 * at 500 NOTIFY jobs/s and a claim every few milliseconds that was the
 * executors' main cost. So each queue has an upper bound in the database's
 * slot: the last count (of all its RUNNING NOTIFY jobs) plus every
 * announcement committed since that count began, minus the replies committed
 * since; a claim counts only when the bound leaves it less room than it could
 * take (claim.c, RoomInQueue).
 *
 * Why it stays an upper bound:
 *  - a count empties the announcements before its snapshot is taken, so an
 *    announcement is in the count, added after it began, or both;
 *  - an executor adds its announcements after its commit and before it
 *    releases the reservation they were claimed in, and a claim reads the
 *    reservations and the bound at once: each announcement is in one of them;
 *  - a reply lowers the bound only if no count began since the reply read the
 *    count's generation (before its commit): otherwise that count may not
 *    have seen the job at all;
 *  - a count begun later replaces a count in progress; until a count ends the
 *    bound is unknown and claims count.
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
 * The NOTIFY bound entry of a queue (caller holds the slot's lock), created
 * if asked; NULL when it has none and none is free (its claims then count).
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

/*
 * NOTIFY jobs of a queue that hold its capacity: taken by a consumer and not
 * yet answered, or announced less than vq.notify_take_timeout_ms ago. One
 * announced longer ago with no taker waits for a consumer without holding
 * any: an absent consumer blocks nobody. In *all, all of them.
 */
static int
ExternalInFlight(VqQueue *queue, TimestampTz now, int *all)
{
	static SPIPlanPtr inflight_plan = NULL;
	Datum		values[2];
	bool		isnull;

	values[0] = queue->name_datum;
	values[1] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, -(int64) vq_notify_take_timeout_ms));
	/*
	 * Planned at each call (a custom plan): a generic plan made while
	 * vq.job_active was empty (after a VACUUM or ANALYZE of it) is a
	 * sequential scan, which every claim would then pay over the whole due
	 * backlog; planned with the table's current size, it is a scan of
	 * job_running_idx (worker_pid IS NULL and the queue: only its NOTIFY jobs in flight).
	 */
	if (SPI_execute_plan(VqKeepCustomPlan(&inflight_plan,
								  "SELECT pg_catalog.count(*) FILTER (WHERE consumer_claimed_at IS NOT NULL"
								  "  OR started_at OPERATOR(pg_catalog.>) $2)::pg_catalog.int4,"
								  " pg_catalog.count(*)::pg_catalog.int4 FROM vq.job_active"
								  " WHERE state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state AND worker_pid IS NULL"
								  " AND queue OPERATOR(pg_catalog.=) $1",
								  2, (Oid[]) {TEXTOID, TIMESTAMPTZOID}),
						 values, NULL, false, 1) != SPI_OK_SELECT)	/* a fresh snapshot */
		elog(ERROR, "vq_job: counting NOTIFY jobs in flight failed");
	*all = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	return DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Count a queue's NOTIFY jobs in flight in the table, and make the count the
 * queue's new bound. The bound's announcements start from zero before the
 * count's snapshot is taken, so every announcement is in the count or added
 * after it (or both); a count begun later replaces this one.
 */
int
VqCountNotifyInFlight(VqQueue *queue, TimestampTz now)
{
	VqNotifyBound *bound;
	uint64		generation = 0;
	int			all;
	int			in_flight;

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	bound = FindNotifyBound(VqMyDatabaseSlot, queue->name, true);
	if (bound != NULL)
	{
		generation = ++bound->generation;
		bound->valid = false;
		bound->since = 0;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);

	in_flight = ExternalInFlight(queue, now, &all);

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	bound = FindNotifyBound(VqMyDatabaseSlot, queue->name, false);
	if (bound != NULL && bound->generation == generation)
	{
		/* all of them: one announced long ago and not counted may still be taken */
		bound->counted = all;
		bound->valid = true;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
	return in_flight;
}

/* NOTIFY jobs announced in this transaction, by queue (see VqNoteAnnounced). */
#define ANNOUNCED_QUEUES 4
static struct
{
	char		queue[VQ_NAME_MAX + 1];
	int			n;
}			announced[ANNOUNCED_QUEUES];
static int	n_announced_queues = 0;
static bool announced_overflow = false;

/* A NOTIFY job of a queue is announced in this transaction (see inflight.h). */
void
VqNoteAnnounced(const char *queue)
{
	for (int i = 0; i < n_announced_queues; i++)
		if (strcmp(announced[i].queue, queue) == 0)
		{
			announced[i].n++;
			return;
		}
	if (n_announced_queues == ANNOUNCED_QUEUES)
	{
		announced_overflow = true;
		return;
	}
	strlcpy(announced[n_announced_queues].queue, queue, sizeof(announced[0].queue));
	announced[n_announced_queues++].n = 1;
}

/*
 * The transaction that announced them committed (see inflight.h): add them to
 * their queues' bounds, before the reservation they were claimed in is
 * released. (Notes of a transaction that aborted are added by the next
 * commit: an overcount, which only costs a count.)
 */
void
VqAnnouncementsCommitted(void)
{
	if (n_announced_queues == 0 && !announced_overflow)
		return;
	LWLockAcquire(VqMyDatabaseSlot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < VQ_MAX_CLAIM_QUEUES && announced_overflow; i++)
		VqMyDatabaseSlot->notify_bounds[i].valid = false;
	for (int i = 0; i < n_announced_queues; i++)
	{
		VqNotifyBound *bound = FindNotifyBound(VqMyDatabaseSlot, announced[i].queue, false);

		if (bound != NULL)
			bound->since += announced[i].n;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
	n_announced_queues = 0;
	announced_overflow = false;
}

/* NOTIFY jobs that replies end in this transaction, by queue, with the generation of its bound then. */
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
			int			from_since = Min(ending[i].n, bound->since);

			/* (only the total counts: take from either part) */
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

/* A reply ends a NOTIFY job (see inflight.h). */
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

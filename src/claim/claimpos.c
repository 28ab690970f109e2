/*
 * claimpos.c: claim positions.
 *
 * A claim takes the due jobs of a queue in (priority DESC, scheduled_at,
 * execution_id) order from the partial index job_claim_idx. Every job it
 * finishes leaves an index entry behind that later scans must step over until
 * vacuum removes it, and a long-held snapshot (a report, pg_dump, an idle
 * transaction) keeps vacuum from removing any: a plain "first due jobs" scan
 * then walks every job finished since the snapshot was taken. So for each
 * priority level of a queue the database's slot remembers the key where
 * claims got to, and each claim scans a level from there.
 *
 * The invariant, per level: every ENQUEUED job that no claim holds and whose
 * commit is visible has a key after the level's position, or a commit will
 * lower the position to its key. It is kept by
 *  - commits: every transaction that makes jobs ENQUEUED (an enqueue, a retry,
 *    an abandoned job put back, jobs an executor claimed and released
 *    untouched) lowers the positions of their levels after it commits
 *    (wakeup.c), creating a level it has not seen;
 *  - claims: a claim reads the positions before its scans take their
 *    snapshots, and moves a level's position only to the last key it took, or
 *    to the lowest key a commit lowered that level to while it claimed, if
 *    lower (a commit its snapshot may have missed);
 *  - resets: positions are forgotten when an executor exits abnormally (it may
 *    have released claimed jobs without lowering) and when jobs are made due
 *    by other means (vq_redrive); then each queue's levels are learnt again
 *    with a query, and scanned from their start once.
 * A safety net checks it: every 10 s (less often when a look takes long)
 * executor 0 looks for a due job behind each level's position, and moves the
 * position back to any it finds (poscheck.c).
 * A future job needs nothing: within its level, no claim can pass its key
 * before it is due. A queue whose levels are not all known, or a database
 * with more levels than fit (VQ_MAX_CLAIM_LEVELS), is claimed the plain way.
 * The outbox relay keeps one position the same way, by id, for the rows due
 * at publication (see relay.c).
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "claim/claimpos.h"
#include "claim/pullpos.h"

/* -infinity: before every key. */
static const VqClaimKey KeyMin = {DT_NOBEGIN, {{0}}};

/* +infinity: after every key. */
static const VqClaimKey KeyMax = {DT_NOEND, {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}};

/* Compare two keys as the index orders them (scheduled_at, then execution_id as uuid_cmp does). */
static int
CompareKeys(const VqClaimKey *a, const VqClaimKey *b)
{
	if (a->scheduled_at != b->scheduled_at)
		return a->scheduled_at < b->scheduled_at ? -1 : 1;
	return memcmp(a->execution_id.data, b->execution_id.data, UUID_LEN);
}

/* Are the levels of this queue all known? (caller holds the slot's lock) */
static int
KnownIndex(VqClaimPositions *p, const char *queue)
{
	for (int i = 0; i < VQ_MAX_CLAIM_QUEUES; i++)
		if (strcmp(p->known[i], queue) == 0)
			return i;
	return -1;
}

/* The level (queue, priority), created if asked and there is room; NULL otherwise. */
static VqClaimLevel *
FindLevel(VqClaimPositions *p, const char *queue, int32 priority, bool create)
{
	VqClaimLevel *free_level = NULL;

	for (int i = 0; i < VQ_MAX_CLAIM_LEVELS; i++)
	{
		VqClaimLevel *l = &p->levels[i];

		if (!l->used)
			free_level = free_level ? free_level : l;
		else if (l->priority == priority && strcmp(l->queue, queue) == 0)
			return l;
	}
	if (!create)
		return NULL;
	if (free_level == NULL)
	{
		p->overflow = true;
		return NULL;
	}
	memset(free_level, 0, sizeof(VqClaimLevel));
	free_level->used = true;
	strlcpy(free_level->queue, queue, sizeof(free_level->queue));
	free_level->priority = priority;
	free_level->pos = KeyMin;
	return free_level;
}

/* Order scans highest priority first. */
static int
ByPriorityDesc(const void *a, const void *b)
{
	int32		pa = ((const VqClaimScan *) a)->priority;
	int32		pb = ((const VqClaimScan *) b)->priority;

	return pa == pb ? 0 : (pa > pb ? -1 : 1);
}

/*
 * Copy the levels of a known queue into scans, highest priority first; with
 * executor >= 0, register it as claiming from each. False when the queue's
 * levels are not all known.
 */
static bool
CopyLevels(VqDatabaseSlot *slot, int executor, const char *queue, VqClaimScan *scans, int *nscans)
{
	VqClaimPositions *p = &slot->positions;
	bool		known;

	*nscans = 0;
	LWLockAcquire(slot->lock, executor >= 0 ? LW_EXCLUSIVE : LW_SHARED);
	known = !p->overflow && KnownIndex(p, queue) >= 0;
	for (int i = 0; known && i < VQ_MAX_CLAIM_LEVELS; i++)
	{
		VqClaimLevel *l = &p->levels[i];

		if (!l->used || strcmp(l->queue, queue) != 0)
			continue;
		if (executor >= 0)
		{
			l->claimers |= (uint64) 1 << executor;
			l->floor[executor] = KeyMax;
		}
		scans[*nscans].priority = l->priority;
		scans[*nscans].from = l->pos;
		scans[*nscans].took = false;
		(*nscans)++;
	}
	LWLockRelease(slot->lock);
	if (known)
		qsort(scans, *nscans, sizeof(VqClaimScan), ByPriorityDesc);
	return known;
}

/* Begin a claim on a queue (see claimpos.h). */
bool
VqClaimPositionsBegin(VqDatabaseSlot *slot, int executor, const char *queue, VqClaimScan *scans, int *nscans)
{
	return CopyLevels(slot, executor, queue, scans, nscans);
}

/* The levels of a queue, without claiming (see claimpos.h). */
bool
VqClaimPositionsLevels(VqDatabaseSlot *slot, const char *queue, VqClaimScan *scans, int *nscans)
{
	return CopyLevels(slot, -1, queue, scans, nscans);
}

/* End a claim (see claimpos.h). */
void
VqClaimPositionsEnd(VqDatabaseSlot *slot, int executor, const char *queue, VqClaimScan *scans, int nscans)
{
	VqClaimPositions *p = &slot->positions;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < nscans; i++)
	{
		VqClaimLevel *l = FindLevel(p, queue, scans[i].priority, false);
		bool		registered = l != NULL && (l->claimers & ((uint64) 1 << executor));
		VqClaimKey	to;

		if (!registered)
			continue;			/* forgotten (and maybe learnt again) meanwhile */
		l->claimers &= ~((uint64) 1 << executor);
		if (!scans[i].took)
			continue;
		to = CompareKeys(&scans[i].last, &l->floor[executor]) < 0 ? scans[i].last : l->floor[executor];
		if (CompareKeys(&to, &l->pos) > 0)
			l->pos = to;
	}
	LWLockRelease(slot->lock);
}

/* The levels a query found in a queue: claims scan each from its start (see claimpos.h). */
void
VqClaimPositionsLearn(VqDatabaseSlot *slot, const char *queue, const int32 *priorities, int n, bool more)
{
	VqClaimPositions *p = &slot->positions;
	int			free_known = -1;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (more)
		p->overflow = true;		/* more levels than fit: claims fall back to the plain scan */
	for (int i = 0; i < n; i++)
		(void) FindLevel(p, queue, priorities[i], true);
	/* jobs may predate what commits lowered the levels to: all from the start */
	for (int i = 0; i < VQ_MAX_CLAIM_LEVELS; i++)
		if (p->levels[i].used && strcmp(p->levels[i].queue, queue) == 0)
			p->levels[i].pos = KeyMin;
	for (int i = 0; i < VQ_MAX_CLAIM_QUEUES && KnownIndex(p, queue) < 0; i++)
		if (p->known[i][0] == '\0')
			free_known = i;
	if (KnownIndex(p, queue) < 0)
	{
		if (free_known >= 0)
			strlcpy(p->known[free_known], queue, sizeof(p->known[free_known]));
		else
			p->overflow = true;
	}
	LWLockRelease(slot->lock);
}

/* Committed: jobs of (queue, priority) became ENQUEUED at scheduled_at or later. */
void
VqClaimPositionLower(VqDatabaseSlot *slot, const char *queue, int32 priority, TimestampTz scheduled_at)
{
	VqClaimLevel *l = FindLevel(&slot->positions, queue, priority, true);
	VqClaimKey	key = KeyMin;

	if (l == NULL)
		return;					/* no room: claims fall back to the plain scan */
	key.scheduled_at = scheduled_at;
	if (CompareKeys(&key, &l->pos) < 0)
		l->pos = key;
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		if ((l->claimers & ((uint64) 1 << i)) && CompareKeys(&key, &l->floor[i]) < 0)
			l->floor[i] = key;
}

/* The positions check found a due job of (queue, priority) behind the position: move it back (takes the slot's lock). */
void
VqClaimPositionMoveBack(VqDatabaseSlot *slot, const char *queue, int32 priority, TimestampTz scheduled_at)
{
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	VqClaimPositionLower(slot, queue, priority, scheduled_at);
	LWLockRelease(slot->lock);
}

/* Forget every position of a database: the claims', the relay's and the pulls' (pullpos.c). */
void
VqClaimPositionsForget(VqDatabaseSlot *slot)
{
	memset(&slot->positions, 0, sizeof(VqClaimPositions));
	VqPullPositionsForget(slot);
}

/* Begin a relay (see claimpos.h). */
int64
VqRelayPositionBegin(VqDatabaseSlot *slot, int executor)
{
	VqRelayPosition *r = &slot->positions.relay;
	int64		from;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	r->claimers |= (uint64) 1 << executor;
	r->floor[executor] = PG_INT64_MAX;
	from = r->pos;
	LWLockRelease(slot->lock);
	return from;
}

/* End a relay (see claimpos.h). */
void
VqRelayPositionEnd(VqDatabaseSlot *slot, int executor, int64 last)
{
	VqRelayPosition *r = &slot->positions.relay;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (r->claimers & ((uint64) 1 << executor))
	{
		int64		to = Min(last + 1, r->floor[executor]);

		r->claimers &= ~((uint64) 1 << executor);
		if (last > 0 && to > r->pos)
			r->pos = to;
	}
	LWLockRelease(slot->lock);
}

/* Committed: outbox rows due at once were published, the lowest with this id. */
void
VqRelayPositionLower(VqDatabaseSlot *slot, int64 id)
{
	VqRelayPosition *r = &slot->positions.relay;

	r->pos = Min(r->pos, id);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
		if (r->claimers & ((uint64) 1 << i))
			r->floor[i] = Min(r->floor[i], id);
}

/*
 * claimpos.c: claim positions.
 *
 * A claim takes the due jobs of a lane in (priority DESC, scheduled_at,
 * execution_id) order from a partial index: an executor's claim takes a queue's
 * function jobs from job_claim_idx, a worker's take one external handler's
 * jobs in a queue from job_take_idx (lane "queue/handler"). Every job it
 * finishes leaves an index entry behind that later scans must step over until
 * vacuum removes it, and a long-held snapshot (a report, pg_dump, an idle
 * transaction) keeps vacuum from removing any: a plain "first due jobs" scan
 * then walks every job finished since the snapshot was taken. So for each
 * priority level of a lane the database's slot remembers the key where
 * claims got to, and each claim scans a level from there. The claimers are
 * the executors and the takes in flight (take.c), VQ_MAX_CLAIMERS in all.
 *
 * The invariant, per level: every ENQUEUED job that no claim holds and whose
 * commit is visible has a key after the level's position, or a commit will
 * lower the position to its key. It is kept by
 *  - commits: every transaction that makes jobs ENQUEUED (an enqueue, a retry,
 *    an abandoned job put back, jobs an executor claimed and released
 *    untouched, jobs a take gave back) lowers the positions of their levels
 *    after it commits (wakeup.c), creating a level it has not seen; a take
 *    whose transaction aborts lowers them to the jobs it had taken (take.c);
 *  - claims: a claim reads the positions before its scans take their
 *    snapshots, and moves a level's position only to the last key it took, or
 *    to the lowest key a commit lowered that level to while it claimed, if
 *    lower (a commit its snapshot may have missed);
 *  - resets: positions are forgotten when an executor exits abnormally (it may
 *    have released claimed jobs without lowering) and when jobs are made due
 *    by other means (vq_redrive); then each lane's levels are learnt again
 *    with a query, and scanned from their start once.
 * A safety net checks it: every 10 s (less often when a look takes long)
 * executor 0 looks for a due job behind each level's position, and moves the
 * position back to any it finds (poscheck.c).
 * A future job needs nothing: within its level, no claim can pass its key
 * before it is due. A lane whose levels are not all known is claimed the
 * plain way: one a commit could not add a level to (VQ_MAX_CLAIM_LEVELS) is
 * no longer known, and a learn that began before such a miss (misses) does
 * not make any lane known.
 *
 * The lanes of external handlers: handlers x queues of them exist, and few
 * hold jobs. Only those that hold jobs are made known (VqClaimLearnExternal:
 * one query finds every level holding external jobs), and once every lane
 * that holds jobs is known (external_complete), a commit that gives jobs to
 * another lane makes it known, or, when it cannot, says the list is not
 * complete any more. While it is complete, takes and the executors' look at
 * due times visit the known external lanes only; else they look with that
 * query, whose cost is the levels holding jobs too. A lane known once stays
 * known (and its levels) until the positions are forgotten.
 * The outbox relay keeps one position the same way, by id, for the rows due
 * at publication (see relay.c).
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/timestamp.h"

#include "claim/claimpos.h"

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

/* The name of a lane (see claimpos.h). */
void
VqLaneName(char *lane, const char *queue, const char *handler)
{
	if (handler == NULL)
		strlcpy(lane, queue, VQ_LANE_MAX + 1);
	else
		snprintf(lane, VQ_LANE_MAX + 1, "%s/%s", queue, handler);
}

/* Are the levels of this lane all known? (caller holds the slot's lock) */
static int
KnownIndex(VqClaimPositions *p, const char *lane)
{
	for (int i = 0; i < VQ_MAX_CLAIM_LANES; i++)
		if (strcmp(p->known[i], lane) == 0)
			return i;
	return -1;
}

/* Is this an external handler's lane ("queue/handler")? */
static bool
IsExternalLane(const char *lane)
{
	return strchr(lane, '/') != NULL;
}

/* Make a lane known; false when there is no room (caller holds the slot's lock exclusively). */
static bool
RememberLane(VqClaimPositions *p, const char *lane)
{
	if (KnownIndex(p, lane) >= 0)
		return true;
	for (int i = 0; i < VQ_MAX_CLAIM_LANES; i++)
		if (p->known[i][0] == '\0')
		{
			strlcpy(p->known[i], lane, sizeof(p->known[i]));
			return true;
		}
	return false;
}

/*
 * A commit could not remember a level of a lane (or an external lane): the
 * lane is not known any more (its claims go the plain way), and learns that
 * began before it and the directory of external lanes cannot trust what they
 * found.
 */
static void
Missed(VqClaimPositions *p, const char *lane)
{
	int			k = KnownIndex(p, lane);

	if (k >= 0)
		p->known[k][0] = '\0';
	p->overflow = true;
	p->misses++;
	if (IsExternalLane(lane))
		p->external_complete = false;
}

/* The level (lane, priority), created if asked and there is room; NULL otherwise. */
static VqClaimLevel *
FindLevel(VqClaimPositions *p, const char *lane, int32 priority, bool create)
{
	VqClaimLevel *free_level = NULL;

	for (int i = 0; i < VQ_MAX_CLAIM_LEVELS; i++)
	{
		VqClaimLevel *l = &p->levels[i];

		if (!l->used)
			free_level = free_level ? free_level : l;
		else if (l->priority == priority && strcmp(l->lane, lane) == 0)
			return l;
	}
	if (!create || free_level == NULL)
		return NULL;
	memset(free_level, 0, sizeof(VqClaimLevel));
	free_level->used = true;
	strlcpy(free_level->lane, lane, sizeof(free_level->lane));
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
 * Copy the levels of a known lane into scans, highest priority first; with
 * claimer >= 0, register it as claiming from each. False when the lane's
 * levels are not all known.
 */
static bool
CopyLevels(VqDatabaseSlot *slot, int claimer, const char *lane, VqClaimScan *scans, int *nscans)
{
	VqClaimPositions *p = &slot->positions;
	bool		known;

	*nscans = 0;
	LWLockAcquire(slot->lock, claimer >= 0 ? LW_EXCLUSIVE : LW_SHARED);
	/* (a worker's take found the slot without holding it: it may serve another database by now) */
	known = slot->dboid == MyDatabaseId && KnownIndex(p, lane) >= 0;
	for (int i = 0; known && i < VQ_MAX_CLAIM_LEVELS; i++)
	{
		VqClaimLevel *l = &p->levels[i];

		if (!l->used || strcmp(l->lane, lane) != 0)
			continue;
		if (claimer >= 0)
		{
			l->claiming[claimer] = true;
			l->floor[claimer] = KeyMax;
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

/* Begin a claim on a lane (see claimpos.h). */
bool
VqClaimPositionsBegin(VqDatabaseSlot *slot, int claimer, const char *lane, VqClaimScan *scans, int *nscans)
{
	return CopyLevels(slot, claimer, lane, scans, nscans);
}

/* The levels of a lane, without claiming (see claimpos.h). */
bool
VqClaimPositionsLevels(VqDatabaseSlot *slot, const char *lane, VqClaimScan *scans, int *nscans)
{
	return CopyLevels(slot, -1, lane, scans, nscans);
}

/* End a claim (see claimpos.h). */
void
VqClaimPositionsEnd(VqDatabaseSlot *slot, int claimer, const char *lane, VqClaimScan *scans, int nscans)
{
	VqClaimPositions *p = &slot->positions;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	for (int i = 0; i < nscans && slot->dboid == MyDatabaseId; i++)
	{
		VqClaimLevel *l = FindLevel(p, lane, scans[i].priority, false);
		bool		registered = l != NULL && claimer >= 0 && l->claiming[claimer];
		VqClaimKey	to;

		if (!registered)
			continue;			/* forgotten (and maybe learnt again) meanwhile */
		l->claiming[claimer] = false;
		if (!scans[i].took)
			continue;
		to = CompareKeys(&scans[i].last, &l->floor[claimer]) < 0 ? scans[i].last : l->floor[claimer];
		if (CompareKeys(&to, &l->pos) > 0)
			l->pos = to;
	}
	LWLockRelease(slot->lock);
}

/* The misses so far: read before a learn's query (see claimpos.h). */
uint64
VqClaimPositionsMisses(VqDatabaseSlot *slot)
{
	uint64		misses;

	LWLockAcquire(slot->lock, LW_SHARED);
	misses = slot->positions.misses;
	LWLockRelease(slot->lock);
	return misses;
}

/* Make a lane known with the levels it has now, each scanned from its start; false if it cannot be. */
static bool
MakeKnown(VqClaimPositions *p, const char *lane)
{
	if (KnownIndex(p, lane) >= 0)
		return true;
	/* jobs may predate what commits lowered the levels to: all from the start */
	for (int i = 0; i < VQ_MAX_CLAIM_LEVELS; i++)
		if (p->levels[i].used && strcmp(p->levels[i].lane, lane) == 0)
			p->levels[i].pos = KeyMin;
	return RememberLane(p, lane);
}

/* The levels a query found in a lane: claims scan each from its start (see claimpos.h). */
void
VqClaimPositionsLearn(VqDatabaseSlot *slot, const char *lane, const int32 *priorities, int n, bool more,
					  uint64 misses)
{
	VqClaimPositions *p = &slot->positions;
	bool		fits = !more;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->dboid != MyDatabaseId)
	{
		LWLockRelease(slot->lock);
		return;
	}
	for (int i = 0; i < n && fits; i++)
		fits = FindLevel(p, lane, priorities[i], true) != NULL;
	/* (no room, or a commit missed a level since the query began: this lane's claims stay plain) */
	if (!fits)
		p->overflow = true;
	else if (p->misses == misses && !MakeKnown(p, lane))
		p->overflow = true;
	LWLockRelease(slot->lock);
}

/* The external lanes that are known (see claimpos.h). */
bool
VqClaimExternalLanes(VqDatabaseSlot *slot, List **lanes, uint64 *misses)
{
	VqClaimPositions *p = &slot->positions;
	bool		complete;

	LWLockAcquire(slot->lock, LW_SHARED);
	complete = slot->dboid == MyDatabaseId && p->external_complete;
	*misses = p->misses;
	for (int i = 0; i < VQ_MAX_CLAIM_LANES && slot->dboid == MyDatabaseId; i++)
		if (p->known[i][0] != '\0' && IsExternalLane(p->known[i]))
			*lanes = lappend(*lanes, pstrdup(p->known[i]));
	LWLockRelease(slot->lock);
	return complete;
}

/* Every level holding external jobs, as a query found them: make their lanes known (see claimpos.h). */
bool
VqClaimLearnExternal(VqDatabaseSlot *slot, uint64 misses, char **lanes, const int32 *priorities, int n)
{
	VqClaimPositions *p = &slot->positions;
	bool		complete = true;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->dboid != MyDatabaseId || p->misses != misses)
	{
		/* (a commit missed a level since the query began: what it found may lack that level) */
		LWLockRelease(slot->lock);
		return false;
	}
	/* the levels found, of the lanes not known (a known lane has all its levels, or a commit adds it) */
	for (int i = 0; i < n; i++)
		if (KnownIndex(p, lanes[i]) < 0 && FindLevel(p, lanes[i], priorities[i], true) == NULL)
			complete = false;
	/*
	 * Every external lane with a level (those found, and those of commits the
	 * query did not see), unless a level of it did not fit.
	 */
	for (int i = 0; i < VQ_MAX_CLAIM_LEVELS; i++)
	{
		VqClaimLevel *l = &p->levels[i];
		bool		fits = true;

		if (!l->used || !IsExternalLane(l->lane) || KnownIndex(p, l->lane) >= 0)
			continue;
		for (int j = 0; j < n && fits; j++)
			fits = strcmp(lanes[j], l->lane) != 0 || FindLevel(p, lanes[j], priorities[j], false) != NULL;
		if (!fits || !MakeKnown(p, l->lane))
			complete = false;
	}
	if (complete)
		p->external_complete = true;
	else
		p->overflow = true;
	LWLockRelease(slot->lock);
	return complete;
}

/* Committed: jobs of (lane, priority) became ENQUEUED at scheduled_at or later. */
void
VqClaimPositionLower(VqDatabaseSlot *slot, const char *lane, int32 priority, TimestampTz scheduled_at)
{
	VqClaimPositions *p = &slot->positions;
	VqClaimLevel *l = FindLevel(p, lane, priority, true);
	VqClaimKey	key = KeyMin;

	if (l == NULL)
	{
		Missed(p, lane);		/* no room: this lane's claims fall back to the plain scan */
		return;
	}
	/* a lane that held no job while the directory is complete: it has this level only */
	if (p->external_complete && IsExternalLane(lane) && !RememberLane(p, lane))
		Missed(p, lane);
	key.scheduled_at = scheduled_at;
	if (CompareKeys(&key, &l->pos) < 0)
		l->pos = key;
	for (int i = 0; i < VQ_MAX_CLAIMERS; i++)
		if (l->claiming[i] && CompareKeys(&key, &l->floor[i]) < 0)
			l->floor[i] = key;
}

/* A job of (lane, priority) waits behind the position: move it back (takes the slot's lock). */
void
VqClaimPositionMoveBack(VqDatabaseSlot *slot, const char *lane, int32 priority, TimestampTz scheduled_at)
{
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->dboid == MyDatabaseId)
		VqClaimPositionLower(slot, lane, priority, scheduled_at);
	LWLockRelease(slot->lock);
}

/* The lanes whose levels are all known (see claimpos.h). */
int
VqClaimKnownLanes(VqDatabaseSlot *slot, char (*lanes)[VQ_LANE_MAX + 1], int max)
{
	int			n = 0;

	LWLockAcquire(slot->lock, LW_SHARED);
	for (int i = 0; i < VQ_MAX_CLAIM_LANES && n < max && slot->dboid == MyDatabaseId; i++)
		if (slot->positions.known[i][0] != '\0')
			strlcpy(lanes[n++], slot->positions.known[i], VQ_LANE_MAX + 1);
	LWLockRelease(slot->lock);
	return n;
}

/* Forget every position of a database: the claims', the takes' and the relay's (a learn under way is a miss). */
void
VqClaimPositionsForget(VqDatabaseSlot *slot)
{
	uint64		misses = slot->positions.misses;

	memset(&slot->positions, 0, sizeof(VqClaimPositions));
	slot->positions.misses = misses + 1;
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

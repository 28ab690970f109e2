/*
 * claimpos.h: where claims got to, per lane and priority level, so that the
 * next claim starts there (see claimpos.c). A lane is a queue (the executors'
 * claims of its function jobs) or "queue/handler" (workers' takes of one
 * external handler's jobs in a queue); a claimer is an executor (its number)
 * or a take (VQ_MAX_EXECUTORS + its number).
 */
#ifndef VQ_CLAIMPOS_H
#define VQ_CLAIMPOS_H

#include "postgres.h"

#include "nodes/pg_list.h"

#include "main/shmem.h"

/* The predicates of the two claim indexes: a function handler's job (job_claim_idx), an external one's (job_take_idx). */
#define VQ_CLAIMABLE \
	" state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state AND handler_function IS NOT NULL"
#define VQ_TAKEABLE \
	" state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state AND handler_function IS NULL"

/* One priority level a claim scans: from where, and what it took. */
typedef struct VqClaimScan
{
	int32		priority;
	VqClaimKey	from;			/* the level's position when the claim began */
	bool		took;			/* the scan claimed jobs ... */
	VqClaimKey	last;			/* ... up to this key */
} VqClaimScan;

/* The name of a lane: the queue, or "queue/handler" for an external handler's jobs (handler not NULL). */
extern void VqLaneName(char *lane, const char *queue, const char *handler);

/*
 * Begin a claim on a lane: copy its levels, highest priority first, into
 * scans (room for VQ_MAX_CLAIM_LEVELS) and, with claimer >= 0, note that it
 * claims from them. False when the lane's levels are not all known (claim
 * the plain way, or learn them first).
 */
extern bool VqClaimPositionsBegin(VqDatabaseSlot *slot, int claimer, const char *lane,
								  VqClaimScan *scans, int *nscans);

/* The levels of a known lane, highest priority first (no claim); false when not known. */
extern bool VqClaimPositionsLevels(VqDatabaseSlot *slot, const char *lane, VqClaimScan *scans, int *nscans);

/*
 * End it: each level the claim took jobs from moves its position to the last
 * key taken, or to the lowest key a commit lowered it to meanwhile, if lower.
 */
extern void VqClaimPositionsEnd(VqDatabaseSlot *slot, int claimer, const char *lane,
								VqClaimScan *scans, int nscans);

/* The misses so far (levels commits could not remember): read it before a learn's query. */
extern uint64 VqClaimPositionsMisses(VqDatabaseSlot *slot);

/*
 * The priority levels that have ENQUEUED jobs in a lane, as a query found
 * them (more: it found more than VQ_MAX_CLAIM_LEVELS; misses: read before
 * the query): from now on claims scan them, each from its start, if they
 * fit and no commit missed a level since.
 */
extern void VqClaimPositionsLearn(VqDatabaseSlot *slot, const char *lane, const int32 *priorities, int n,
								  bool more, uint64 misses);

/*
 * The known lanes of external handlers, as names (palloc'd) appended to
 * *lanes; returns whether they are all the external lanes that hold jobs
 * (else, find the levels with a query and tell VqClaimLearnExternal; *misses
 * is what it wants).
 */
extern bool VqClaimExternalLanes(VqDatabaseSlot *slot, List **lanes, uint64 *misses);

/*
 * Every level (lanes[i], priorities[i]) that holds external handlers' jobs,
 * as a query begun after VqClaimExternalLanes returned misses found them: the
 * lanes not known yet are made known, if they fit. Returns whether every
 * external lane that holds jobs is known now.
 */
extern bool VqClaimLearnExternal(VqDatabaseSlot *slot, uint64 misses, char **lanes, const int32 *priorities,
								 int n);

/* Committed: jobs of (lane, priority) became ENQUEUED at scheduled_at or later (caller holds the slot's lock). */
extern void VqClaimPositionLower(VqDatabaseSlot *slot, const char *lane, int32 priority, TimestampTz scheduled_at);

/* A job of (lane, priority) is ENQUEUED at scheduled_at behind the position: move it back (takes the slot's lock). */
extern void VqClaimPositionMoveBack(VqDatabaseSlot *slot, const char *lane, int32 priority, TimestampTz scheduled_at);

/* The lanes whose levels are all known (at most max, each VQ_LANE_MAX + 1 bytes); returns how many. */
extern int	VqClaimKnownLanes(VqDatabaseSlot *slot, char (*lanes)[VQ_LANE_MAX + 1], int max);

/* Begin a relay: the id to scan the rows due at publication from; note that this executor relays. */
extern int64 VqRelayPositionBegin(VqDatabaseSlot *slot, int executor);

/*
 * End it: when it took rows (last > 0, the highest id taken), move the
 * position past last, or to the lowest id a commit lowered it to meanwhile,
 * if lower.
 */
extern void VqRelayPositionEnd(VqDatabaseSlot *slot, int executor, int64 last);

/* Committed: outbox rows due at once, the lowest with this id (caller holds the slot's lock). */
extern void VqRelayPositionLower(VqDatabaseSlot *slot, int64 id);

/* Forget every position of a database (caller holds the slot's lock). */
extern void VqClaimPositionsForget(VqDatabaseSlot *slot);

#endif							/* VQ_CLAIMPOS_H */

/*
 * claimpos.h: where claims got to, per queue and priority level, so that the
 * next claim starts there (see claimpos.c).
 */
#ifndef VQ_CLAIMPOS_H
#define VQ_CLAIMPOS_H

#include "postgres.h"

#include "main/shmem.h"

/* One priority level a claim scans: from where, and what it took. */
typedef struct VqClaimScan
{
	int32		priority;
	VqClaimKey	from;			/* the level's position when the claim began */
	bool		took;			/* the scan claimed jobs ... */
	VqClaimKey	last;			/* ... up to this key */
} VqClaimScan;

/*
 * Begin a claim on a queue: copy its levels, highest priority first, into
 * scans (room for VQ_MAX_CLAIM_LEVELS) and note that this executor claims
 * from them. False when the queue's levels are not all known (claim the
 * plain way, or learn them first).
 */
extern bool VqClaimPositionsBegin(VqDatabaseSlot *slot, int executor, const char *queue,
								  VqClaimScan *scans, int *nscans);

/* The levels of a known queue, highest priority first (no claim); false when not known. */
extern bool VqClaimPositionsLevels(VqDatabaseSlot *slot, const char *queue, VqClaimScan *scans, int *nscans);

/*
 * End it: each level the claim took jobs from moves its position to the last
 * key taken, or to the lowest key a commit lowered it to meanwhile, if lower.
 */
extern void VqClaimPositionsEnd(VqDatabaseSlot *slot, int executor, const char *queue,
								VqClaimScan *scans, int nscans);

/*
 * The priority levels that have ENQUEUED jobs in a queue, as a query found
 * them (more: it found more than VQ_MAX_CLAIM_LEVELS): from now on claims
 * scan them, each from its start.
 */
extern void VqClaimPositionsLearn(VqDatabaseSlot *slot, const char *queue, const int32 *priorities, int n,
								  bool more);

/* Committed: jobs of (queue, priority) became ENQUEUED at scheduled_at or later (caller holds the slot's lock). */
extern void VqClaimPositionLower(VqDatabaseSlot *slot, const char *queue, int32 priority, TimestampTz scheduled_at);

/* The positions check found a due job of (queue, priority) behind the position: move it back to it. */
extern void VqClaimPositionMoveBack(VqDatabaseSlot *slot, const char *queue, int32 priority, TimestampTz scheduled_at);

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

/* Forget every position of a database, the pulls' too (caller holds the slot's lock). */
extern void VqClaimPositionsForget(VqDatabaseSlot *slot);

#endif							/* VQ_CLAIMPOS_H */

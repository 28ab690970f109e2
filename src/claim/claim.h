/*
 * claim.h: which queue an executor polls next, how much of a queue's
 * capacity it may take, and the claim itself.
 */
#ifndef VQ_CLAIM_H
#define VQ_CLAIM_H

#include "postgres.h"

#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "main/shmem.h"
#include "cache/registry.h"

/* What one claim took: due jobs of one queue, in claim order. */
typedef struct VqClaim
{
	VqQueue    *queue;
	List	   *jobs;			/* of VqJob *, in the memory context given to VqClaimNext */
} VqClaim;

/* Set up this executor's polling schedule (once per executor). */
extern void VqClaimInit(void);

/* Bring the polling schedule in line with the configured queues. */
extern void VqSyncQueuePolls(VqRegistry *registry, TimestampTz now);

/* Poll every queue at once (a due job was committed, or a known due time passed). */
extern void VqPollAllNow(TimestampTz now);

/* When the next queue poll is due (now + 60 s at the latest). */
extern TimestampTz VqNextQueuePoll(TimestampTz now);

/*
 * Claim from the first queue, in rotating order, whose poll is due and that
 * has due jobs and free capacity (looking first at the queue the last
 * wake-up named, when use_hint). Copies the jobs into mcxt. Returns whether
 * it claimed any.
 */
extern bool VqClaimNext(VqRegistry *registry, TimestampTz now, bool use_hint,
						MemoryContext mcxt, VqClaim *claim);

/* The scheduled_at a next-due probe found (its SPI rc), or VQ_NO_NEXT_DUE. */
extern TimestampTz VqNextDueResult(int rc);

/* The earliest scheduled_at of an ENQUEUED job still in the future, or VQ_NO_NEXT_DUE. */
extern TimestampTz VqEarliestFutureDue(VqRegistry *registry, TimestampTz now);

/* An executor takes or leaves its entry: no claim, no wait, no handler turn (caller holds the slot's lock). */
extern void VqClaimAccountingReset(VqExecutorSlot *e);

/*
 * Set this executor's count of claimed, unfinished jobs. jobs_finished: jobs
 * ended (rather than a reservation left unused), so executors waiting for
 * room in the queue are woken.
 */
extern void VqSetClaimed(int n, bool jobs_finished);

/*
 * A handler with max_running: take one of its turns before running its job
 * (false: all taken, leave the job), and give it back when the job ended.
 */
extern bool VqTakeHandlerTurn(VqHandler *handler);
extern void VqEndHandlerTurn(void);

/*
 * Room in a queue to announce again NOTIFY jobs no consumer took (0 while
 * any of its jobs is due); reserved until VqSetClaimed(0, false).
 */
extern int	VqRoomToReannounce(VqRegistry *registry, VqQueue *queue, TimestampTz now);

#endif							/* VQ_CLAIM_H */

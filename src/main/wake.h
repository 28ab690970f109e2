/*
 * wake.h: waking vq_job's processes now (wake.c): a database's executors
 * when work is due, the launcher when a database needs attention. What a
 * transaction makes due is acted on at its commit (state/wakeup.h).
 */
#ifndef VQ_WAKE_H
#define VQ_WAKE_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "main/shmem.h"

/* Tell the executors of a database that work is due now, or at next_due; set the latch of one that sleeps. */
extern void VqWakeExecutors(Oid dboid, bool due_now, TimestampTz next_due, uint32 queue_hint);

/* The same for outbox rows due now, and for callbacks queued for the executors. */
extern void VqWakeRelay(Oid dboid);
extern void VqWakeForCallbacks(Oid dboid);

/*
 * vq_job was created or dropped in the slot's database: its generation moves
 * and every executor is woken to look (caller holds the slot's lock
 * exclusively).
 */
extern void VqWakeOnExtensionChangeLocked(VqDatabaseSlot *slot);

/* vq_job was created or dropped in some database: the launcher probes again those it found without it. */
extern void VqWakeLauncherOnExtensionChange(void);

/*
 * Everything is worth a look (jobs or rows arrived unnoted): the next-due
 * time has passed, the relay's and the queues' wake counters move, every
 * executor is woken (caller holds the slot's lock exclusively).
 */
extern void VqWakeForEverythingLocked(VqDatabaseSlot *slot);

/*
 * An executor looked the next due time up (next, VQ_NO_NEXT_DUE: none): it
 * replaces a value that has passed by now, or lowers a later one that a
 * commit set meanwhile.
 */
extern void VqReplaceNextDue(VqDatabaseSlot *slot, TimestampTz next, TimestampTz now);

/*
 * Leases of jobs workers hold: the slot keeps when one may end next
 * (lease_check_at), so that the executors look for expired leases then, not
 * all the time (each look walks every version of a held job a held snapshot
 * keeps):
 *  - VqLeaseEndsAt: a take gave leases ending at t: lower it to t (and wake a
 *    sleeping executor when it moved, since it may sleep past t);
 *  - VqTakeLeaseCheckTurn: an executor's turn to look, once it passed (it is
 *    cleared: one executor looks);
 *  - VqLeasesLookedAt: the look found the earliest held lease ending at t
 *    (VQ_NO_NEXT_DUE: none held), lowering it to t;
 *  - VqLeaseCheckAt: when, for a sleeping executor's timeout.
 */
extern void VqLeaseEndsAt(Oid dboid, TimestampTz t);
extern bool VqTakeLeaseCheckTurn(VqDatabaseSlot *slot, TimestampTz now);
extern void VqLeasesLookedAt(VqDatabaseSlot *slot, TimestampTz t);
extern TimestampTz VqLeaseCheckAt(VqDatabaseSlot *slot);

/* The queue the last due wake-up named (VqNameHash), taken; 0: none. */
extern uint32 VqTakeDueQueueHint(VqDatabaseSlot *slot);

/*
 * Wake-ups of workers outside the server (takes of external handlers), by
 * the bit of each handler's name hash (VqTakeWakeBit: a collision only costs
 * a needless notification):
 *  - VqTakersWaiting: a take of these handlers begins, before its scan takes
 *    its snapshot; the bits stay until an executor relays a wake-up for them;
 *  - VqWakeTakers: at commit, jobs of these handlers became due; when a take
 *    of one of them waits, one sleeping executor is woken to relay;
 *  - VqTakeTakersToWake: an executor takes the bits both due and waiting,
 *    clearing them, and notifies those handlers' channels;
 *  - VqTakersAllDue: every handler may have due jobs (a due time passed).
 */
extern uint64 VqTakeWakeBit(uint32 handler_hash);
extern void VqTakersWaiting(Oid dboid, uint64 bits);
extern void VqWakeTakers(Oid dboid, uint64 bits);
extern uint64 VqTakeTakersToWake(VqDatabaseSlot *slot);
extern void VqTakersAllDue(VqDatabaseSlot *slot);

/* Wake the launcher. */
extern void VqWakeLauncher(void);

/* Set the latch of every executor of every database (the launcher: each must look at VqShared). */
extern void VqWakeAllExecutors(void);

#endif							/* VQ_WAKE_H */

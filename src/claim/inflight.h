/*
 * inflight.h: an upper bound of each queue's NOTIFY jobs in flight, so that
 * claims count them in the table only when it leaves too little room (see
 * inflight.c).
 */
#ifndef VQ_INFLIGHT_H
#define VQ_INFLIGHT_H

#include "postgres.h"

#include "main/shmem.h"
#include "cache/registry.h"

/* The bound of a queue's NOTIFY jobs in flight, or -1 when none is known (caller holds the slot's lock). */
extern int	VqNotifyBoundLocked(VqDatabaseSlot *slot, const char *queue);

/* The launcher: a database takes the slot, with no bounds (caller holds the slot's lock exclusively). */
extern void VqNotifyBoundsForget(VqDatabaseSlot *slot);

/*
 * Executors: count a queue's NOTIFY jobs in flight in the table (those that
 * hold capacity), and make the count the queue's new bound.
 */
extern int	VqCountNotifyInFlight(VqQueue *queue, TimestampTz now);

/*
 * Executors: a NOTIFY job of the queue is announced in this transaction; once
 * it has committed, VqAnnouncementsCommitted adds them to their queues' bounds
 * (call it before lowering the reservation they were made in).
 */
extern void VqNoteAnnounced(const char *queue);
extern void VqAnnouncementsCommitted(void);

/* A consumer's reply ends a NOTIFY job of the queue in this transaction: its bound goes down at commit. */
extern void VqNotifyJobEnding(const char *queue);

#endif							/* VQ_INFLIGHT_H */

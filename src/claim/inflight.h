/*
 * inflight.h: an upper bound of each queue's external jobs in flight (taken
 * by workers and not answered), so that claims and takes count them in the
 * table only when it leaves too little room (see inflight.c).
 */
#ifndef VQ_INFLIGHT_H
#define VQ_INFLIGHT_H

#include "postgres.h"

#include "main/shmem.h"
#include "cache/registry.h"

/* The bound of a queue's external jobs in flight, or -1 when none is known (caller holds the slot's lock). */
extern int	VqNotifyBoundLocked(VqDatabaseSlot *slot, const char *queue);

/* The launcher: a database takes the slot, with no bounds (caller holds the slot's lock exclusively). */
extern void VqNotifyBoundsForget(VqDatabaseSlot *slot);

/* Count a queue's external jobs in flight in the table; the count becomes its bound (returned). */
extern int	VqCountNotifyInFlight(VqQueue *queue);

/*
 * A take: reserve room for up to want jobs in the queue (its capacity less the
 * executors' claims and the jobs workers hold); returns how many it may take.
 * They count as taken until this transaction ends; VqReleaseTakeRoom gives back
 * what the take did not use.
 */
extern int	VqReserveTakeRoom(VqQueue *queue, int want);
extern void VqReleaseTakeRoom(VqQueue *queue, int unused);

/* A reply ends a taken job of the queue in this transaction: its bound goes down at commit. */
extern void VqNotifyJobEnding(const char *queue);

#endif							/* VQ_INFLIGHT_H */

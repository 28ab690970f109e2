/*
 * pullpos.h: where vq_pull got to, per NOTIFY handler, so that the next pull
 * starts there (see pullpos.c).
 */
#ifndef VQ_PULLPOS_H
#define VQ_PULLPOS_H

#include "postgres.h"

#include "access/htup.h"
#include "access/tupdesc.h"

#include "main/shmem.h"

/* An announced job no consumer took: the predicate of job_pull_idx, and not taken. */
#define VQ_WAITING_FOR_CONSUMER \
	" state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state AND worker_pid IS NULL AND consumer_claimed_at IS NULL"
/* The pull order, as job_pull_idx keys it. */
#define VQ_PULL_KEY \
	"ROW(OPERATOR(pg_catalog.-) (priority::pg_catalog.int8), scheduled_at, execution_id)"

/* The key of a job in pull order. */
extern VqPullKey VqMakePullKey(int32 priority, TimestampTz scheduled_at, const pg_uuid_t *execution_id);

/* The key of an SPI row whose priority, scheduled_at and execution_id are at these columns (1-based). */
extern VqPullKey VqRowPullKey(HeapTuple tup, TupleDesc desc, int priority_col, int scheduled_col, int id_col);

/* A key as three SPI parameters (int8, timestamptz, uuid), into values[0..2]. */
extern void VqPullKeyDatums(const VqPullKey *key, Datum *values);

/* Order two keys as job_pull_idx does. */
extern int	VqComparePullKeys(const VqPullKey *a, const VqPullKey *b);

/*
 * Begin a pull of a handler's announced jobs: *from is where to scan from
 * (false: from the start, and *from is before every job). When it can, the pull is registered, so that its
 * commit moves the position (see VqPullTook).
 */
extern bool VqPullBegin(const char *handler, VqPullKey *from);

/* Was the pull just begun registered (can it move the position)? */
extern bool VqPullMayMove(void);

/*
 * The pull just begun took jobs, the first (in pull order) at low: if its
 * transaction aborts, the position is lowered to it; until it ends, other
 * pulls may look past the jobs it holds.
 */
extern void VqPullTaken(const VqPullKey *low);

/*
 * A fresh look between where the pull began and its last take (upto) found
 * left, the first job the pull left behind (not taken, held by no other
 * pull), or none (NULL): when its transaction commits, the position moves to
 * upto or to just before left, and not past a job a commit lowered it to
 * meanwhile.
 */
extern void VqPullMayMoveTo(const VqPullKey *upto, const VqPullKey *left);

/* Is xid the (sub)transaction of another pull of the handler that has not ended? */
extern bool VqPullHeldByAnother(const char *handler, TransactionId xid);

/*
 * Executors: a NOTIFY job of a handler is announced in this transaction; once
 * it committed, VqPullAnnouncementsCommitted lowers the handler's position to it.
 */
extern void VqNotePullAnnounced(const char *handler, int32 priority, TimestampTz scheduled_at,
								const pg_uuid_t *execution_id);
extern void VqPullAnnouncementsCommitted(void);

/* A job of the handler is waiting at key (the positions check found it): lower the position to it. */
extern void VqPullPositionLower(const char *handler, const VqPullKey *key);

/* Forget every pull position of a database, and the pulls in flight (caller holds the slot's lock; claimpos.c). */
extern void VqPullPositionsForget(VqDatabaseSlot *slot);

/* The position of a handler (before every job when it has none): no job waits behind it. */
extern VqPullKey VqPullPositionOf(const char *handler);

/* The handlers with a position, and the positions (for the check); returns how many (at most max). */
extern int	VqPullPositions(VqPullPosition *out, int max);

#endif							/* VQ_PULLPOS_H */

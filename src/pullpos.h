/*
 * pullpos.h: where vq_pull got to, per NOTIFY handler, so that the next pull
 * starts there (see pullpos.c).
 */
#ifndef VQ_PULLPOS_H
#define VQ_PULLPOS_H

#include "postgres.h"

#include "shmem.h"

/* The key of a job in pull order. */
extern VqPullKey VqMakePullKey(int32 priority, TimestampTz scheduled_at, const pg_uuid_t *execution_id);

/* Order two keys as job_pull_idx does. */
extern int	VqComparePullKeys(const VqPullKey *a, const VqPullKey *b);

/*
 * Begin a pull of a handler's announced jobs: *from is where to scan from
 * (false: from the start). When it can, the pull is registered, so that its
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
 * A fresh look found no job the pull left behind (not taken, held by no
 * other pull) between where it began and upto: when its transaction commits,
 * the position moves to upto, unless a commit lowered it below meanwhile.
 */
extern void VqPullMayMoveTo(const VqPullKey *upto);

/* Is xid the (sub)transaction of another pull of the handler that has not ended? */
extern bool VqPullHeldByAnother(const char *handler, TransactionId xid);

/*
 * Executors: a NOTIFY job of a handler is announced in this transaction; once
 * it committed, VqPullAnnouncementsCommitted lowers the handler's position to it.
 */
extern void VqNotePullAnnounced(const char *handler, int32 priority, TimestampTz scheduled_at);
extern void VqPullAnnouncementsCommitted(void);

/* A job of the handler is waiting at key (the positions check found it): lower the position to it. */
extern void VqPullPositionLower(const char *handler, const VqPullKey *key);

/* The handlers with a position, and the positions (for the check); returns how many (at most max). */
extern int	VqPullPositions(VqPullPosition *out, int max);

#endif							/* VQ_PULLPOS_H */

/*
 * guard.h: the utility hook that keeps vq_job's executors out of the way of
 * database-level statements.
 */
#ifndef VQ_GUARD_H
#define VQ_GUARD_H

/* Install the utility hook (from _PG_init). */
extern void VqGuardInit(void);

#endif							/* VQ_GUARD_H */

/*
 * poscheck.h: the claim positions' safety net, run by executor 0
 * (see poscheck.c).
 */
#ifndef VQ_POSCHECK_H
#define VQ_POSCHECK_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "cache/registry.h"

/* Executor 0, every few seconds: move claim positions back to any due job they passed. */
extern void VqCheckClaimPositions(VqRegistry *registry, TimestampTz now);

#endif							/* VQ_POSCHECK_H */

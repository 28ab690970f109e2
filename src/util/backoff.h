/*
 * backoff.h: the retry backoff table (FIXED, LINEAR, EXPONENTIAL).
 */
#ifndef VQ_BACKOFF_H
#define VQ_BACKOFF_H

#include "postgres.h"

typedef enum VqBackoffStrategy
{
	VQ_BACKOFF_FIXED,
	VQ_BACKOFF_LINEAR,
	VQ_BACKOFF_EXPONENTIAL
} VqBackoffStrategy;

/* Parse a strategy name, case-insensitively; false when unknown. */
extern bool VqParseBackoffStrategy(const char *name, VqBackoffStrategy *strategy);

/* Delay in ms before zero-based attempt n under the strategy. */
extern int64 VqBackoffDelayMs(VqBackoffStrategy strategy, int64 base_ms, int64 max_ms, int attempt);

#endif							/* VQ_BACKOFF_H */

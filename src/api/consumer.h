/*
 * consumer.h: what the executors use of the NOTIFY consumers' side (consumer.c).
 */
#ifndef VQ_CONSUMER_H
#define VQ_CONSUMER_H

#include "postgres.h"

#include "utils/timestamp.h"

/* Executor 0, every few seconds: move pull positions back to any waiting job they passed. */
extern void VqCheckPullPositions(TimestampTz now);

#endif							/* VQ_CONSUMER_H */

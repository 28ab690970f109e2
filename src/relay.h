/*
 * relay.h: the outbox relay, run by the executors between claims.
 */
#ifndef VQ_RELAY_H
#define VQ_RELAY_H

#include "registry.h"

/* Relay one batch of due outbox rows in the caller's transaction; returns the rows handled. */
extern int	VqRelayBatch(VqRegistry *registry, int limit, TimestampTz now);

#endif							/* VQ_RELAY_H */

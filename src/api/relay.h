/*
 * relay.h: the outbox relay, run by the executors between claims.
 */
#ifndef VQ_RELAY_H
#define VQ_RELAY_H

#include "cache/registry.h"

/* Relay one batch of due outbox rows in the caller's transaction; returns the rows handled. */
extern int	VqRelayBatch(VqRegistry *registry, int limit, TimestampTz now);

/* The earliest time after now at which a timed outbox row (scheduled, or retried) is due (DT_NOEND: none). */
extern TimestampTz VqRelayNextDue(TimestampTz now);

/*
 * At exit after a hard timeout: record the row whose destination function was
 * running as a retryable failure (in the caller's transaction, connected to
 * SPI); false when there was none.
 */
extern bool VqRelayRecordCutDelivery(void);

#endif							/* VQ_RELAY_H */

/*
 * notify.h: the notifications workers outside the server wait for (see
 * notify.c).
 */
#ifndef VQ_NOTIFY_H
#define VQ_NOTIFY_H

#include "postgres.h"

#include "utils/uuid.h"

/*
 * Executors: when jobs of external handlers became due and a take of them
 * waits (wake.h), send "due <handler>" on those handlers' channels, in a
 * transaction of its own. Returns whether it sent any.
 */
extern bool VqRelayTakeWakeups(void);

/* vq_cancel: tell the worker holding the job, on its handler's channel, at commit. */
extern void VqNotifyCancel(const char *channel, pg_uuid_t *execution_id);

#endif							/* VQ_NOTIFY_H */

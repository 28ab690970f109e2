/*
 * notify.h: the jobs of NOTIFY handlers, announced to external consumers
 * (see notify.c).
 */
#ifndef VQ_NOTIFY_H
#define VQ_NOTIFY_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "main/job.h"
#include "cache/registry.h"

/* Mark a NOTIFY handler's job RUNNING and announce it on its channel. */
extern void VqDispatchNotify(VqJob *job, const char *channel);

/*
 * Announce again the NOTIFY jobs of one queue that no consumer took in time,
 * as far as its free capacity allows (in the caller's transaction); true when
 * room was reserved: release it with VqSetClaimed(0, false) after the commit.
 */
extern bool VqReannounceWaiting(VqRegistry *registry, TimestampTz now);

#endif							/* VQ_NOTIFY_H */

/*
 * dispatch.h: running one job's handler (a function in a subtransaction, as
 * the enqueuing role, under the execution timeout; or an announcement to a
 * NOTIFY consumer).
 */
#ifndef VQ_DISPATCH_H
#define VQ_DISPATCH_H

#include "main/job.h"
#include "cache/registry.h"

/* Set up the execution timeout and the cancel signal (once per executor). */
extern void VqDispatchInit(void);

/* The vq.job_context value of a job. */
extern Datum VqJobContextDatum(VqJob *job);

/* Run a function handler in a subtransaction; fills in the outcome. */
extern void VqRunFunctionHandler(VqJob *job, VqOutcome *outcome);

/* Mark a NOTIFY handler's job RUNNING and announce it on its channel. */
extern void VqDispatchNotify(VqJob *job, const char *channel);

/*
 * Announce again the NOTIFY jobs of one queue that no consumer took in time,
 * as far as its free capacity allows (in the caller's transaction); true when
 * room was reserved: release it with VqSetClaimed(0, false) after the commit.
 */
extern bool VqReannounceWaiting(VqRegistry *registry, TimestampTz now);

/*
 * Arm the execution timeout around user code (a handler, a destination
 * function); disarm it. When the code returned normally, a cancel that came
 * too late is dropped.
 */
extern void VqWatchBegin(void);
extern void VqWatchEnd(bool returned_normally);

/* How long user code that caught the timeout's cancel may go on before its process ends. */
#define VQ_HARD_TIMEOUT_AFTER_MS 2000

/* Is user code running now (a handler, a destination function)? */
extern bool VqInUserCode(void);

/* Was the handler that ran last (or runs now) interrupted after a vq_cancel request? */
extern bool VqHandlerCancelForced(void);

/* Did the execution timeout fire for the user code that ran last (or runs now)? */
extern bool VqUserCodeTimedOut(void);

#endif							/* VQ_DISPATCH_H */

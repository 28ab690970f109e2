/*
 * watch.h: the watch over user code in an executor: the execution timeout,
 * the cancels of a stop and of vq_cancel (see watch.c).
 */
#ifndef VQ_WATCH_H
#define VQ_WATCH_H

#include "postgres.h"

/* Set up the execution timeout and the cancel signal (once per executor). */
extern void VqWatchInit(void);

/*
 * Arm the execution timeout around user code (handler: a function handler,
 * which also gets the vq_cancel poll; else a destination function); disarm
 * it. When the code returned normally, a cancel that came too late is
 * dropped.
 */
extern void VqWatchBegin(bool handler);
extern void VqWatchEnd(bool returned_normally);

/* How long user code that caught the timeout's cancel may go on before its process ends. */
#define VQ_HARD_TIMEOUT_AFTER_MS 2000

/* Is user code running now (a handler, a destination function)? */
extern bool VqInUserCode(void);

/* Was the handler that ran last (or runs now) interrupted after a vq_cancel request? */
extern bool VqHandlerCancelForced(void);

/* Did the execution timeout fire for the user code that ran last (or runs now)? */
extern bool VqUserCodeTimedOut(void);

#endif							/* VQ_WATCH_H */

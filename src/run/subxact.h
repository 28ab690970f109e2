/*
 * subxact.h: running a piece of work in a subtransaction of its own
 * (subxact.c), for administrators' callbacks, user code and vq_job's own
 * steps alike.
 */
#ifndef VQ_SUBXACT_H
#define VQ_SUBXACT_H

#include "postgres.h"

/* A piece of work run in a subtransaction: returns whether what it did is kept (false: rolled back). */
typedef bool (*VqSubxactWork) (void *arg);

/*
 * Run work(arg) in a subtransaction of its own. Returns NULL when it
 * returned (what it did is kept, or rolled back if it returned false);
 * otherwise its error (allocated in the caller's memory context) after
 * rolling back everything it did. The caller's memory context and resource
 * owner are the current ones again either way. A cancel or a termination
 * (SQLSTATE class 57) is not returned but raised again after the rollback,
 * so the statement (or process) it was meant for ends; except in an
 * executor outside user code, which never receives a cancel (a class-57
 * error there is the work's own failure).
 */
extern ErrorData *VqTryInSubtransaction(VqSubxactWork work, void *arg);

/*
 * The same around user code under the watch (watch.h: a handler, a
 * destination function), whose cancels (the execution timeout's, a stop's,
 * vq_cancel's) are meant for that code: every error is returned, a cancel
 * too, and on an error the watch is disarmed before the rollback (the
 * caller disarms it after a return).
 */
extern ErrorData *VqTryUserCode(VqSubxactWork work, void *arg);

#endif							/* VQ_SUBXACT_H */

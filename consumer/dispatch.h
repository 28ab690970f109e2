/*
 * dispatch.h: what to ask the server next, and what its answers start.  One
 * request at a time on the session, sent without waiting: replies first,
 * then lease extensions, then a take when there is room (free concurrency)
 * and jobs may be due (the last take was full, a "due" notification came,
 * or the poll interval passed).  A take's jobs are started at once.
 */
#ifndef VQC_DISPATCH_H
#define VQC_DISPATCH_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "pollset.h"

void		dispatch_init(void);
/* The session setup (conn.c calls it on every new session). */
bool		dispatch_setup(PGconn *conn);
/* A notification on one of our channels: "due <handler>", "cancel <execution_id>". */
void		dispatch_notification(const char *channel, const char *payload);
/* Send the next request if none is on its way. */
void		dispatch_kick(double now);
/* Read the answer to the request on its way, if it came. */
void		dispatch_results(double now);
/* The session was lost: what the request on its way was about is sorted out. */
void		dispatch_connection_lost(void);
/* Stop taking; give back what was taken and not started. */
void		dispatch_stop(void);
/* Wake at the next poll or lease extension. */
void		dispatch_wake_at(PollSet *ps);
/* No request on its way. */
bool		dispatch_idle(void);
/* --once: a take found nothing while nothing ran (or a take failed). */
bool		dispatch_once_done(void);
/* Log (--verbose) how many requests of each kind, and how long they took. */
void		dispatch_summary(void);
/* A take failed (--once exits 1). */
bool		dispatch_take_failed(void);

#endif

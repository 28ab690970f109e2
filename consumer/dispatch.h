/*
 * dispatch.h: what to ask the server next, and what its answers start.  Each
 * session carries one request at a time, sent without waiting: replies
 * first, then lease extensions, then a take when there is room (free
 * concurrency) and jobs may be due (the last take was full, a "due"
 * notification came, or the poll interval passed).  A take's jobs are
 * started at once.
 */
#ifndef VQC_DISPATCH_H
#define VQC_DISPATCH_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "pollset.h"

void		dispatch_init(void);
/* The setup of a new session (conn.c calls it). */
bool		dispatch_setup(int session, PGconn *conn);
/* A notification on one of our channels: "due <handler>", "cancel <execution_id>". */
void		dispatch_notification(const char *channel, const char *payload);
/* Send the next requests on the sessions that have none on its way. */
void		dispatch_kick(double now);
/* Read the answer to the request on its way on a session, if it came. */
void		dispatch_results(int session, double now);
/* A session was lost: what its request was about is sorted out. */
void		dispatch_connection_lost(int session);
/* Stop taking; give back what was taken and not started. */
void		dispatch_stop(void);
/* Wake at the next poll or lease extension. */
void		dispatch_wake_at(PollSet *ps, double now);
/* No request on its way on any session. */
bool		dispatch_idle(void);
/* --once: a take found nothing while nothing ran (or a take failed). */
bool		dispatch_once_done(void);
/* A take failed (--once exits 1). */
bool		dispatch_take_failed(void);
/* Log (--verbose) how many requests of each kind, and how long they took. */
void		dispatch_summary(void);

#endif

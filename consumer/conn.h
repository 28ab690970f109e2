/*
 * conn.h: the database sessions: connecting (again, with backoff), the
 * handlers' channels and LISTEN (on session 0 only), reading what the
 * server sends, and the notifications it delivers.  Knows nothing of jobs.
 */
#ifndef VQC_CONN_H
#define VQC_CONN_H

#include <stdbool.h>

#include <libpq-fe.h>

#define MAX_SESSIONS 4

/* Called for each notification on one of our channels. */
typedef void (*NotifyFn) (const char *channel, const char *payload);
/* Called on every new session (prepare statements...); false: drop it. */
typedef bool (*SetupFn) (int session, PGconn *conn);

void		db_init(int sessions, NotifyFn on_notify, SetupFn on_setup);
int			db_sessions(void);
/* Session i, or NULL while it has none. */
PGconn	   *db(int i);
/*
 * Connect session i when it has none and its backoff allows (1 s doubling to
 * 30 s); true when connected.  *failures: its attempts failed in a row.
 */
bool		db_ensure(int i, double now, int *failures);
/* When db_ensure will try session i again (monotonic), while it has none. */
double		db_retry_at(int i);
/* Read what the server sent on session i; deliver notifications.  False: it is lost. */
bool		db_read(int i);
/* Deliver notifications libpq holds already (session 0). */
void		db_notifications(void);
/* Drop session i (lost, or at the end). */
void		db_close(int i);
/* libpq's error text on one line (a static buffer). */
const char *pq_error(const PGconn *conn, const PGresult *res);

#endif

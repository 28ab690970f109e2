/*
 * conn.h: the database session: connecting (again, with backoff), the
 * handlers' channels and LISTEN, reading what the server sends, and the
 * notifications it delivers.  Knows nothing of jobs.
 */
#ifndef VQC_CONN_H
#define VQC_CONN_H

#include <stdbool.h>

#include <libpq-fe.h>

/* Called for each notification on one of our channels. */
typedef void (*NotifyFn) (const char *channel, const char *payload);
/* Called on every new session (prepare statements...); false: drop it. */
typedef bool (*SetupFn) (PGconn *conn);

void		db_init(NotifyFn on_notify, SetupFn on_setup);
/* The session, or NULL while there is none. */
PGconn	   *db(void);
/*
 * Connect when there is no session and the backoff allows (1 s doubling to
 * 30 s); true when connected.  *failures: attempts failed in a row.
 */
bool		db_ensure(double now, int *failures);
/* When db_ensure will try again (monotonic), while disconnected. */
double		db_retry_at(void);
/* Read what the server sent; deliver notifications.  False: the session is lost. */
bool		db_read(void);
/* Deliver notifications libpq holds already. */
void		db_notifications(void);
/* Drop the session (lost, or at the end). */
void		db_close(void);
/* libpq's error text, without its trailing newline (a static buffer). */
const char *pq_error(const PGconn *conn, const PGresult *res);

#endif

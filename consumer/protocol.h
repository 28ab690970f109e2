/*
 * protocol.h: the SQL of the worker protocol (vq_take_jobs, vq_reply_jobs,
 * vq_extend_leases), prepared once per session and sent without waiting
 * (the event loop reads the results); and what the results say.
 */
#ifndef VQC_PROTOCOL_H
#define VQC_PROTOCOL_H

#include <stdbool.h>

#include <libpq-fe.h>

#include "jobs.h"

/* Prepare the statements on a new session. */
bool		proto_prepare(PGconn *conn);

/* Send a take of up to max_jobs jobs of our handlers. */
bool		proto_send_take(PGconn *conn, int max_jobs);
/* Send the replies of these jobs (their outcomes and errors). */
bool		proto_send_reply(PGconn *conn, Job *const *jobs, int n);
/* Send a lease extension for these jobs. */
bool		proto_send_extend(PGconn *conn, Job *const *jobs, int n);

/* The jobs a take returned: new JOB_TAKEN jobs, in take order, into out[]. */
int			proto_take_result(const PGresult *res, Job **out, double now);
/* Log the replies the server ignored (a reply result). */
void		proto_reply_result(const PGresult *res, Job *const *jobs, int n);
/*
 * Apply an extension result to its jobs: new lease, or lease_lost for the
 * jobs it does not list; on_cancel for jobs vq_cancel asked to stop.
 */
void		proto_extend_result(const PGresult *res, Job *const *jobs, int n, double now,
								void (*on_cancel) (Job *job));

/* When to extend a lease of len seconds granted at now. */
double		proto_extend_time(double now, double len);

#endif

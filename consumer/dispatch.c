/*
 * dispatch.c: the requests and their results.  The executors send "due
 * <handler>" only after a take of that handler found less than it asked for,
 * so after a full take the next one is sent without waiting for a
 * notification; after a short one, the next waits for a notification or the
 * poll interval.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "conn.h"
#include "coprocess.h"
#include "dispatch.h"
#include "jobs.h"
#include "protocol.h"
#include "run.h"
#include "util.h"

/*
 * Most replies per call: the server's cost per reply grows with the batch
 * (see README.md), and a reply that waits holds its queue's capacity.
 */
#define REPLY_MAX 200

typedef enum
{
	REQ_NONE,
	REQ_TAKE,
	REQ_REPLY,
	REQ_EXTEND
} ReqKind;

static struct
{
	ReqKind		kind;
	Job		  **jobs;			/* reply / extend: the jobs it is about */
	int			n;
	int			asked;			/* take: max_jobs */
	PGresult   *error;			/* an error result, kept until the request ends */
	bool		got_rows;		/* its result came */
	double		sent_at;
}			req;

/* Requests by kind: how many, jobs in them, seconds on their way (for dispatch_summary). */
static struct
{
	long		calls;
	long		jobs;
	double		secs;
}			stats[4];

static Job **buffer;			/* room for the jobs of one request */
static int	buffer_size;
static bool take_full = true;	/* the last take got all it asked for: more may be due */
static bool woken = true;		/* a "due" notification (or the start) since the last take */
static double next_poll = 0;	/* take without a notification from then on */
static double next_extend = 0;	/* some lease may need extending from then on */
static bool stopping = false;
static bool once_done = false;
static bool take_failed = false;

void
dispatch_init(void)
{
	buffer_size = capacity() > REPLY_MAX ? capacity() : REPLY_MAX;
	if (buffer_size < opt.batch)
		buffer_size = opt.batch;
	buffer = xmalloc(sizeof(Job *) * (size_t) buffer_size);
}

bool
dispatch_setup(PGconn *conn)
{
	woken = true;				/* catch up with what came while there was no session */
	return proto_prepare(conn);
}

static void
cancel_job(Job *job)
{
	if (job->cancel_requested || (job->state != JOB_TAKEN && job->state != JOB_RUNNING))
		return;
	job->cancel_requested = true;
	if (opt.coprocess)
		co_cancel(job);
	else
		run_cancel(job);
}

void
dispatch_notification(const char *channel, const char *payload)
{
	if (strncmp(payload, "due ", 4) == 0)
	{
		for (int i = 0; i < opt.nhandlers; i++)
			if (strcmp(payload + 4, opt.handlers[i]) == 0)
				woken = true;
		return;
	}
	if (strncmp(payload, "cancel ", 7) == 0)
	{
		Job		   *job = job_find(payload + 7);

		if (job != NULL)
			cancel_job(job);
		return;
	}
	verbose("ignoring a notification on channel \"%s\": %.200s", channel, payload);
}

/* A take is worth sending now. */
static bool
take_wanted(double now, int free_slots)
{
	int			worth = opt.batch < capacity() / 2 ? opt.batch : capacity() / 2;

	if (stopping || once_done || free_slots <= 0)
		return false;
	if (opt.once)
		return take_full || jobs_busy() == 0;
	if (woken || now >= next_poll)
		return true;
	/* more is due: wait until a good part of a batch fits */
	return take_full && free_slots >= (worth > 0 ? worth : 1);
}

/* The held jobs whose lease needs extending soon, into buffer; how many. */
static int
extension_jobs(double now)
{
	int			n = 0;

	next_extend = now + 3600;
	for (Job *job = jobs_first(); job; job = job->next)
	{
		if ((job->state != JOB_TAKEN && job->state != JOB_RUNNING) || job->lease_lost)
			continue;
		/* (those due within a quarter of their lease go along) */
		if (job->extend_at <= now + job->lease_len / 4)
		{
			if (n < buffer_size)
				buffer[n++] = job;
			else
				next_extend = now;
		}
		else if (job->extend_at < next_extend)
			next_extend = job->extend_at;
	}
	return n;
}

static bool
send_request(ReqKind kind, Job **jobs, int n, int asked)
{
	PGconn	   *conn = db();
	bool		ok = kind == REQ_TAKE ? proto_send_take(conn, asked) :
		kind == REQ_REPLY ? proto_send_reply(conn, jobs, n) : proto_send_extend(conn, jobs, n);

	req.kind = kind;
	req.jobs = jobs;
	req.n = n;
	req.asked = asked;
	req.error = NULL;
	req.got_rows = false;
	req.sent_at = now_sec();
	if (!ok)
	{
		dispatch_connection_lost();
		db_close();
	}
	return ok;
}

void
dispatch_kick(double now)
{
	int			free_slots = capacity() - jobs_busy();
	int			n;

	if (req.kind != REQ_NONE || db() == NULL)
		return;
	if (replies_pending() > 0)
	{
		n = replies_take(buffer, REPLY_MAX);
		(void) send_request(REQ_REPLY, buffer, n, 0);
	}
	else if (now >= next_extend && (n = extension_jobs(now)) > 0)
		(void) send_request(REQ_EXTEND, buffer, n, 0);
	else if (take_wanted(now, free_slots))
	{
		woken = false;
		next_poll = now + opt.poll_interval;
		(void) send_request(REQ_TAKE, NULL, 0, free_slots < opt.batch ? free_slots : opt.batch);
	}
}

/* Start the jobs a take returned (or give them back when stopping). */
static void
take_done(const PGresult *res, double now)
{
	int			n = proto_take_result(res, buffer, now);

	stats[REQ_TAKE].jobs += n;
	if (n > 0)
		verbose("took %d job(s) (asked for %d)", n, req.asked);
	take_full = n >= req.asked;
	/* (a short take may be the queue's capacity: --once ends when one finds nothing at all) */
	if (opt.once && n == 0 && jobs_busy() == 0)
		once_done = true;
	for (int i = 0; i < n; i++)
	{
		Job		   *job = buffer[i];

		if (job->extend_at < next_extend)
			next_extend = job->extend_at;
		if (stopping)
			job_done(job, OUTCOME_RELEASE, NULL);
		else if (opt.coprocess)
			co_assign(job);
		else
			run_start(job);
	}
}

/* A request failed with an error (not a lost session). */
static void
request_failed(const PGresult *res, double now)
{
	static const char *const names[] = {"", "vq_take_jobs", "vq_reply_jobs", "vq_extend_leases"};

	logmsg("%s failed: %s", names[req.kind], pq_error(db(), res));
	if (req.kind == REQ_TAKE)
	{
		take_full = false;
		take_failed = true;
		if (opt.once)
			once_done = true;
		else
			logmsg("taking again in %g s", opt.poll_interval);
	}
	else if (req.kind == REQ_REPLY)
	{
		logmsg("%d repl%s not delivered", req.n, req.n == 1 ? "y" : "ies");
		for (int i = 0; i < req.n; i++)
			job_free(req.jobs[i]);
	}
	else
		for (int i = 0; i < req.n; i++)
		{
			req.jobs[i]->extend_at = now + 1.0;
			next_extend = now + 1.0;
		}
}

/* The request's result came. */
static void
request_done(const PGresult *res, double now)
{
	switch (req.kind)
	{
		case REQ_TAKE:
			take_done(res, now);
			break;
		case REQ_REPLY:
			stats[REQ_REPLY].jobs += req.n;
			proto_reply_result(res, req.jobs, req.n);
			for (int i = 0; i < req.n; i++)
				job_free(req.jobs[i]);
			break;
		case REQ_EXTEND:
			proto_extend_result(res, req.jobs, req.n, now, cancel_job);
			for (int i = 0; i < req.n; i++)
				if (!req.jobs[i]->lease_lost && req.jobs[i]->extend_at < next_extend)
					next_extend = req.jobs[i]->extend_at;
			break;
		case REQ_NONE:
			break;
	}
}

void
dispatch_results(double now)
{
	PGconn	   *conn = db();
	PGresult   *res;

	while (conn && req.kind != REQ_NONE && !PQisBusy(conn))
	{
		if ((res = PQgetResult(conn)) == NULL)
		{
			/* the request is over */
			if (PQstatus(conn) == CONNECTION_BAD)
			{
				logmsg("connection lost: %s", pq_error(conn, req.error));
				dispatch_connection_lost();
				db_close();
				return;
			}
			if (req.error)
				request_failed(req.error, now);
			else if (!req.got_rows)
				logmsg("no result from the server");
			PQclear(req.error);
			req.error = NULL;
			stats[req.kind].calls++;
			stats[req.kind].secs += now_sec() - req.sent_at;
			req.kind = REQ_NONE;
			break;
		}
		if (PQresultStatus(res) == PGRES_TUPLES_OK && !req.got_rows && req.error == NULL)
		{
			req.got_rows = true;
			request_done(res, now);
			PQclear(res);
		}
		else if (req.error == NULL && PQresultStatus(res) != PGRES_TUPLES_OK)
			req.error = res;
		else
			PQclear(res);
	}
	db_notifications();
}

void
dispatch_connection_lost(void)
{
	if (req.kind == REQ_REPLY)
	{
		logmsg("the session was lost during a reply: it is sent again after the reconnection");
		replies_putback(req.jobs, req.n);
	}
	else if (req.kind == REQ_TAKE)
		logmsg("the session was lost during a take: jobs it may have taken come back when their lease expires");
	PQclear(req.error);
	req.error = NULL;
	req.kind = REQ_NONE;
	take_full = false;
}

void
dispatch_stop(void)
{
	stopping = true;
	if (opt.coprocess)
		co_release_unsent();
}

void
dispatch_wake_at(PollSet *ps)
{
	if (!stopping && !once_done && !opt.once && capacity() > jobs_busy())
		ps_wake_at(ps, next_poll);
	if (jobs_busy() > 0)
		ps_wake_at(ps, next_extend);
}

bool
dispatch_idle(void)
{
	return req.kind == REQ_NONE;
}

bool
dispatch_once_done(void)
{
	return once_done;
}

bool
dispatch_take_failed(void)
{
	return take_failed;
}

void
dispatch_summary(void)
{
	static const char *const names[] = {"", "takes", "replies", "lease extensions"};

	for (int k = REQ_TAKE; k <= REQ_EXTEND; k++)
		if (stats[k].calls > 0)
			logmsg("%s: %ld call(s), %ld job(s), %.3f s waiting for the server", names[k],
					stats[k].calls, stats[k].jobs, stats[k].secs);
}

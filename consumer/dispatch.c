/*
 * dispatch.c: the requests and their results.  The executors send "due
 * <handler>" only after a take of that handler found less than it asked for,
 * so after a full take the next one is sent without waiting for a
 * notification; after a short one, the next waits for a notification or the
 * poll interval.  With several sessions, a take and a reply run on the
 * server at the same time; the slots a take on its way asked for are
 * reserved, so that two takes never ask for more than the free concurrency.
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
#define REPLY_MAX 1000

typedef enum
{
	REQ_NONE,
	REQ_TAKE,
	REQ_REPLY,
	REQ_EXTEND
} ReqKind;

typedef struct
{
	int			session;
	ReqKind		kind;
	Job		  **jobs;			/* room for the jobs of one request */
	int			n;				/* reply / extend: how many it is about */
	int			asked;			/* take: max_jobs */
	PGresult   *error;			/* an error result, kept until the request ends */
	bool		got_rows;		/* its result came */
	bool		reserving;		/* take: its asked slots count in `reserved` */
	double		sent_at;
} Request;

static Request reqs[MAX_SESSIONS];
static int	buffer_size;

/* Requests by kind: how many, jobs in them, seconds on their way (for dispatch_summary). */
static struct
{
	long		calls;
	long		jobs;
	double		secs;
}			stats[4];

static bool take_full = true;	/* the last take got all it asked for: more may be due */
static bool woken = true;		/* a "due" notification (or a new session) since the last take */
static double next_poll = 0;	/* take without a notification from then on */
static double next_extend = 0;	/* some lease may need extending from then on */
static int	reserved = 0;		/* slots asked for by takes on their way */
static bool stopping = false;
static bool once_done = false;
static bool take_failed = false;

void
dispatch_init(void)
{
	/* (more leases to extend than that: the rest go in the next call) */
	buffer_size = opt.batch > REPLY_MAX ? opt.batch : REPLY_MAX;
	for (int i = 0; i < MAX_SESSIONS; i++)
	{
		reqs[i].session = i;
		reqs[i].jobs = xmalloc(sizeof(Job *) * (size_t) buffer_size);
	}
}

bool
dispatch_setup(int session, PGconn *conn)
{
	if (session == 0)
		woken = true;			/* catch up with what came while there was no session */
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
		return (take_full || jobs_busy() == 0) && reserved == 0;
	if (woken || now >= next_poll)
		return true;
	/* more is due: wait until a good part of a batch fits */
	return take_full && free_slots >= (worth > 0 ? worth : 1);
}

/* The held jobs whose lease needs extending soon, into jobs[]; how many. */
static int
extension_jobs(Job **jobs, double now)
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
				jobs[n++] = job;
			else
				next_extend = now;
		}
		else if (job->extend_at < next_extend)
			next_extend = job->extend_at;
	}
	return n;
}

static void
send_request(Request *r, ReqKind kind, int n, int asked)
{
	PGconn	   *conn = db(r->session);
	bool		ok = kind == REQ_TAKE ? proto_send_take(conn, asked) :
		kind == REQ_REPLY ? proto_send_reply(conn, r->jobs, n) : proto_send_extend(conn, r->jobs, n);

	r->kind = kind;
	r->n = n;
	r->asked = asked;
	r->error = NULL;
	r->got_rows = false;
	r->sent_at = now_sec();
	r->reserving = kind == REQ_TAKE;
	if (r->reserving)
		reserved += asked;
	if (!ok)
	{
		dispatch_connection_lost(r->session);
		db_close(r->session);
	}
}

/* The next request on session r, if there is one to send. */
static void
kick_one(Request *r, double now)
{
	int			free_slots = capacity() - jobs_busy() - reserved;
	int			n;

	if (replies_pending() > 0)
	{
		n = replies_take(r->jobs, REPLY_MAX);
		send_request(r, REQ_REPLY, n, 0);
	}
	else if (now >= next_extend && (n = extension_jobs(r->jobs, now)) > 0)
		send_request(r, REQ_EXTEND, n, 0);
	else if (take_wanted(now, free_slots))
	{
		woken = false;
		next_poll = now + opt.poll_interval;
		send_request(r, REQ_TAKE, 0, free_slots < opt.batch ? free_slots : opt.batch);
	}
}

void
dispatch_kick(double now)
{
	for (int i = 0; i < db_sessions(); i++)
		if (reqs[i].kind == REQ_NONE && db(i) != NULL)
			kick_one(&reqs[i], now);
}

/* A take's slots are no longer reserved. */
static void
unreserve(Request *r)
{
	if (r->reserving)
		reserved -= r->asked;
	r->reserving = false;
}

/* Start the jobs a take returned (or give them back when stopping). */
static void
take_done(Request *r, const PGresult *res, double now)
{
	int			n = proto_take_result(res, r->jobs, now);

	stats[REQ_TAKE].jobs += n;
	if (n > 0)
		verbose("took %d job(s) (asked for %d)", n, r->asked);
	take_full = n >= r->asked;
	/* (a short take may be the queue's capacity: --once ends when one finds nothing at all) */
	if (opt.once && n == 0 && jobs_busy() == 0)
		once_done = true;
	for (int i = 0; i < n; i++)
	{
		Job		   *job = r->jobs[i];

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
request_failed(Request *r, const PGresult *res, double now)
{
	static const char *const names[] = {"", "vq_take_jobs", "vq_reply_jobs", "vq_extend_leases"};

	logmsg("%s failed: %s", names[r->kind], pq_error(db(r->session), res));
	if (r->kind == REQ_TAKE)
	{
		take_full = false;
		take_failed = true;
		if (opt.once)
			once_done = true;
		else
			logmsg("taking again in %g s", opt.poll_interval);
	}
	else if (r->kind == REQ_REPLY)
	{
		logmsg("%d repl%s not delivered", r->n, r->n == 1 ? "y" : "ies");
		for (int i = 0; i < r->n; i++)
			job_free(r->jobs[i]);
	}
	else
		for (int i = 0; i < r->n; i++)
		{
			r->jobs[i]->extend_at = now + 1.0;
			next_extend = now + 1.0;
		}
}

/* The request's rows came. */
static void
request_done(Request *r, const PGresult *res, double now)
{
	switch (r->kind)
	{
		case REQ_TAKE:
			take_done(r, res, now);
			break;
		case REQ_REPLY:
			stats[REQ_REPLY].jobs += r->n;
			proto_reply_result(res, r->jobs, r->n);
			for (int i = 0; i < r->n; i++)
				job_free(r->jobs[i]);
			break;
		case REQ_EXTEND:
			stats[REQ_EXTEND].jobs += r->n;
			proto_extend_result(res, r->jobs, r->n, now, cancel_job);
			for (int i = 0; i < r->n; i++)
				if (!r->jobs[i]->lease_lost && r->jobs[i]->extend_at < next_extend)
					next_extend = r->jobs[i]->extend_at;
			break;
		case REQ_NONE:
			break;
	}
}

/* The request is over (its results all read). */
static void
request_end(Request *r, double now)
{
	if (r->error)
		request_failed(r, r->error, now);
	else if (!r->got_rows)
		logmsg("no result from the server");
	PQclear(r->error);
	r->error = NULL;
	stats[r->kind].calls++;
	stats[r->kind].secs += now_sec() - r->sent_at;
	unreserve(r);
	r->kind = REQ_NONE;
}

void
dispatch_results(int session, double now)
{
	Request    *r = &reqs[session];
	PGconn	   *conn = db(session);
	PGresult   *res;

	while (conn && r->kind != REQ_NONE && !PQisBusy(conn))
	{
		if ((res = PQgetResult(conn)) == NULL)
		{
			if (PQstatus(conn) == CONNECTION_BAD)
			{
				logmsg("connection lost: %s", pq_error(conn, r->error));
				dispatch_connection_lost(session);
				db_close(session);
				return;
			}
			request_end(r, now);
			break;
		}
		if (PQresultStatus(res) == PGRES_TUPLES_OK && !r->got_rows && r->error == NULL)
		{
			r->got_rows = true;
			unreserve(r);		/* (a take's jobs are busy from now on) */
			request_done(r, res, now);
			PQclear(res);
		}
		else if (r->error == NULL && PQresultStatus(res) != PGRES_TUPLES_OK)
			r->error = res;
		else
			PQclear(res);
	}
	if (session == 0)
		db_notifications();
}

void
dispatch_connection_lost(int session)
{
	Request    *r = &reqs[session];

	if (r->kind == REQ_REPLY)
	{
		logmsg("the session was lost during a reply: it is sent again after the reconnection");
		replies_putback(r->jobs, r->n);
	}
	else if (r->kind == REQ_TAKE)
	{
		logmsg("the session was lost during a take: jobs it may have taken come back when their lease expires");
		take_full = false;
	}
	unreserve(r);
	PQclear(r->error);
	r->error = NULL;
	r->kind = REQ_NONE;
}

void
dispatch_stop(void)
{
	stopping = true;
	if (opt.coprocess)
		co_release_unsent();
}

void
dispatch_wake_at(PollSet *ps, double now)
{
	/*
	 * (a time already past: its request waits for a session, whose answer
	 * wakes the loop anyway; never spin)
	 */
	double		soon = now + 0.05;

	if (!stopping && !once_done && !opt.once && capacity() > jobs_busy())
		ps_wake_at(ps, next_poll > soon ? next_poll : soon);
	if (jobs_busy() > 0)
		ps_wake_at(ps, next_extend > soon ? next_extend : soon);
}

bool
dispatch_idle(void)
{
	for (int i = 0; i < MAX_SESSIONS; i++)
		if (reqs[i].kind != REQ_NONE)
			return false;
	return true;
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
			verbose("%s: %ld call(s), %ld job(s), %.3f s waiting for the server", names[k],
				   stats[k].calls, stats[k].jobs, stats[k].secs);
}

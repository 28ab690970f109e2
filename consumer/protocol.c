/*
 * protocol.c: the statements of the worker protocol.  Arrays go as array
 * literals in text parameters; the handler list and the lease are the same
 * for every take.  The take commits without waiting for its WAL flush
 * (set_config(..., true) lasts for its own transaction): a take lost in a
 * crash only lets the job be taken again.  Replies stay synchronous.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "conn.h"
#include "protocol.h"
#include "util.h"

static const char *const take_sql =
"SELECT t.execution_id, t.attempt, t.handler, t.job_id, t.payload::pg_catalog.text,"
" pg_catalog.date_part('epoch', t.lease_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())"
" FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s,"
" vq_take_jobs($1::pg_catalog.text[], $2::pg_catalog.int4, $3::pg_catalog.interval) AS t";
static const char *const reply_sql =
"SELECT r.execution_id, r.attempt, r.ignored"
" FROM vq_reply_jobs($1::pg_catalog.uuid[], $2::pg_catalog.int4[], $3::pg_catalog.text[],"
" $4::pg_catalog.text[]) AS r";
static const char *const extend_sql =
"SELECT e.execution_id, e.cancel_requested,"
" pg_catalog.date_part('epoch', e.lease_until OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp())"
" FROM vq_extend_leases($1::pg_catalog.uuid[], $2::pg_catalog.int4[], $3::pg_catalog.interval) AS e";

static StrBuf handler_array;	/* {"h1","h2"} */
static char lease_text[64];		/* "N seconds", or "" for the server's default */

static bool
prepare_one(PGconn *conn, const char *name, const char *sql, int nparams)
{
	PGresult   *res = PQprepare(conn, name, sql, nparams, NULL);
	bool		ok = PQresultStatus(res) == PGRES_COMMAND_OK;

	if (!ok)
		logmsg("cannot prepare %s: %s", name, pq_error(conn, res));
	PQclear(res);
	return ok;
}

bool
proto_prepare(PGconn *conn)
{
	if (handler_array.len == 0)
	{
		sb_append_str(&handler_array, "{");
		for (int i = 0; i < opt.nhandlers; i++)
		{
			if (i > 0)
				sb_append_str(&handler_array, ",");
			sb_append_array_text(&handler_array, opt.handlers[i]);
		}
		sb_append_str(&handler_array, "}");
		if (opt.lease > 0)
			snprintf(lease_text, sizeof(lease_text), "%.3f seconds", opt.lease);
	}
	return prepare_one(conn, "vq_take_jobs", take_sql, 3) &&
		prepare_one(conn, "vq_reply_jobs", reply_sql, 4) &&
		prepare_one(conn, "vq_extend_leases", extend_sql, 3);
}

static bool
send_prepared(PGconn *conn, const char *name, int nparams, const char *const *params)
{
	if (!PQsendQueryPrepared(conn, name, nparams, params, NULL, NULL, 0))
	{
		logmsg("cannot send %s: %s", name, pq_error(conn, NULL));
		return false;
	}
	return true;
}

bool
proto_send_take(PGconn *conn, int max_jobs)
{
	char		max[16];
	const char *params[3] = {handler_array.data, max, lease_text[0] ? lease_text : NULL};

	snprintf(max, sizeof(max), "%d", max_jobs);
	return send_prepared(conn, "vq_take_jobs", 3, params);
}

/* "{id,...}" and "{attempt,...}" of these jobs. */
static void
id_arrays(Job *const *jobs, int n, StrBuf *ids, StrBuf *attempts)
{
	sb_append_str(ids, "{");
	sb_append_str(attempts, "{");
	for (int i = 0; i < n; i++)
	{
		sb_append_str(ids, i ? "," : "");
		sb_append_str(ids, jobs[i]->execution_id);
		sb_printf(attempts, i ? ",%d" : "%d", jobs[i]->attempt);
	}
	sb_append_str(ids, "}");
	sb_append_str(attempts, "}");
}

bool
proto_send_reply(PGconn *conn, Job *const *jobs, int n)
{
	static const char *const outcome_names[] = {"complete", "fail", "release"};
	StrBuf		ids = {0},
				attempts = {0},
				outcomes = {0},
				errors = {0};
	bool		all_complete = true;
	bool		ok;

	id_arrays(jobs, n, &ids, &attempts);
	sb_append_str(&outcomes, "{");
	sb_append_str(&errors, "{");
	for (int i = 0; i < n; i++)
	{
		all_complete = all_complete && jobs[i]->outcome == OUTCOME_COMPLETE;
		sb_append_str(&outcomes, i ? "," : "");
		sb_append_str(&outcomes, outcome_names[jobs[i]->outcome]);
		sb_append_str(&errors, i ? "," : "");
		if (jobs[i]->error && jobs[i]->outcome == OUTCOME_FAIL)
			sb_append_array_text(&errors, jobs[i]->error);
		else
			sb_append_str(&errors, "NULL");
	}
	sb_append_str(&outcomes, "}");
	sb_append_str(&errors, "}");
	{
		const char *params[4] = {ids.data, attempts.data, all_complete ? NULL : outcomes.data,
		all_complete ? NULL : errors.data};

		ok = send_prepared(conn, "vq_reply_jobs", 4, params);
	}
	sb_free(&ids);
	sb_free(&attempts);
	sb_free(&outcomes);
	sb_free(&errors);
	return ok;
}

bool
proto_send_extend(PGconn *conn, Job *const *jobs, int n)
{
	StrBuf		ids = {0},
				attempts = {0};
	bool		ok;

	id_arrays(jobs, n, &ids, &attempts);
	{
		const char *params[3] = {ids.data, attempts.data, lease_text[0] ? lease_text : NULL};

		ok = send_prepared(conn, "vq_extend_leases", 3, params);
	}
	sb_free(&ids);
	sb_free(&attempts);
	return ok;
}

double
proto_extend_time(double now, double len)
{
	/* halfway, so that an extension that must wait a little is still in time */
	return now + (len > 0 ? len / 2 : 1.0);
}

static char *
value_or_null(const PGresult *res, int row, int col)
{
	if (PQgetisnull(res, row, col))
		return NULL;
	return xstrndup(PQgetvalue(res, row, col), (size_t) PQgetlength(res, row, col));
}

int
proto_take_result(const PGresult *res, Job **out, double now)
{
	int			n = PQntuples(res);

	for (int i = 0; i < n; i++)
	{
		Job		   *job = job_new();

		snprintf(job->execution_id, sizeof(job->execution_id), "%s", PQgetvalue(res, i, 0));
		job->attempt = atoi(PQgetvalue(res, i, 1));
		job->handler = value_or_null(res, i, 2);
		job->job_id = value_or_null(res, i, 3);
		job->payload = value_or_null(res, i, 4);
		if (job->payload == NULL)
			job->payload = xstrdup("null");
		job->lease_len = atof(PQgetvalue(res, i, 5));
		job->extend_at = proto_extend_time(now, job->lease_len);
		out[i] = job;
	}
	return n;
}

void
proto_reply_result(const PGresult *res, Job *const *jobs, int n)
{
	static const char *const outcome_names[] = {"complete", "fail", "release"};

	for (int r = 0; r < PQntuples(res); r++)
	{
		const char *id = PQgetvalue(res, r, 0);
		const Job  *job = NULL;

		for (int i = 0; i < n && job == NULL; i++)
			if (strcmp(jobs[i]->execution_id, id) == 0)
				job = jobs[i];
		logmsg("job %s (execution %s, attempt %s): reply (%s) ignored by the server: %s",
			   job ? job_name(job) : "?", id, PQgetvalue(res, r, 1),
			   job ? outcome_names[job->outcome] : "?", PQgetvalue(res, r, 2));
	}
}

void
proto_extend_result(const PGresult *res, Job *const *jobs, int n, double now, void (*on_cancel) (Job *job))
{
	int			rows = PQntuples(res);

	for (int i = 0; i < n; i++)
	{
		Job		   *job = jobs[i];
		int			row = -1;

		for (int r = 0; r < rows && row < 0; r++)
			if (strcmp(PQgetvalue(res, r, 0), job->execution_id) == 0)
				row = r;
		if (row < 0)
		{
			job->lease_lost = true;
			logmsg("job %s (execution %s, attempt %d): lease lost (the server gave the job up); its reply will be ignored",
				   job_name(job), job->execution_id, job->attempt);
			continue;
		}
		job->lease_len = atof(PQgetvalue(res, row, 2));
		job->extend_at = proto_extend_time(now, job->lease_len);
		if (strcmp(PQgetvalue(res, row, 1), "t") == 0 && !job->cancel_requested)
			on_cancel(job);
	}
}

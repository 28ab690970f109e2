/*
 * conn.c: the session.  Each new session looks up the channels of the
 * handlers (vq.handler_settings, readable by everyone), LISTENs on them
 * (not with --once) and on --channel ones, then hands the session to the
 * setup callback.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "conn.h"
#include "util.h"

#define BACKOFF_MAX_SEC 30.0

static PGconn *conn = NULL;
static NotifyFn notify_fn;
static SetupFn setup_fn;
static double retry_at = 0;
static double backoff = 1.0;
static int	failed_in_a_row = 0;
static const char *channels[MAX_CHANNELS + MAX_HANDLERS];
static int	nchannels = 0;

void
db_init(NotifyFn on_notify, SetupFn on_setup)
{
	notify_fn = on_notify;
	setup_fn = on_setup;
}

PGconn *
db(void)
{
	return conn;
}

const char *
pq_error(const PGconn *c, const PGresult *res)
{
	static char buf[1024];
	const char *msg = res ? PQresultErrorMessage(res) : NULL;
	size_t		n;

	if (msg == NULL || *msg == '\0')
		msg = c ? PQerrorMessage(c) : "no connection";
	snprintf(buf, sizeof(buf), "%s", msg);
	n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return buf;
}

/* Server NOTICE / WARNING: print it. */
static void
notice_processor(void *arg, const char *message)
{
	(void) arg;
	logmsg("server: %.*s", (int) strcspn(message, "\n"), message);
}

static void
add_channel(const char *name)
{
	for (int i = 0; i < nchannels; i++)
		if (strcmp(channels[i], name) == 0)
			return;
	channels[nchannels++] = xstrdup(name);
}

/* The handlers' channels (address 'notify:<channel>'), and --channel ones. */
static bool
lookup_channels(void)
{
	StrBuf		names = {0};
	const char *params[1];
	PGresult   *res;
	bool		ok;

	sb_append_str(&names, "{");
	for (int i = 0; i < opt.nhandlers; i++)
	{
		if (i > 0)
			sb_append_str(&names, ",");
		sb_append_array_text(&names, opt.handlers[i]);
	}
	sb_append_str(&names, "}");
	params[0] = names.data;
	res = PQexecParams(conn, "SELECT h.name, CASE WHEN h.address LIKE 'notify:%' THEN substr(h.address, 8)"
					   " ELSE h.address END FROM vq.handler_settings h"
					   " WHERE h.kind = 'notify' AND h.name = ANY ($1::text[])", 1, NULL, params, NULL, NULL, 0);
	sb_free(&names);
	ok = PQresultStatus(res) == PGRES_TUPLES_OK;
	if (!ok)
		logmsg("cannot look up the handlers' channels: %s", pq_error(conn, res));
	for (int i = 0; ok && i < opt.nhandlers; i++)
	{
		int			row = -1;

		for (int r = 0; r < PQntuples(res); r++)
			if (strcmp(PQgetvalue(res, r, 0), opt.handlers[i]) == 0)
				row = r;
		if (row < 0)
			logmsg("\"%s\" is not a registered external (NOTIFY) handler: taking its jobs will fail", opt.handlers[i]);
		else
			add_channel(PQgetvalue(res, row, 1));
	}
	PQclear(res);
	for (int i = 0; i < opt.nchannels; i++)
		add_channel(opt.channels[i]);
	return ok;
}

static bool
listen_all(void)
{
	for (int i = 0; i < nchannels; i++)
	{
		char	   *ident = PQescapeIdentifier(conn, channels[i], strlen(channels[i]));
		char	   *sql;
		PGresult   *res;
		bool		ok;

		if (ident == NULL)
		{
			logmsg("cannot quote channel name: %s", pq_error(conn, NULL));
			return false;
		}
		sql = xasprintf("LISTEN %s", ident);
		PQfreemem(ident);
		res = PQexec(conn, sql);
		free(sql);
		ok = PQresultStatus(res) == PGRES_COMMAND_OK;
		if (!ok)
			logmsg("LISTEN failed: %s", pq_error(conn, res));
		PQclear(res);
		if (!ok)
			return false;
	}
	return true;
}

/* One attempt: a fresh session, set up.  False (logged) when it failed. */
static bool
try_connect(void)
{
	const char *keywords[] = {"dbname", "fallback_application_name", "client_encoding", NULL};
	const char *values[] = {opt.conninfo, "vq_consumer", "UTF8", NULL};

	db_close();
	conn = PQconnectdbParams(keywords, values, 1);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		logmsg("cannot connect: %s", conn ? pq_error(conn, NULL) : "out of memory");
		return false;
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);
	while (nchannels > 0)
		free((char *) channels[--nchannels]);
	if (!lookup_channels() || (!opt.once && !listen_all()) || !setup_fn(conn))
		return false;
	if (opt.once)
		verbose("connected (server pid %d)", PQbackendPID(conn));
	for (int i = 0; !opt.once && i < nchannels; i++)
		verbose("connected (server pid %d), listening on channel %s", PQbackendPID(conn), channels[i]);
	return true;
}

bool
db_ensure(double now, int *failures)
{
	if (conn != NULL)
		return true;
	if (now < retry_at)
	{
		*failures = failed_in_a_row;
		return false;
	}
	if (try_connect())
	{
		backoff = 1.0;
		failed_in_a_row = 0;
		*failures = 0;
		return true;
	}
	db_close();
	failed_in_a_row++;
	*failures = failed_in_a_row;
	retry_at = now + backoff;
	logmsg("retrying in %g s", backoff);
	backoff = backoff * 2 > BACKOFF_MAX_SEC ? BACKOFF_MAX_SEC : backoff * 2;
	return false;
}

double
db_retry_at(void)
{
	return retry_at;
}

void
db_notifications(void)
{
	PGnotify   *n;

	while (conn && (n = PQnotifies(conn)) != NULL)
	{
		notify_fn(n->relname, n->extra);
		PQfreemem(n);
	}
}

bool
db_read(void)
{
	if (conn == NULL)
		return false;
	if (!PQconsumeInput(conn) || PQstatus(conn) == CONNECTION_BAD)
	{
		logmsg("connection lost: %s", pq_error(conn, NULL));
		return false;
	}
	db_notifications();
	return true;
}

void
db_close(void)
{
	if (conn)
		PQfinish(conn);
	conn = NULL;
}

/*
 * conn.c: the sessions.  Session 0 looks up the channels of the handlers
 * (vq.handler_settings, readable by everyone) and LISTENs on them (not with
 * --once) and on --channel ones; every new session is handed to the setup
 * callback.  The others only carry requests.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "conn.h"
#include "util.h"

#define BACKOFF_MAX_SEC 30.0

typedef struct
{
	PGconn	   *conn;
	double		retry_at;
	double		backoff;
	int			failed_in_a_row;
} Session;

static Session sessions[MAX_SESSIONS];
static int	nsessions = 1;
static NotifyFn notify_fn;
static SetupFn setup_fn;
static const char *channels[MAX_CHANNELS + MAX_HANDLERS];
static int	nchannels = 0;

void
db_init(int n, NotifyFn on_notify, SetupFn on_setup)
{
	nsessions = n < 1 ? 1 : n > MAX_SESSIONS ? MAX_SESSIONS : n;
	for (int i = 0; i < nsessions; i++)
		sessions[i] = (Session) {NULL, 0, 1.0, 0};
	notify_fn = on_notify;
	setup_fn = on_setup;
}

int
db_sessions(void)
{
	return nsessions;
}

PGconn *
db(int i)
{
	return sessions[i].conn;
}

const char *
pq_error(const PGconn *c, const PGresult *res)
{
	static char buf[1024];
	const char *msg = res ? PQresultErrorMessage(res) : NULL;
	size_t		n;

	if (msg == NULL || *msg == '\0')
		msg = c ? PQerrorMessage(c) : "no connection";
	/* one line: libpq's line breaks and tabs become single spaces */
	for (n = 0; *msg != '\0' && n < sizeof(buf) - 1; msg++)
	{
		bool		space = *msg == '\n' || *msg == '\t' || *msg == ' ';

		if (!space)
			buf[n++] = *msg;
		else if (n > 0 && buf[n - 1] != ' ')
			buf[n++] = ' ';
	}
	while (n > 0 && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
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
lookup_channels(PGconn *conn)
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
listen_all(PGconn *conn)
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

/* One attempt: a fresh session i, set up.  False (logged) when it failed. */
static bool
try_connect(int i)
{
	const char *keywords[] = {"dbname", "fallback_application_name", "client_encoding", NULL};
	const char *values[] = {opt.conninfo, "vq_consumer", "UTF8", NULL};
	PGconn	   *conn;

	db_close(i);
	conn = sessions[i].conn = PQconnectdbParams(keywords, values, 1);
	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
	{
		logmsg("cannot connect: %s", conn ? pq_error(conn, NULL) : "out of memory");
		return false;
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);
	if (i == 0)
	{
		while (nchannels > 0)
			free((char *) channels[--nchannels]);
		if (!lookup_channels(conn) || (!opt.once && !listen_all(conn)))
			return false;
	}
	if (!setup_fn(i, conn))
		return false;
	if (i > 0 || opt.once)
		verbose("connected (server pid %d)", PQbackendPID(conn));
	for (int c = 0; i == 0 && !opt.once && c < nchannels; c++)
		verbose("connected (server pid %d), listening on channel %s", PQbackendPID(conn), channels[c]);
	return true;
}

bool
db_ensure(int i, double now, int *failures)
{
	Session    *s = &sessions[i];

	*failures = s->failed_in_a_row;
	if (s->conn != NULL)
		return true;
	if (now < s->retry_at)
		return false;
	if (try_connect(i))
	{
		s->backoff = 1.0;
		s->failed_in_a_row = *failures = 0;
		return true;
	}
	db_close(i);
	*failures = ++s->failed_in_a_row;
	s->retry_at = now + s->backoff;
	logmsg("retrying in %g s", s->backoff);
	s->backoff = s->backoff * 2 > BACKOFF_MAX_SEC ? BACKOFF_MAX_SEC : s->backoff * 2;
	return false;
}

double
db_retry_at(int i)
{
	return sessions[i].retry_at;
}

void
db_notifications(void)
{
	PGnotify   *n;

	while (sessions[0].conn && (n = PQnotifies(sessions[0].conn)) != NULL)
	{
		notify_fn(n->relname, n->extra);
		PQfreemem(n);
	}
}

bool
db_read(int i)
{
	PGconn	   *conn = sessions[i].conn;

	if (conn == NULL)
		return false;
	if (!PQconsumeInput(conn) || PQstatus(conn) == CONNECTION_BAD)
	{
		logmsg("connection lost: %s", pq_error(conn, NULL));
		return false;
	}
	if (i == 0)
		db_notifications();
	return true;
}

void
db_close(int i)
{
	if (sessions[i].conn)
		PQfinish(sessions[i].conn);
	sessions[i].conn = NULL;
}

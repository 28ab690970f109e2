/*
 * vq_consumer — reference consumer for vq_job NOTIFY handlers.
 *
 *   vq_consumer --dbname CONNINFO --channel NAME --handler NAME
 *               [--batch N] [--poll-interval SEC] [--once] [--verbose]
 *               -- command [args...]
 *
 * LISTENs on a channel; for every job of the handler (announced by a
 * notification, or claimed with vq_pull() at start, after every reconnect and
 * every --poll-interval seconds) it runs the command with the job's payload
 * (JSON text) on stdin and replies vq_complete() when the command exits 0,
 * vq_fail() otherwise.  Jobs are processed one at a time.  SIGTERM / SIGINT:
 * finish the current job, reply, exit 0 (a second signal forwards SIGTERM to
 * the running command).  See README.md in this directory.
 */
#define _GNU_SOURCE				/* pipe2 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#define STDERR_TAIL_MAX		500		/* bytes of the command's stderr kept for vq_fail */
#define BACKOFF_MAX_SEC		30		/* reconnect backoff cap */
#define ONCE_CONNECT_TRIES	3		/* --once: give up after this many connection attempts */
#define STOP_CONNECT_TRIES	3		/* stopping with a reply pending: last attempts */
#define JSON_MAX_DEPTH		512

/* ------------------------------------------------------------------------ */
/* Options and global state                                                  */

static struct
{
	const char *conninfo;
	const char *channel;
	const char *handler;
	int			batch;
	double		poll_interval;
	bool		once;
	bool		verbose;
	char	  **command;		/* NULL-terminated argv */
} opt = {"", NULL, NULL, 10, 5.0, false, false, NULL};

static PGconn *conn = NULL;
static bool need_pull = true;	/* drain with vq_pull before waiting again */

static volatile sig_atomic_t stop_signals = 0;	/* SIGTERM/SIGINT received */
static volatile sig_atomic_t last_stop_signal = 0;
static int	sigpipe_fd[2] = {-1, -1};	/* self-pipe: signal handlers write a byte */

/* One job to run (from a notification or a vq_pull row). */
typedef struct
{
	char	   *execution_id;
	char	   *job_id;
	char	   *handler;
	char	   *payload;		/* raw JSON text; NULL = fetch with vq_job_payload() */
	int			attempt;
	bool		have_attempt;
	bool		payload_omitted;
} Job;

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */

static void
vlogmsg(const char *fmt, va_list ap)
{
	char		buf[2048];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	fprintf(stderr, "vq_consumer: %s\n", buf);
}

static void
logmsg(const char *fmt,...) __attribute__((format(printf, 1, 2)));
static void
logmsg(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	vlogmsg(fmt, ap);
	va_end(ap);
}

static void
verbose(const char *fmt,...) __attribute__((format(printf, 1, 2)));
static void
verbose(const char *fmt,...)
{
	va_list		ap;

	if (!opt.verbose)
		return;
	va_start(ap, fmt);
	vlogmsg(fmt, ap);
	va_end(ap);
}

/* libpq error text without its trailing newline(s), in a static buffer. */
static const char *
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

/* Server NOTICE / WARNING (e.g. why a reply was ignored): print it. */
static void
notice_processor(void *arg, const char *message)
{
	(void) arg;
	fprintf(stderr, "vq_consumer: server: %s", message);
	if (*message == '\0' || message[strlen(message) - 1] != '\n')
		fputc('\n', stderr);
}

static void *
xmalloc(size_t n)
{
	void	   *p = malloc(n ? n : 1);

	if (p == NULL)
	{
		logmsg("out of memory");
		exit(1);
	}
	return p;
}

static char *
xstrndup(const char *s, size_t n)
{
	char	   *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static void
job_free(Job *job)
{
	free(job->execution_id);
	free(job->job_id);
	free(job->handler);
	free(job->payload);
	memset(job, 0, sizeof(*job));
}

/* ------------------------------------------------------------------------ */
/* Time and signals                                                          */

static double
now_sec(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void
signal_handler(int signo)
{
	int			save_errno = errno;
	char		c = (char) signo;

	if (signo == SIGTERM || signo == SIGINT)
	{
		if (stop_signals < 1000)
			stop_signals++;
		last_stop_signal = signo;
	}
	/* wake whatever poll() is waiting; a full pipe already means "wake up" */
	if (write(sigpipe_fd[1], &c, 1) < 0)
	{
		/* nothing to do */
	}
	errno = save_errno;
}

static void
drain_sigpipe(void)
{
	char		buf[64];

	while (read(sigpipe_fd[0], buf, sizeof(buf)) > 0)
		;
}

static void
setup_signals(void)
{
	struct sigaction sa;

	if (pipe2(sigpipe_fd, O_CLOEXEC | O_NONBLOCK) != 0)
	{
		logmsg("pipe: %s", strerror(errno));
		exit(1);
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = signal_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGPIPE, &sa, NULL);	/* a command that does not read stdin: EPIPE */
}

/* Sleep up to `seconds`, returning early when a stop signal arrives. */
static void
sleep_interruptible(double seconds)
{
	double		until = now_sec() + seconds;

	while (stop_signals == 0)
	{
		double		left = until - now_sec();
		struct pollfd pfd = {sigpipe_fd[0], POLLIN, 0};

		if (left <= 0)
			break;
		if (poll(&pfd, 1, (int) (left * 1000) + 1) > 0)
			drain_sigpipe();
	}
}

/* ------------------------------------------------------------------------ */
/* Minimal JSON reading (for the notification message only)                  */

typedef struct
{
	const char *s;
	size_t		len;
	size_t		pos;
} JsonParser;

static void
json_ws(JsonParser *p)
{
	while (p->pos < p->len &&
		   (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
			p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
		p->pos++;
}

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool
json_hex4(JsonParser *p, unsigned *out)
{
	unsigned	v = 0;

	if (p->pos + 4 > p->len)
		return false;
	for (int i = 0; i < 4; i++)
	{
		int			h = hexval(p->s[p->pos + i]);

		if (h < 0)
			return false;
		v = v * 16 + (unsigned) h;
	}
	p->pos += 4;
	*out = v;
	return true;
}

static size_t
utf8_encode(unsigned cp, char *out)
{
	if (cp < 0x80)
	{
		out[0] = (char) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		out[0] = (char) (0xC0 | (cp >> 6));
		out[1] = (char) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		out[0] = (char) (0xE0 | (cp >> 12));
		out[1] = (char) (0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char) (0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char) (0xF0 | (cp >> 18));
	out[1] = (char) (0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char) (0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char) (0x80 | (cp & 0x3F));
	return 4;
}

/*
 * Parse a JSON string at p->pos (which must be '"').  With out != NULL, store
 * the decoded value (malloc'd, NUL-terminated; \u0000 is rejected).
 */
static bool
json_string(JsonParser *p, char **out)
{
	char	   *buf = NULL;
	size_t		n = 0;

	if (p->pos >= p->len || p->s[p->pos] != '"')
		return false;
	p->pos++;
	if (out)
		buf = xmalloc(p->len - p->pos + 1);	/* decoded is never longer */
	while (p->pos < p->len)
	{
		unsigned char c = (unsigned char) p->s[p->pos++];

		if (c == '"')
		{
			if (out)
			{
				buf[n] = '\0';
				*out = buf;
			}
			return true;
		}
		if (c < 0x20)
			break;				/* raw control character: invalid JSON */
		if (c != '\\')
		{
			if (buf)
				buf[n++] = (char) c;
			continue;
		}
		if (p->pos >= p->len)
			break;
		c = (unsigned char) p->s[p->pos++];
		switch (c)
		{
			case '"':
			case '\\':
			case '/':
				if (buf)
					buf[n++] = (char) c;
				break;
			case 'b':
				if (buf)
					buf[n++] = '\b';
				break;
			case 'f':
				if (buf)
					buf[n++] = '\f';
				break;
			case 'n':
				if (buf)
					buf[n++] = '\n';
				break;
			case 'r':
				if (buf)
					buf[n++] = '\r';
				break;
			case 't':
				if (buf)
					buf[n++] = '\t';
				break;
			case 'u':
				{
					unsigned	cp,
								lo;

					if (!json_hex4(p, &cp))
						goto bad;
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						if (p->pos + 2 > p->len || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
							goto bad;
						p->pos += 2;
						if (!json_hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF)
							goto bad;
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}
					else if (cp >= 0xDC00 && cp <= 0xDFFF)
						goto bad;
					if (cp == 0)
						goto bad;	/* cannot be carried in a C string */
					/* \uXXXX is 6 input bytes, at most 4 output bytes (12 -> 4 for pairs) */
					if (buf)
						n += utf8_encode(cp, buf + n);
					break;
				}
			default:
				goto bad;
		}
	}
bad:
	free(buf);
	return false;
}

static bool
json_literal(JsonParser *p, const char *lit)
{
	size_t		l = strlen(lit);

	if (p->len - p->pos < l || memcmp(p->s + p->pos, lit, l) != 0)
		return false;
	p->pos += l;
	return true;
}

static bool
json_number(JsonParser *p)
{
	size_t		start = p->pos;

	if (p->pos < p->len && p->s[p->pos] == '-')
		p->pos++;
	if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
		return false;
	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
		p->pos++;
	if (p->pos < p->len && p->s[p->pos] == '.')
	{
		p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return false;
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
	{
		p->pos++;
		if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-'))
			p->pos++;
		if (p->pos >= p->len || p->s[p->pos] < '0' || p->s[p->pos] > '9')
			return false;
		while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9')
			p->pos++;
	}
	return p->pos > start;
}

/* Skip one JSON value (validating it) starting at p->pos. */
static bool
json_skip_value(JsonParser *p, int depth)
{
	if (depth > JSON_MAX_DEPTH)
		return false;
	json_ws(p);
	if (p->pos >= p->len)
		return false;
	switch (p->s[p->pos])
	{
		case '"':
			return json_string(p, NULL);
		case '{':
			p->pos++;
			json_ws(p);
			if (p->pos < p->len && p->s[p->pos] == '}')
			{
				p->pos++;
				return true;
			}
			for (;;)
			{
				json_ws(p);
				if (!json_string(p, NULL))
					return false;
				json_ws(p);
				if (p->pos >= p->len || p->s[p->pos] != ':')
					return false;
				p->pos++;
				if (!json_skip_value(p, depth + 1))
					return false;
				json_ws(p);
				if (p->pos >= p->len)
					return false;
				if (p->s[p->pos] == '}')
				{
					p->pos++;
					return true;
				}
				if (p->s[p->pos] != ',')
					return false;
				p->pos++;
			}
		case '[':
			p->pos++;
			json_ws(p);
			if (p->pos < p->len && p->s[p->pos] == ']')
			{
				p->pos++;
				return true;
			}
			for (;;)
			{
				if (!json_skip_value(p, depth + 1))
					return false;
				json_ws(p);
				if (p->pos >= p->len)
					return false;
				if (p->s[p->pos] == ']')
				{
					p->pos++;
					return true;
				}
				if (p->s[p->pos] != ',')
					return false;
				p->pos++;
			}
		case 't':
			return json_literal(p, "true");
		case 'f':
			return json_literal(p, "false");
		case 'n':
			return json_literal(p, "null");
		default:
			return json_number(p);
	}
}

/* A string field's value, or a number's raw text (job ids could be numbers). */
static bool
json_scalar_text(JsonParser *p, char **out)
{
	size_t		start = p->pos;

	if (p->pos < p->len && p->s[p->pos] == '"')
		return json_string(p, out);
	if (!json_number(p))
		return false;
	*out = xstrndup(p->s + start, p->pos - start);
	return true;
}

static void
replace_field(char **field, char *value)
{
	free(*field);
	*field = value;
}

/*
 * Parse a notification message: a flat JSON object with execution_id, job_id,
 * handler, attempt and either payload (kept as raw JSON text) or
 * payload_omitted.  Unknown fields are skipped.  Returns false (with *why set)
 * when the message is unusable.
 */
static bool
parse_notification(const char *text, Job *job, const char **why)
{
	JsonParser	p = {text, strlen(text), 0};

	memset(job, 0, sizeof(*job));
	*why = "not a JSON object";
	json_ws(&p);
	if (p.pos >= p.len || p.s[p.pos] != '{')
		goto fail;
	p.pos++;
	json_ws(&p);
	if (p.pos < p.len && p.s[p.pos] == '}')
		p.pos++;
	else
	{
		for (;;)
		{
			char	   *key = NULL;
			size_t		vstart;
			bool		ok = true;

			json_ws(&p);
			*why = "malformed JSON";
			if (!json_string(&p, &key))
				goto fail;
			json_ws(&p);
			if (p.pos >= p.len || p.s[p.pos] != ':')
			{
				free(key);
				goto fail;
			}
			p.pos++;
			json_ws(&p);
			vstart = p.pos;
			if (strcmp(key, "execution_id") == 0 || strcmp(key, "job_id") == 0 ||
				strcmp(key, "handler") == 0)
			{
				char	   *val = NULL;

				ok = json_scalar_text(&p, &val);
				if (ok)
					replace_field(key[0] == 'e' ? &job->execution_id :
								  key[0] == 'j' ? &job->job_id : &job->handler, val);
			}
			else if (strcmp(key, "attempt") == 0)
			{
				ok = json_number(&p);
				if (ok)
				{
					char	   *num = xstrndup(p.s + vstart, p.pos - vstart);
					char	   *end;
					long		v;

					errno = 0;
					v = strtol(num, &end, 10);
					if (errno != 0 || *end != '\0' || v < INT_MIN || v > INT_MAX)
					{
						*why = "attempt is not an integer";
						free(num);
						free(key);
						goto fail;
					}
					free(num);
					job->attempt = (int) v;
					job->have_attempt = true;
				}
			}
			else if (strcmp(key, "payload") == 0)
			{
				ok = json_skip_value(&p, 0);
				if (ok)
					replace_field(&job->payload, xstrndup(p.s + vstart, p.pos - vstart));
			}
			else if (strcmp(key, "payload_omitted") == 0)
			{
				ok = json_skip_value(&p, 0);
				if (ok)
					job->payload_omitted = (p.pos - vstart == 4 &&
											memcmp(p.s + vstart, "true", 4) == 0);
			}
			else
				ok = json_skip_value(&p, 0);
			free(key);
			if (!ok)
				goto fail;
			json_ws(&p);
			if (p.pos >= p.len)
				goto fail;
			if (p.s[p.pos] == '}')
			{
				p.pos++;
				break;
			}
			if (p.s[p.pos] != ',')
				goto fail;
			p.pos++;
		}
	}
	json_ws(&p);
	if (p.pos != p.len)
	{
		*why = "trailing characters after the JSON object";
		goto fail;
	}
	if (job->execution_id == NULL || job->execution_id[0] == '\0')
	{
		*why = "no execution_id";
		goto fail;
	}
	if (!job->have_attempt)
	{
		*why = "no attempt";
		goto fail;
	}
	if (job->payload_omitted)
	{
		free(job->payload);
		job->payload = NULL;
	}
	else if (job->payload == NULL)
		job->payload_omitted = true;	/* no payload field: fetch it */
	return true;

fail:
	job_free(job);
	return false;
}

/* ------------------------------------------------------------------------ */
/* Connection                                                                */

/* Connected and LISTENing (unless --once)?  Sets up one fresh connection. */
static bool
try_connect(void)
{
	const char *keywords[] = {"dbname", "fallback_application_name", "client_encoding", NULL};
	const char *values[] = {opt.conninfo, "vq_consumer", "UTF8", NULL};

	if (conn)
		PQfinish(conn);
	conn = PQconnectdbParams(keywords, values, 1);
	if (conn == NULL)
	{
		logmsg("cannot connect: out of memory");
		return false;
	}
	if (PQstatus(conn) != CONNECTION_OK)
	{
		logmsg("cannot connect: %s", pq_error(conn, NULL));
		return false;
	}
	PQsetNoticeProcessor(conn, notice_processor, NULL);

	if (!opt.once)
	{
		char	   *ident = PQescapeIdentifier(conn, opt.channel, strlen(opt.channel));
		char	   *sql;
		PGresult   *res;
		bool		ok;

		if (ident == NULL)
		{
			logmsg("cannot quote channel name: %s", pq_error(conn, NULL));
			return false;
		}
		sql = xmalloc(strlen(ident) + sizeof("LISTEN "));
		strcpy(sql, "LISTEN ");
		strcat(sql, ident);
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
	verbose("connected (server pid %d)%s%s", PQbackendPID(conn),
			opt.once ? "" : ", listening on channel ", opt.once ? "" : opt.channel);
	return true;
}

/*
 * (Re)connect with exponential backoff (1 s doubling up to 30 s).  Gives up
 * after ONCE_CONNECT_TRIES attempts with --once; when a stop was requested it
 * gives up at once unless `reply_pending` (then after STOP_CONNECT_TRIES).
 */
static bool
reconnect(bool reply_pending)
{
	int			backoff = 1;

	for (int tries = 1;; tries++)
	{
		if (stop_signals > 0 && !reply_pending)
			return false;
		if (try_connect())
		{
			need_pull = true;
			return true;
		}
		if (opt.once && tries >= ONCE_CONNECT_TRIES)
			return false;
		if (stop_signals > 0 && tries >= STOP_CONNECT_TRIES)
			return false;
		logmsg("retrying in %d s", backoff);
		if (stop_signals > 0)
		{
			/* stopping: do not let a signal cut the last attempts short */
			struct timespec ts = {backoff, 0};

			while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
				;
		}
		else
			sleep_interruptible(backoff);
		backoff = backoff * 2 > BACKOFF_MAX_SEC ? BACKOFF_MAX_SEC : backoff * 2;
	}
}

static bool
connection_lost(void)
{
	return conn == NULL || PQstatus(conn) == CONNECTION_BAD;
}

/*
 * Run a one-statement query that returns rows.  On a lost connection,
 * reconnect (see reconnect()) and run it again when `retry`.  Returns NULL on
 * failure (already reported).
 */
static PGresult *
query(const char *what, const char *sql, int nparams, const char *const *params, bool retry)
{
	for (;;)
	{
		PGresult   *res = PQexecParams(conn, sql, nparams, NULL, params, NULL, NULL, 0);

		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			return res;
		logmsg("%s failed: %s", what, pq_error(conn, res));
		PQclear(res);
		if (!connection_lost())
			return NULL;
		if (!retry || !reconnect(true))
			return NULL;
		logmsg("reconnected; retrying %s", what);
	}
}

/* ------------------------------------------------------------------------ */
/* Running the command                                                       */

typedef struct
{
	char		buf[STDERR_TAIL_MAX];
	size_t		len;
	bool		truncated;
} Tail;

static void
tail_append(Tail *t, const char *data, size_t n)
{
	if (n >= STDERR_TAIL_MAX)
	{
		t->truncated = t->truncated || n > STDERR_TAIL_MAX || t->len > 0;
		memcpy(t->buf, data + n - STDERR_TAIL_MAX, STDERR_TAIL_MAX);
		t->len = STDERR_TAIL_MAX;
		return;
	}
	if (t->len + n > STDERR_TAIL_MAX)
	{
		size_t		drop = t->len + n - STDERR_TAIL_MAX;

		memmove(t->buf, t->buf + drop, t->len - drop);
		t->len -= drop;
		t->truncated = true;
	}
	memcpy(t->buf + t->len, data, n);
	t->len += n;
}

static void
write_all(int fd, const char *data, size_t n)
{
	while (n > 0)
	{
		ssize_t		w = write(fd, data, n);

		if (w < 0)
		{
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
			{
				struct pollfd pfd = {fd, POLLOUT, 0};

				poll(&pfd, 1, 1000);
				continue;
			}
			return;
		}
		data += w;
		n -= (size_t) w;
	}
}

/*
 * Append `src[0..n)` to `dst` as valid UTF-8 without NUL bytes: invalid bytes
 * become '?', continuation bytes at the very start (a cut character) are
 * dropped.  Returns the new end of dst (dst needs n + 1 bytes).
 */
static char *
utf8_sanitize(char *dst, const unsigned char *src, size_t n)
{
	size_t		i = 0;

	while (i < n && (src[i] & 0xC0) == 0x80)
		i++;
	while (i < n)
	{
		unsigned char c = src[i];
		size_t		len = 0;
		unsigned char lo = 0x80,
					hi = 0xBF;

		if (c >= 0x01 && c < 0x80)
		{
			*dst++ = (char) c;
			i++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF)
			len = 2;
		else if (c >= 0xE0 && c <= 0xEF)
		{
			len = 3;
			if (c == 0xE0)
				lo = 0xA0;
			else if (c == 0xED)
				hi = 0x9F;
		}
		else if (c >= 0xF0 && c <= 0xF4)
		{
			len = 4;
			if (c == 0xF0)
				lo = 0x90;
			else if (c == 0xF4)
				hi = 0x8F;
		}
		if (len > 0 && i + len <= n && src[i + 1] >= lo && src[i + 1] <= hi)
		{
			size_t		k;

			for (k = 2; k < len; k++)
				if ((src[i + k] & 0xC0) != 0x80)
					break;
			if (k == len)
			{
				memcpy(dst, src + i, len);
				dst += len;
				i += len;
				continue;
			}
		}
		*dst++ = '?';
		i++;
	}
	*dst = '\0';
	return dst;
}

/* "command exited with status N[: <stderr tail>]" (malloc'd). */
static char *
failure_text(int status, const Tail *tail)
{
	char		head[128];
	size_t		n = tail->len;
	size_t		start = 0;
	char	   *out,
			   *p;

	if (WIFSIGNALED(status))
		snprintf(head, sizeof(head), "command killed by signal %d", WTERMSIG(status));
	else
		snprintf(head, sizeof(head), "command exited with status %d", WEXITSTATUS(status));

	/* trim surrounding whitespace of the stderr tail */
	while (n > 0 && (tail->buf[n - 1] == '\n' || tail->buf[n - 1] == '\r' ||
					 tail->buf[n - 1] == ' ' || tail->buf[n - 1] == '\t'))
		n--;
	while (start < n && (tail->buf[start] == '\n' || tail->buf[start] == '\r' ||
						 tail->buf[start] == ' ' || tail->buf[start] == '\t'))
		start++;

	out = xmalloc(strlen(head) + 8 + (n - start) + 1);
	p = out + sprintf(out, "%s", head);
	if (n > start)
	{
		p += sprintf(p, ": %s", tail->truncated ? "..." : "");
		utf8_sanitize(p, (const unsigned char *) tail->buf + start, n - start);
	}
	return out;
}

/* "NAME=value" (malloc'd). */
static char *
env_entry(const char *name, const char *value)
{
	size_t		len = strlen(name) + 1 + strlen(value ? value : "") + 1;
	char	   *entry = xmalloc(len);

	snprintf(entry, len, "%s=%s", name, value ? value : "");
	return entry;
}

/*
 * The command's environment: ours, without VQ_EXECUTION_ID, VQ_JOB_ID,
 * VQ_ATTEMPT and VQ_HANDLER, then those four for this job. Entries [0..3] are
 * malloc'd; the rest point into environ.
 */
static char **
job_environment(const Job *job)
{
	extern char **environ;
	static const char *const own[] = {"VQ_EXECUTION_ID=", "VQ_JOB_ID=", "VQ_ATTEMPT=", "VQ_HANDLER="};
	size_t		n = 0;
	char	  **envp;
	char		attempt[16];
	size_t		k = 4;

	while (environ[n] != NULL)
		n++;
	envp = xmalloc((n + 5) * sizeof(char *));
	snprintf(attempt, sizeof(attempt), "%d", job->attempt);
	envp[0] = env_entry("VQ_EXECUTION_ID", job->execution_id);
	envp[1] = env_entry("VQ_JOB_ID", job->job_id);
	envp[2] = env_entry("VQ_ATTEMPT", attempt);
	envp[3] = env_entry("VQ_HANDLER", job->handler ? job->handler : opt.handler);
	for (size_t i = 0; i < n; i++)
	{
		bool		skip = false;

		for (size_t j = 0; j < 4; j++)
			if (strncmp(environ[i], own[j], strlen(own[j])) == 0)
				skip = true;
		if (!skip)
			envp[k++] = environ[i];
	}
	envp[k] = NULL;
	return envp;
}

/*
 * Run the command for one job: payload on its stdin, its stdout inherited, its
 * stderr forwarded to ours (keeping the last bytes).  Returns true when it
 * exited 0; otherwise *error is the failure text (malloc'd).
 */
static bool
run_command(const Job *job, const char *payload, char **error)
{
	int			in_pipe[2],
				err_pipe[2];
	pid_t		pid;
	int			status = 0;
	bool		reaped = false,
				forwarded = false;
	size_t		in_len = strlen(payload),
				in_off = 0;
	char	   *input;
	int			in_fd,
				err_fd;
	Tail		tail = {{0}, 0, false};

	*error = NULL;
	/* the payload plus a newline, so that line-oriented tools see a full line */
	input = xmalloc(in_len + 2);
	memcpy(input, payload, in_len);
	input[in_len++] = '\n';
	input[in_len] = '\0';

	if (pipe2(in_pipe, O_CLOEXEC) != 0)
	{
		*error = xstrndup("consumer error: cannot create a pipe", 36);
		free(input);
		return false;
	}
	if (pipe2(err_pipe, O_CLOEXEC) != 0)
	{
		close(in_pipe[0]);
		close(in_pipe[1]);
		*error = xstrndup("consumer error: cannot create a pipe", 36);
		free(input);
		return false;
	}

	/*
	 * posix_spawn (a vfork-style clone in glibc) rather than fork: no copy of
	 * the consumer's address space per job. The command gets its own process
	 * group, so a Ctrl-C meant for the consumer (finish the job, then stop)
	 * does not kill it, and default dispositions with nothing blocked.
	 */
	{
		posix_spawn_file_actions_t actions;
		posix_spawnattr_t attr;
		sigset_t	none,
					defaults;
		char	  **envp = job_environment(job);
		int			rc;

		posix_spawn_file_actions_init(&actions);
		posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
		posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
		posix_spawnattr_init(&attr);
		sigemptyset(&none);
		sigemptyset(&defaults);
		sigaddset(&defaults, SIGPIPE);
		sigaddset(&defaults, SIGTERM);
		sigaddset(&defaults, SIGINT);
		sigaddset(&defaults, SIGCHLD);
		posix_spawnattr_setsigmask(&attr, &none);
		posix_spawnattr_setsigdefault(&attr, &defaults);
		posix_spawnattr_setpgroup(&attr, 0);
		posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
		fflush(NULL);
		rc = posix_spawnp(&pid, opt.command[0], &actions, &attr, opt.command, envp);
		posix_spawnattr_destroy(&attr);
		posix_spawn_file_actions_destroy(&actions);
		for (int i = 0; i < 4; i++)
			free(envp[i]);
		free(envp);
		if (rc != 0)
		{
			close(in_pipe[0]);
			close(in_pipe[1]);
			close(err_pipe[0]);
			close(err_pipe[1]);
			free(input);
			*error = xmalloc(256);
			snprintf(*error, 256, "command exited with status %d: vq_consumer: cannot execute \"%s\": %s",
					 rc == ENOENT ? 127 : 126, opt.command[0], strerror(rc));
			return false;
		}
	}

	close(in_pipe[0]);
	close(err_pipe[1]);
	fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
	fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
	in_fd = in_pipe[1];
	err_fd = err_pipe[0];

	for (;;)
	{
		struct pollfd pfd[3];
		int			nfd = 0,
					in_idx = -1,
					err_idx = -1;

		if (!reaped)
		{
			pid_t		r = waitpid(pid, &status, WNOHANG);

			if (r == pid)
				reaped = true;
		}
		if (stop_signals >= 2 && !forwarded && !reaped)
		{
			logmsg("second stop signal: sending SIGTERM to the command (pid %d)", (int) pid);
			kill(-pid, SIGTERM);
			kill(pid, SIGTERM);
			forwarded = true;
		}
		if (reaped)
		{
			/* The command is gone: stop feeding it, collect what stderr holds now. */
			if (in_fd >= 0)
			{
				close(in_fd);
				in_fd = -1;
			}
			if (err_fd >= 0)
			{
				char		buf[4096];
				ssize_t		r;

				while ((r = read(err_fd, buf, sizeof(buf))) > 0)
				{
					write_all(2, buf, (size_t) r);
					tail_append(&tail, buf, (size_t) r);
				}
				close(err_fd);
				err_fd = -1;
			}
			break;
		}

		pfd[nfd] = (struct pollfd) {sigpipe_fd[0], POLLIN, 0};
		nfd++;
		if (in_fd >= 0)
		{
			in_idx = nfd;
			pfd[nfd++] = (struct pollfd) {in_fd, POLLOUT, 0};
		}
		if (err_fd >= 0)
		{
			err_idx = nfd;
			pfd[nfd++] = (struct pollfd) {err_fd, POLLIN, 0};
		}
		/* SIGCHLD wakes us through the self-pipe; the timeout is a safety net */
		if (poll(pfd, (nfds_t) nfd, 1000) < 0)
		{
			if (errno == EINTR)
				continue;
			logmsg("poll: %s", strerror(errno));
			sleep_interruptible(0.1);
			continue;
		}
		if (pfd[0].revents)
			drain_sigpipe();
		if (in_idx >= 0 && pfd[in_idx].revents)
		{
			ssize_t		w = write(in_fd, input + in_off, in_len - in_off);

			if (w > 0)
				in_off += (size_t) w;
			if ((w < 0 && errno != EAGAIN && errno != EINTR) || in_off >= in_len)
			{
				/* done, or the command closed its stdin (EPIPE): fine either way */
				close(in_fd);
				in_fd = -1;
			}
		}
		if (err_idx >= 0 && pfd[err_idx].revents)
		{
			char		buf[4096];
			ssize_t		r = read(err_fd, buf, sizeof(buf));

			if (r > 0)
			{
				write_all(2, buf, (size_t) r);
				tail_append(&tail, buf, (size_t) r);
			}
			else if (r == 0 || (errno != EAGAIN && errno != EINTR))
			{
				close(err_fd);
				err_fd = -1;
			}
		}
	}
	free(input);

	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return true;
	*error = failure_text(status, &tail);
	return false;
}

/* ------------------------------------------------------------------------ */
/* Jobs                                                                      */

/* Send vq_complete / vq_fail; retried after a reconnect. */
static void
reply(const Job *job, bool ok, const char *error)
{
	char		attempt[16];
	PGresult   *res;
	const char *what = ok ? "vq_complete" : "vq_fail";

	snprintf(attempt, sizeof(attempt), "%d", job->attempt);
	if (ok)
	{
		const char *params[2] = {job->execution_id, attempt};

		res = query(what, "SELECT vq_complete($1::uuid, $2::integer)", 2, params, true);
	}
	else
	{
		const char *params[3] = {job->execution_id, error, attempt};

		res = query(what, "SELECT vq_fail($1::uuid, $2::text, $3::integer)", 3, params, true);
	}
	if (res == NULL)
	{
		logmsg("job %s (execution %s, attempt %d): reply %s not delivered",
			   job->job_id ? job->job_id : "?", job->execution_id, job->attempt, what);
		return;
	}
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "t") == 0)
		verbose("job %s (execution %s, attempt %d): %s accepted",
				job->job_id ? job->job_id : "?", job->execution_id, job->attempt, what);
	else
		logmsg("job %s (execution %s, attempt %d): %s ignored by the server",
			   job->job_id ? job->job_id : "?", job->execution_id, job->attempt, what);
	PQclear(res);
}

static void
process_job(Job *job)
{
	char	   *fetched = NULL;
	const char *payload = job->payload;
	char	   *error = NULL;
	bool		ok;

	verbose("job %s (execution %s, attempt %d): start",
			job->job_id ? job->job_id : "?", job->execution_id, job->attempt);

	if (payload == NULL)
	{
		const char *params[1] = {job->execution_id};
		PGresult   *res = query("vq_job_payload",
								"SELECT vq_job_payload($1::uuid)::text", 1, params, true);

		if (res == NULL)
		{
			/* not a connection problem (or we gave up on it): report it if we can */
			if (!connection_lost())
				reply(job, false, "consumer error: could not read the payload (vq_job_payload failed)");
			return;
		}
		if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		{
			PQclear(res);
			logmsg("job %s (execution %s): payload not available (vq_job_payload returned NULL)",
				   job->job_id ? job->job_id : "?", job->execution_id);
			reply(job, false, "consumer error: payload not available (vq_job_payload returned NULL)");
			return;
		}
		fetched = xstrndup(PQgetvalue(res, 0, 0), (size_t) PQgetlength(res, 0, 0));
		PQclear(res);
		payload = fetched;
	}

	ok = run_command(job, payload, &error);
	if (ok)
		verbose("job %s (execution %s, attempt %d): command succeeded",
				job->job_id ? job->job_id : "?", job->execution_id, job->attempt);
	else
		verbose("job %s (execution %s, attempt %d): %s",
				job->job_id ? job->job_id : "?", job->execution_id, job->attempt, error);
	reply(job, ok, error);
	free(error);
	free(fetched);
}

static void
handle_notification(const PGnotify *n)
{
	Job			job;
	const char *why;

	if (strcmp(n->relname, opt.channel) != 0)
		return;
	if (!parse_notification(n->extra, &job, &why))
	{
		logmsg("ignoring a notification on channel \"%s\" (%s): %.200s",
			   n->relname, why, n->extra);
		return;
	}
	if (job.handler != NULL && strcmp(job.handler, opt.handler) != 0)
	{
		verbose("ignoring a notification for handler \"%s\"", job.handler);
		job_free(&job);
		return;
	}

	/*
	 * The notification only says a job was dispatched: claim it (and any
	 * other) with vq_pull, so that two consumers on one channel never both
	 * run it and a job announced while nobody listened is still found.
	 */
	verbose("job %s announced (attempt %d); pulling", job.execution_id, job.attempt);
	need_pull = true;
	job_free(&job);
}

/*
 * Claim a batch with vq_pull() and process it.  Returns the number of rows
 * claimed, or -1 on error.
 */
static int
pull_batch(void)
{
	char		batch[16];
	const char *params[2] = {opt.handler, batch};
	PGresult   *res;
	int			n,
				c_exec,
				c_job,
				c_handler,
				c_attempt,
				c_payload;

	snprintf(batch, sizeof(batch), "%d", opt.batch);
	/*
	 * Do not retry after a reconnect: the caller pulls again anyway. The claim
	 * commits without waiting for its WAL flush (set_config(..., true) lasts for
	 * this statement's transaction only): a claim lost in a crash just lets the
	 * job time out and be announced again. Replies stay synchronous.
	 */
	res = query("vq_pull",
				"SELECT p.execution_id::text AS execution_id, p.job_id, p.handler, p.attempt, "
				"p.payload::text AS payload "
				"FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s, "
				"vq_pull($1::text, $2::integer) AS p",
				2, params, false);
	if (res == NULL)
		return -1;
	n = PQntuples(res);
	c_exec = PQfnumber(res, "execution_id");
	c_job = PQfnumber(res, "job_id");
	c_handler = PQfnumber(res, "handler");
	c_attempt = PQfnumber(res, "attempt");
	c_payload = PQfnumber(res, "payload");
	if (n > 0)
		verbose("vq_pull claimed %d job(s)", n);

	for (int i = 0; i < n; i++)
	{
		Job			job;

		if (stop_signals > 0)
		{
			logmsg("stopping: %d claimed job(s) left unprocessed (the server times them out)",
				   n - i);
			break;
		}
		memset(&job, 0, sizeof(job));
		job.execution_id = xstrndup(PQgetvalue(res, i, c_exec), (size_t) PQgetlength(res, i, c_exec));
		if (!PQgetisnull(res, i, c_job))
			job.job_id = xstrndup(PQgetvalue(res, i, c_job), (size_t) PQgetlength(res, i, c_job));
		if (!PQgetisnull(res, i, c_handler))
			job.handler = xstrndup(PQgetvalue(res, i, c_handler), (size_t) PQgetlength(res, i, c_handler));
		job.attempt = atoi(PQgetvalue(res, i, c_attempt));
		job.have_attempt = true;
		if (PQgetisnull(res, i, c_payload))
			job.payload = xstrndup("null", 4);
		else
			job.payload = xstrndup(PQgetvalue(res, i, c_payload), (size_t) PQgetlength(res, i, c_payload));
		process_job(&job);
		job_free(&job);
	}
	PQclear(res);
	return n;
}

/* vq_pull until it returns no rows.  False on error. */
static bool
drain(void)
{
	for (;;)
	{
		int			n;

		if (stop_signals > 0)
			return true;
		n = pull_batch();
		if (n < 0)
			return false;
		if (n == 0)
			return true;
	}
}

/* Process notifications libpq has already received. */
static void
process_notifications(void)
{
	PGnotify   *n;

	while (stop_signals == 0 && (n = PQnotifies(conn)) != NULL)
	{
		handle_notification(n);
		PQfreemem(n);
	}
}

/* ------------------------------------------------------------------------ */
/* Main                                                                      */

static void
usage(FILE *f)
{
	fprintf(f,
			"Usage: vq_consumer --dbname CONNINFO --channel NAME --handler NAME [OPTIONS] -- command [args...]\n"
			"\n"
			"Runs `command` for every job of a vq_job NOTIFY handler: the payload (JSON) on its\n"
			"stdin, VQ_EXECUTION_ID, VQ_JOB_ID, VQ_ATTEMPT, VQ_HANDLER in its environment.\n"
			"Exit status 0 replies vq_complete(); anything else replies vq_fail().\n"
			"\n"
			"Options:\n"
			"  -d, --dbname CONNINFO      libpq connection string or URI (default: PG* environment)\n"
			"  -c, --channel NAME         NOTIFY channel the handler was registered with\n"
			"  -H, --handler NAME         handler name (for vq_pull and to filter notifications)\n"
			"  -b, --batch N              jobs claimed per vq_pull call (default 10)\n"
			"  -p, --poll-interval SEC    vq_pull catch-up interval in seconds (default 5)\n"
			"      --once                 process the pending jobs (vq_pull), then exit\n"
			"  -v, --verbose              log every job\n"
			"  -h, --help                 show this help\n"
			"\n"
			"SIGTERM/SIGINT: finish the current job, reply, exit 0 (a second signal sends\n"
			"SIGTERM to the running command).\n");
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"channel", required_argument, NULL, 'c'},
		{"handler", required_argument, NULL, 'H'},
		{"batch", required_argument, NULL, 'b'},
		{"poll-interval", required_argument, NULL, 'p'},
		{"once", no_argument, NULL, 'o'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	int			rc = 0;
	double		next_pull;

	while ((c = getopt_long(argc, argv, "+d:c:H:b:p:vh", longopts, NULL)) != -1)
	{
		char	   *end;

		switch (c)
		{
			case 'd':
				opt.conninfo = optarg;
				break;
			case 'c':
				opt.channel = optarg;
				break;
			case 'H':
				opt.handler = optarg;
				break;
			case 'b':
				{
					long		v;

					errno = 0;
					v = strtol(optarg, &end, 10);
					if (errno != 0 || *end != '\0' || end == optarg || v < 1 || v > 100000)
					{
						fprintf(stderr, "vq_consumer: --batch must be an integer from 1 to 100000\n");
						return 2;
					}
					opt.batch = (int) v;
					break;
				}
			case 'p':
				errno = 0;
				opt.poll_interval = strtod(optarg, &end);
				if (errno != 0 || *end != '\0' || end == optarg ||
					!(opt.poll_interval >= 0.01 && opt.poll_interval <= 86400))
				{
					fprintf(stderr, "vq_consumer: --poll-interval must be a number of seconds from 0.01 to 86400\n");
					return 2;
				}
				break;
			case 'o':
				opt.once = true;
				break;
			case 'v':
				opt.verbose = true;
				break;
			case 'h':
				usage(stdout);
				return 0;
			default:
				usage(stderr);
				return 2;
		}
	}
	if (opt.channel == NULL || opt.handler == NULL || optind >= argc)
	{
		fprintf(stderr, "vq_consumer: --channel, --handler and a command (after --) are required\n\n");
		usage(stderr);
		return 2;
	}
	if (opt.channel[0] == '\0' || opt.handler[0] == '\0')
	{
		fprintf(stderr, "vq_consumer: --channel and --handler must not be empty\n");
		return 2;
	}
	opt.command = argv + optind;

	setup_signals();

	if (opt.once)
	{
		if (!reconnect(false))
			rc = 1;
		else if (!drain())
			rc = 1;
		goto done;
	}

	if (!reconnect(false))
		goto done;				/* stopped before the first connection */
	next_pull = now_sec();
	for (;;)
	{
		struct pollfd pfd[2];
		double		left;
		int			r;

		if (stop_signals > 0)
			break;
		if (connection_lost())
		{
			logmsg("connection lost; reconnecting");
			if (!reconnect(false))
				break;
			continue;
		}
		process_notifications();
		if (stop_signals > 0)
			break;
		if (need_pull || now_sec() >= next_pull)
		{
			need_pull = false;
			if (!drain() && !connection_lost())
				logmsg("vq_pull failed; next try in %g s", opt.poll_interval);
			next_pull = now_sec() + opt.poll_interval;
			continue;			/* notifications may have arrived meanwhile */
		}
		left = next_pull - now_sec();
		pfd[0] = (struct pollfd) {PQsocket(conn), POLLIN, 0};
		pfd[1] = (struct pollfd) {sigpipe_fd[0], POLLIN, 0};
		r = poll(pfd, 2, left <= 0 ? 0 : (int) (left * 1000) + 1);
		if (r < 0)
		{
			if (errno != EINTR)
			{
				logmsg("poll: %s", strerror(errno));
				sleep_interruptible(1);
			}
			continue;
		}
		if (pfd[1].revents)
			drain_sigpipe();
		if (pfd[0].revents)
		{
			if (!PQconsumeInput(conn))
			{
				logmsg("connection error: %s", pq_error(conn, NULL));
				if (!connection_lost())
				{
					/* make sure the next round reconnects */
					PQfinish(conn);
					conn = NULL;
				}
			}
		}
	}

done:
	if (stop_signals > 0)
		verbose("stopping (signal %d)", (int) last_stop_signal);
	if (conn)
		PQfinish(conn);
	close(sigpipe_fd[0]);
	close(sigpipe_fd[1]);
	return rc;
}

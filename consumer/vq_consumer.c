/*
 * vq_consumer — reference consumer for vq_job NOTIFY handlers.
 *
 *   vq_consumer --dbname CONNINFO --channel NAME --handler NAME
 *               [--batch N] [--poll-interval SEC] [--once] [--coprocess] [--verbose]
 *               -- command [args...]
 *
 * LISTENs on a channel; for every job of the handler (announced by a
 * notification, or claimed with vq_pull() at start, after every reconnect and
 * every --poll-interval seconds) it runs the command with the job's payload
 * (JSON text) on stdin and replies vq_complete() when the command exits 0,
 * vq_fail() otherwise.  Jobs are processed one at a time.  SIGTERM / SIGINT:
 * finish the current job, reply, exit 0 (a second signal forwards SIGTERM to
 * the running command).
 *
 * With --coprocess the command is started once and kept running: each job is
 * one line of JSON on its stdin, answered by one line on its stdout ("ok", or
 * an error text).  See README.md in this directory.
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
#include <sys/stat.h>
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
#define ANSWER_MAX			500		/* bytes of a coprocess's error answer kept for vq_fail */
#define COPROCESS_BUF_MAX	(1024 * 1024)	/* longest answer line we wait for */
#define COPROCESS_EXIT_GRACE	5.0	/* stopping: seconds between EOF on its stdin and SIGTERM */
#define COPROCESS_FAIL_GRACE	1.0	/* the same after it failed a job (closed stdout, ...) */
#define COPROCESS_KILL_GRACE	2.0	/* seconds between SIGTERM and SIGKILL */

/* ------------------------------------------------------------------------ */
/* Options and global state                                                  */

#define MAX_PASS_ENV 64

static struct
{
	const char *conninfo;
	const char *channel;
	const char *handler;
	int			batch;
	double		poll_interval;
	bool		once;
	bool		verbose;
	bool		coprocess;		/* one long-running command, one line per job */
	char	  **command;		/* NULL-terminated argv */
	const char *pass_env[MAX_PASS_ENV];	/* --pass-env names */
	int			npass_env;
} opt = {"", NULL, NULL, 10, 5.0, false, false, false, NULL, {NULL}, 0};

static PGconn *conn = NULL;
static bool need_pull = true;	/* drain with vq_pull before waiting again */
static char *command_path = NULL;	/* the command found in PATH once, at start */

static volatile sig_atomic_t stop_signals = 0;	/* SIGTERM/SIGINT received */
static volatile sig_atomic_t last_stop_signal = 0;
static int	sigpipe_fd[2] = {-1, -1};	/* self-pipe: signal handlers write a byte */

/* One job to run (from a notification or a vq_pull row). */
typedef struct
{
	char	   *execution_id;
	char	   *job_id;
	char	   *handler;
	char	   *payload;		/* raw JSON text (vq_take / vq_pull return it; "null" when none) */
	int			attempt;
	bool		have_attempt;
	bool		cancel_requested;	/* vq_cancel asked it to stop before we took it */
} Job;

/* ------------------------------------------------------------------------ */
/* Logging                                                                   */

/*
 * One log line on stderr. Control characters (a newline in a server message,
 * an escape sequence in a notification) are written as \xNN, so that nothing
 * logged can forge lines or drive the terminal.
 */
static void
vlogmsg(const char *fmt, va_list ap)
{
	char		buf[2048];

	vsnprintf(buf, sizeof(buf), fmt, ap);
	fputs("vq_consumer: ", stderr);
	for (const unsigned char *c = (const unsigned char *) buf; *c; c++)
	{
		if (*c < 0x20 || *c == 0x7f)
			fprintf(stderr, "\\x%02x", *c);
		else
			fputc(*c, stderr);
	}
	fputc('\n', stderr);
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

/* A growable byte buffer, always NUL-terminated (data may hold NULs too). */
typedef struct
{
	char	   *data;
	size_t		len;
	size_t		cap;
} StrBuf;

static void
sb_reserve(StrBuf *sb, size_t more)
{
	size_t		cap = sb->cap ? sb->cap : 256;
	char	   *p;

	if (sb->len + more + 1 <= sb->cap)
		return;
	while (cap < sb->len + more + 1)
		cap *= 2;
	p = realloc(sb->data, cap);
	if (p == NULL)
	{
		logmsg("out of memory");
		exit(1);
	}
	sb->data = p;
	sb->cap = cap;
}

static void
sb_append(StrBuf *sb, const char *data, size_t n)
{
	sb_reserve(sb, n);
	memcpy(sb->data + sb->len, data, n);
	sb->len += n;
	sb->data[sb->len] = '\0';
}

static void
sb_append_str(StrBuf *sb, const char *s)
{
	sb_append(sb, s, strlen(s));
}

/*
 * Append `s` as a JSON string: quotes, backslashes and control characters
 * escaped (as PostgreSQL's to_json does), everything else as is (the server
 * sends valid UTF-8: client_encoding is UTF8).
 */
static void
sb_append_json_string(StrBuf *sb, const char *s)
{
	const char *run = s;

	sb_append(sb, "\"", 1);
	for (; *s != '\0'; s++)
	{
		unsigned char c = (unsigned char) *s;
		char		esc[8];

		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		sb_append(sb, run, (size_t) (s - run));
		run = s + 1;
		switch (c)
		{
			case '"':
				sb_append(sb, "\\\"", 2);
				break;
			case '\\':
				sb_append(sb, "\\\\", 2);
				break;
			case '\b':
				sb_append(sb, "\\b", 2);
				break;
			case '\f':
				sb_append(sb, "\\f", 2);
				break;
			case '\n':
				sb_append(sb, "\\n", 2);
				break;
			case '\r':
				sb_append(sb, "\\r", 2);
				break;
			case '\t':
				sb_append(sb, "\\t", 2);
				break;
			default:
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				sb_append(sb, esc, 6);
				break;
		}
	}
	sb_append(sb, run, (size_t) (s - run));
	sb_append(sb, "\"", 1);
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
 * Parse a notification message: a flat JSON object naming the job with
 * execution_id and attempt (the payload is read with vq_take, which checks who
 * is asking).  Unknown fields are skipped.  Returns false (with *why set) when
 * the message is unusable.
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
			if (strcmp(key, "execution_id") == 0)
			{
				char	   *val = NULL;

				ok = json_scalar_text(&p, &val);
				if (ok)
					replace_field(&job->execution_id, val);
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
	return true;

fail:
	job_free(job);
	return false;
}

/* ------------------------------------------------------------------------ */
/* Connection                                                                */

/*
 * The columns both claims return.  The claim commits without waiting for its
 * WAL flush (set_config(..., true) lasts for this statement's transaction
 * only): a claim lost in a crash just lets the job time out and be announced
 * again.  Replies stay synchronous.
 */
#define CLAIM_COLUMNS \
	"SELECT p.execution_id::text AS execution_id, p.job_id, p.handler, p.attempt, " \
	"p.payload::text AS payload, p.cancel_requested " \
	"FROM pg_catalog.set_config('synchronous_commit', 'off', true) AS s, "

/*
 * The statements the consumer repeats, prepared once per connection (in
 * try_connect, so again after every reconnect): the claim and the reply of
 * each job then skip the server's parse and analysis, and its planning once
 * a cached generic plan is chosen.
 */
typedef enum
{
	STMT_TAKE,
	STMT_PULL,
	STMT_COMPLETE,
	STMT_FAIL,
	NUM_STMTS
} StmtId;

static const struct
{
	const char *name;			/* prepared statement name; also names it in the log */
	const char *sql;
	int			nparams;
}			stmts[NUM_STMTS] = {
	[STMT_TAKE] = {"vq_take", CLAIM_COLUMNS "vq_take($1::uuid, $2::integer, $3::text) AS p", 3},
	[STMT_PULL] = {"vq_pull", CLAIM_COLUMNS "vq_pull($1::text, $2::integer) AS p", 2},
	[STMT_COMPLETE] = {"vq_complete", "SELECT vq_complete($1::uuid, $2::integer)", 2},
	[STMT_FAIL] = {"vq_fail", "SELECT vq_fail($1::uuid, $2::text, $3::integer)", 3},
};

/* Prepare every statement of stmts[] on the new connection. */
static bool
prepare_statements(void)
{
	for (int i = 0; i < NUM_STMTS; i++)
	{
		PGresult   *res = PQprepare(conn, stmts[i].name, stmts[i].sql, stmts[i].nparams, NULL);
		bool		ok = PQresultStatus(res) == PGRES_COMMAND_OK;

		if (!ok)
			logmsg("cannot prepare %s: %s", stmts[i].name, pq_error(conn, res));
		PQclear(res);
		if (!ok)
			return false;
	}
	return true;
}

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
	if (!prepare_statements())
		return false;
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
 * Run one of the prepared statements (it returns rows).  On a lost
 * connection, reconnect (see reconnect(), which prepares them again) and run
 * it again when `retry`.  Returns NULL on failure (already reported).
 */
static PGresult *
query(StmtId stmt, const char *const *params, bool retry)
{
	const char *what = stmts[stmt].name;

	for (;;)
	{
		PGresult   *res = PQexecPrepared(conn, what, stmts[stmt].nparams, params, NULL, NULL, 0);

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
 * Variables a command gets from the consumer's environment: these, the LC_*
 * ones, and those named with --pass-env. Nothing else (PGPASSWORD, PGUSER,
 * other credentials) reaches the code a job runs.
 */
static const char *const default_env[] = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL"};

/* Is "NAME=value" an entry the command may see? */
static bool
env_passed(const char *entry)
{
	size_t		len = strcspn(entry, "=");

	if (strncmp(entry, "LC_", 3) == 0)
		return true;
	for (size_t i = 0; i < sizeof(default_env) / sizeof(default_env[0]); i++)
		if (strlen(default_env[i]) == len && strncmp(entry, default_env[i], len) == 0)
			return true;
	for (int i = 0; i < opt.npass_env; i++)
		if (strlen(opt.pass_env[i]) == len && strncmp(entry, opt.pass_env[i], len) == 0)
			return true;
	return false;
}

/*
 * A command's environment: for a job (job != NULL) VQ_EXECUTION_ID, VQ_JOB_ID,
 * VQ_ATTEMPT and VQ_HANDLER first (malloc'd, entries [0..3]), then the passed
 * entries of ours (pointing into environ).
 */
static char **
command_environment(const Job *job)
{
	extern char **environ;
	size_t		n = 0;
	char	  **envp;
	size_t		k = 0;

	while (environ[n] != NULL)
		n++;
	envp = xmalloc((n + 5) * sizeof(char *));
	if (job != NULL)
	{
		char		attempt[16];

		snprintf(attempt, sizeof(attempt), "%d", job->attempt);
		envp[k++] = env_entry("VQ_EXECUTION_ID", job->execution_id);
		envp[k++] = env_entry("VQ_JOB_ID", job->job_id);
		envp[k++] = env_entry("VQ_ATTEMPT", attempt);
		envp[k++] = env_entry("VQ_HANDLER", job->handler ? job->handler : opt.handler);
	}
	for (size_t i = 0; i < n; i++)
		if (env_passed(environ[i]))
			envp[k++] = environ[i];
	envp[k] = NULL;
	return envp;
}

/*
 * Start the command with fds[i] (when >= 0) as its descriptor i; the others
 * are inherited.  posix_spawn (a vfork-style clone in glibc) rather than fork:
 * no copy of the consumer's address space per job.  The command gets its own
 * process group, so a Ctrl-C meant for the consumer (finish the job, then
 * stop) does not kill it, and default dispositions with nothing blocked.
 * Returns 0 or an errno value.
 */
static int
spawn_command(pid_t *pid, const int fds[3], char **envp)
{
	posix_spawn_file_actions_t actions;
	posix_spawnattr_t attr;
	sigset_t	none,
				defaults;
	int			rc;

	posix_spawn_file_actions_init(&actions);
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			posix_spawn_file_actions_adddup2(&actions, fds[i], i);
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
	if (command_path != NULL)
		rc = posix_spawn(pid, command_path, &actions, &attr, opt.command, envp);
	else
		rc = posix_spawnp(pid, opt.command[0], &actions, &attr, opt.command, envp);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&actions);
	return rc;
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

	{
		char	  **envp = command_environment(job);
		const int	fds[3] = {in_pipe[0], -1, err_pipe[1]};
		int			rc = spawn_command(&pid, fds, envp);

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
/* The coprocess (--coprocess)                                               */

/*
 * Spawning a process costs about a millisecond, most of a NOTIFY round trip.
 * With --coprocess the command is started once, lazily at the first job (and
 * again at the next job after it died), and kept running: each job is one
 * line of JSON written to its stdin, and it answers each with one line on its
 * stdout, in order.  Its stderr is ours.
 */
static struct
{
	pid_t		pid;			/* 0: not running */
	int			in_fd;			/* its stdin: we write job lines (non-blocking) */
	int			out_fd;			/* its stdout: we read answers (non-blocking) */
	StrBuf		out;			/* read from its stdout and not consumed yet */
	int			starts;
}			co = {0, -1, -1, {NULL, 0, 0}, 0};

/* "exited with status N" / "killed by signal S" */
static void
describe_status(int status, char *buf, size_t size)
{
	if (WIFSIGNALED(status))
		snprintf(buf, size, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
}

/* Forget the coprocess (already reaped): close our ends, drop unread output. */
static void
coprocess_reset(void)
{
	if (co.in_fd >= 0)
		close(co.in_fd);
	if (co.out_fd >= 0)
		close(co.out_fd);
	co.in_fd = co.out_fd = -1;
	co.pid = 0;
	co.out.len = 0;
}

static bool
coprocess_start(char **error)
{
	int			in_pipe[2],
				out_pipe[2];
	int			rc;
	pid_t		pid;

	/* O_CLOEXEC: a later coprocess must not inherit this one's pipes */
	if (pipe2(in_pipe, O_CLOEXEC) != 0)
	{
		*error = xstrndup("consumer error: cannot create a pipe", 36);
		return false;
	}
	if (pipe2(out_pipe, O_CLOEXEC) != 0)
	{
		close(in_pipe[0]);
		close(in_pipe[1]);
		*error = xstrndup("consumer error: cannot create a pipe", 36);
		return false;
	}
	{
		const int	fds[3] = {in_pipe[0], out_pipe[1], -1};
		char	  **envp = command_environment(NULL);

		rc = spawn_command(&pid, fds, envp);
		free(envp);
	}
	close(in_pipe[0]);
	close(out_pipe[1]);
	if (rc != 0)
	{
		close(in_pipe[1]);
		close(out_pipe[0]);
		*error = xmalloc(256);
		snprintf(*error, 256, "coprocess could not be started: vq_consumer: cannot execute \"%s\": %s",
				 opt.command[0], strerror(rc));
		logmsg("%s", *error);
		return false;
	}
	fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
	fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
	co.pid = pid;
	co.in_fd = in_pipe[1];
	co.out_fd = out_pipe[0];
	co.out.len = 0;
	if (co.starts++ == 0)
		verbose("coprocess started (pid %d)", (int) pid);
	else
		logmsg("coprocess restarted (pid %d, start %d)", (int) pid, co.starts);
	return true;
}

/*
 * Read what the coprocess's stdout holds now into co.out (up to a little
 * more than COPROCESS_BUF_MAX).  False at EOF or on a read error.
 */
static bool
coprocess_read(void)
{
	while (co.out.len <= COPROCESS_BUF_MAX)
	{
		ssize_t		r;

		sb_reserve(&co.out, 4096);
		r = read(co.out_fd, co.out.data + co.out.len, co.out.cap - co.out.len - 1);
		if (r > 0)
		{
			co.out.len += (size_t) r;
			co.out.data[co.out.len] = '\0';
			continue;
		}
		if (r == 0)
			return false;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN)
			return true;
		logmsg("reading the coprocess's stdout: %s", strerror(errno));
		return false;
	}
	return true;
}

/*
 * Take the first complete line out of co.out (malloc'd, without its newline
 * or a "\r" before it; *len is its length, as it may hold NUL bytes).  The
 * bytes after it stay for the next job.  NULL when there is no full line yet.
 */
static char *
coprocess_take_line(size_t *len)
{
	char	   *nl = co.out.len > 0 ? memchr(co.out.data, '\n', co.out.len) : NULL;
	size_t		n;
	char	   *line;

	if (nl == NULL)
		return NULL;
	n = (size_t) (nl - co.out.data);
	line = xstrndup(co.out.data, n);
	memmove(co.out.data, nl + 1, co.out.len - n - 1);
	co.out.len -= n + 1;
	co.out.data[co.out.len] = '\0';
	if (n > 0 && line[n - 1] == '\r')
		line[--n] = '\0';
	*len = n;
	return line;
}

/*
 * Stop the coprocess and reap it: EOF on its stdin is its cue to exit; after
 * `grace` seconds (at once after a second stop signal) SIGTERM to its process
 * group, after COPROCESS_KILL_GRACE more SIGKILL.  What it still writes on
 * stdout answers no job and is discarded.  Returns its wait status.
 */
static int
coprocess_stop(double grace)
{
	pid_t		pid = co.pid;
	int			status = 0;
	int			sent = 0;		/* 0, SIGTERM, SIGKILL */
	double		deadline = now_sec() + grace;

	if (co.in_fd >= 0)
	{
		close(co.in_fd);
		co.in_fd = -1;
	}
	for (;;)
	{
		pid_t		r = waitpid(pid, &status, WNOHANG);
		struct pollfd pfd[2];
		int			nfd = 1;
		double		left;

		if (r == pid || (r < 0 && errno == ECHILD))
			break;
		if (sent == 0 && (now_sec() >= deadline || stop_signals >= 2))
		{
			logmsg("coprocess (pid %d) still running: sending SIGTERM", (int) pid);
			kill(-pid, SIGTERM);
			kill(pid, SIGTERM);
			sent = SIGTERM;
			deadline = now_sec() + COPROCESS_KILL_GRACE;
		}
		else if (sent == SIGTERM && now_sec() >= deadline)
		{
			logmsg("coprocess (pid %d) still running: sending SIGKILL", (int) pid);
			kill(-pid, SIGKILL);
			kill(pid, SIGKILL);
			sent = SIGKILL;
		}
		pfd[0] = (struct pollfd) {sigpipe_fd[0], POLLIN, 0};
		if (co.out_fd >= 0)
			pfd[nfd++] = (struct pollfd) {co.out_fd, POLLIN, 0};
		/* SIGCHLD wakes us through the self-pipe; after SIGKILL, just wait */
		left = sent == SIGKILL ? 1.0 : deadline - now_sec();
		if (poll(pfd, (nfds_t) nfd, left <= 0 ? 0 : (int) (left * 1000) + 1) < 0 && errno != EINTR)
		{
			logmsg("poll: %s", strerror(errno));
			sleep_interruptible(0.1);
			continue;
		}
		if (pfd[0].revents)
			drain_sigpipe();
		if (nfd > 1 && pfd[1].revents)
		{
			if (!coprocess_read())
			{
				close(co.out_fd);
				co.out_fd = -1;
			}
			co.out.len = 0;
		}
	}
	coprocess_reset();
	return status;
}

/*
 * The job line: {"execution_id": ..., "job_id": ..., "handler": ...,
 * "attempt": N, "payload": <payload JSON>} and a newline.  The payload is
 * jsonb::text, which has no raw newlines; any other raw CR / LF (only legal
 * as whitespace between JSON tokens) becomes a space, so that the job stays
 * one line whatever the server sends.
 */
static void
coprocess_job_line(StrBuf *sb, const Job *job, const char *payload)
{
	char		attempt[32];
	size_t		start;

	sb_append_str(sb, "{\"execution_id\": ");
	sb_append_json_string(sb, job->execution_id);
	sb_append_str(sb, ", \"job_id\": ");
	if (job->job_id != NULL)
		sb_append_json_string(sb, job->job_id);
	else
		sb_append_str(sb, "null");
	sb_append_str(sb, ", \"handler\": ");
	sb_append_json_string(sb, job->handler ? job->handler : opt.handler);
	snprintf(attempt, sizeof(attempt), ", \"attempt\": %d", job->attempt);
	sb_append_str(sb, attempt);
	sb_append_str(sb, ", \"payload\": ");
	start = sb->len;
	sb_append_str(sb, payload[0] != '\0' ? payload : "null");
	for (size_t i = start; i < sb->len; i++)
		if (sb->data[i] == '\n' || sb->data[i] == '\r')
			sb->data[i] = ' ';
	sb_append_str(sb, "}\n");
}

/* vq_fail's error text for an answer other than "ok" (malloc'd). */
static char *
answer_error(const char *line, size_t n)
{
	bool		truncated = n > ANSWER_MAX;
	char	   *out,
			   *end;

	if (n == 0)
		return xstrndup("coprocess answered an empty line", 32);
	if (truncated)
		n = ANSWER_MAX;
	out = xmalloc(n + 4);
	end = utf8_sanitize(out, (const unsigned char *) line, n);
	if (truncated)
		strcpy(end, "...");
	return out;
}

/*
 * Run one job through the coprocess, starting it first if it is not running:
 * write the job line, read the answer line.  Returns true when it answered
 * "ok"; otherwise *error is the failure text (malloc'd).  A coprocess that
 * dies, or closes its stdin or stdout, before answering fails the job and is
 * reaped; the next job starts a new one.
 */
static bool
coprocess_run(const Job *job, const char *payload, char **error)
{
	StrBuf		line = {NULL, 0, 0};
	size_t		off = 0;
	bool		reaped = false,
				forwarded = false,
				out_eof = false,
				in_broken = false;
	int			status = 0;
	pid_t		pid;
	char	   *answer = NULL;
	size_t		answer_len = 0;
	char		how[64];

	*error = NULL;
	/* it died between jobs: this job goes to a new one, it was never sent */
	if (co.pid > 0 && waitpid(co.pid, &status, WNOHANG) == co.pid)
	{
		describe_status(status, how, sizeof(how));
		logmsg("coprocess (pid %d) %s while idle", (int) co.pid, how);
		coprocess_reset();
	}
	if (co.pid == 0 && !coprocess_start(error))
		return false;
	pid = co.pid;
	coprocess_job_line(&line, job, payload);

	for (;;)
	{
		struct pollfd pfd[3];
		int			nfd = 1,
					out_idx;

		if (!reaped && waitpid(pid, &status, WNOHANG) == pid)
			reaped = true;
		if (stop_signals >= 2 && !forwarded && !reaped)
		{
			logmsg("second stop signal: sending SIGTERM to the coprocess (pid %d)", (int) pid);
			kill(-pid, SIGTERM);
			kill(pid, SIGTERM);
			forwarded = true;
		}
		/* the line may take several writes when it is larger than the pipe */
		if (off < line.len && !in_broken)
		{
			ssize_t		w = write(co.in_fd, line.data + off, line.len - off);

			if (w > 0)
				off += (size_t) w;
			else if (w < 0 && errno != EAGAIN && errno != EINTR)
				in_broken = true;	/* EPIPE: it no longer reads its stdin */
		}
		/* gone: what it wrote before exiting may still answer this job */
		if (reaped && co.out_fd >= 0 && !out_eof && !coprocess_read())
			out_eof = true;
		/* an answer counts once the whole job line is written */
		if (off == line.len && (answer = coprocess_take_line(&answer_len)) != NULL)
			break;
		if (reaped || in_broken || out_eof || co.out.len > COPROCESS_BUF_MAX)
			break;

		pfd[0] = (struct pollfd) {sigpipe_fd[0], POLLIN, 0};
		/* writable again: the write at the top of the loop goes on */
		if (off < line.len)
			pfd[nfd++] = (struct pollfd) {co.in_fd, POLLOUT, 0};
		out_idx = nfd;
		pfd[nfd++] = (struct pollfd) {co.out_fd, POLLIN, 0};
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
		if (pfd[out_idx].revents && !coprocess_read())
			out_eof = true;
	}
	free(line.data);

	if (answer != NULL)
	{
		bool		ok = answer_len == 2 && memcmp(answer, "ok", 2) == 0;

		if (!ok)
			*error = answer_error(answer, answer_len);
		free(answer);
		/* it answered, then went away: reap it now, the next job starts another */
		if (reaped || out_eof)
		{
			if (!reaped)
				status = coprocess_stop(COPROCESS_FAIL_GRACE);
			else
				coprocess_reset();
			describe_status(status, how, sizeof(how));
			logmsg("coprocess (pid %d) %s after answering", (int) pid, how);
		}
		return ok;
	}

	if (co.out.len > COPROCESS_BUF_MAX)
	{
		*error = xmalloc(128);
		snprintf(*error, 128, "coprocess answered a line longer than %d bytes", COPROCESS_BUF_MAX);
		logmsg("%s; stopping it (pid %d)", *error, (int) pid);
		if (!reaped)
			coprocess_stop(0);
		else
			coprocess_reset();
		return false;
	}

	/* died, or closed its stdin or stdout, before answering */
	if (!reaped)
		status = coprocess_stop(COPROCESS_FAIL_GRACE);
	else
		coprocess_reset();
	describe_status(status, how, sizeof(how));
	*error = xmalloc(128);
	snprintf(*error, 128, "coprocess %s before answering", how);
	logmsg("coprocess (pid %d) %s before answering job %s (execution %s); the next job starts a new one",
		   (int) pid, how, job->job_id ? job->job_id : "?", job->execution_id);
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

		res = query(STMT_COMPLETE, params, true);
	}
	else
	{
		const char *params[3] = {job->execution_id, error, attempt};

		res = query(STMT_FAIL, params, true);
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
	const char *payload = job->payload;
	char	   *error = NULL;
	bool		ok;

	if (job->cancel_requested)
	{
		/* the reply to a job vq_cancel asked to stop records it CANCELLED */
		verbose("job %s (execution %s, attempt %d): cancelled before it ran; not running it",
				job->job_id ? job->job_id : "?", job->execution_id, job->attempt);
		reply(job, false, "cancelled before the consumer ran it");
		return;
	}
	verbose("job %s (execution %s, attempt %d): start",
			job->job_id ? job->job_id : "?", job->execution_id, job->attempt);

	if (opt.coprocess)
		ok = coprocess_run(job, payload, &error);
	else
		ok = run_command(job, payload, &error);
	if (ok)
		verbose("job %s (execution %s, attempt %d): command succeeded",
				job->job_id ? job->job_id : "?", job->execution_id, job->attempt);
	else
		verbose("job %s (execution %s, attempt %d): %s",
				job->job_id ? job->job_id : "?", job->execution_id, job->attempt, error);
	reply(job, ok, error);
	free(error);
}

/*
 * Process the jobs a vq_pull or vq_take result holds, in order.  Returns the
 * number of rows.
 */
static int
process_rows(PGresult *res)
{
	int			n = PQntuples(res);
	int			c_exec = PQfnumber(res, "execution_id"),
				c_job = PQfnumber(res, "job_id"),
				c_handler = PQfnumber(res, "handler"),
				c_attempt = PQfnumber(res, "attempt"),
				c_payload = PQfnumber(res, "payload"),
				c_cancel = PQfnumber(res, "cancel_requested");

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
		job.cancel_requested = strcmp(PQgetvalue(res, i, c_cancel), "t") == 0;
		if (PQgetisnull(res, i, c_payload))
			job.payload = xstrndup("null", 4);
		else
			job.payload = xstrndup(PQgetvalue(res, i, c_payload), (size_t) PQgetlength(res, i, c_payload));
		process_job(&job);
		job_free(&job);
	}
	return n;
}

static void
handle_notification(const PGnotify *n)
{
	Job			job;
	const char *why;
	char		attempt[16];
	const char *params[3];
	PGresult   *res;

	if (strcmp(n->relname, opt.channel) != 0)
		return;
	if (!parse_notification(n->extra, &job, &why))
	{
		logmsg("ignoring a notification on channel \"%s\" (%s): %.200s",
			   n->relname, why, n->extra);
		return;
	}
	/*
	 * The notification only says a job was dispatched: take that job with
	 * vq_take, so that two consumers on one channel never both run it.  No
	 * row: another consumer has it, it was answered or timed out, or it is
	 * another handler's job on the same channel.
	 */
	verbose("job %s announced (attempt %d); taking it", job.execution_id, job.attempt);
	snprintf(attempt, sizeof(attempt), "%d", job.attempt);
	params[0] = job.execution_id;
	params[1] = job.have_attempt ? attempt : NULL;
	params[2] = opt.handler;	/* a channel may carry the jobs of several handlers */
	res = query(STMT_TAKE, params, false);
	job_free(&job);
	if (res == NULL)
	{
		need_pull = true;		/* the job is still there for vq_pull */
		return;
	}
	if (PQntuples(res) == 0)
		verbose("job announced but not taken (another consumer has it, or it ended)");
	process_rows(res);
	PQclear(res);
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
	int			n;

	snprintf(batch, sizeof(batch), "%d", opt.batch);
	/* not retried after a reconnect: the caller pulls again anyway */
	res = query(STMT_PULL, params, false);
	if (res == NULL)
		return -1;
	if (PQntuples(res) > 0)
		verbose("vq_pull claimed %d job(s)", PQntuples(res));
	n = process_rows(res);
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

/*
 * Find a command named without a slash in PATH once, as posix_spawnp would,
 * rather than searching PATH for every job.  NULL when it is not found (then
 * posix_spawnp searches at each job and reports the error).
 */
static char *
find_in_path(const char *name)
{
	const char *path = getenv("PATH");
	struct stat st;

	if (strchr(name, '/') != NULL || path == NULL)
		return NULL;
	while (*path != '\0')
	{
		const char *end = strchr(path, ':');
		size_t		len = end ? (size_t) (end - path) : strlen(path);
		char	   *candidate = xmalloc(len + strlen(name) + 3);

		/* an empty PATH entry means the current directory */
		if (len == 0)
			sprintf(candidate, "./%s", name);
		else
			sprintf(candidate, "%.*s/%s", (int) len, path, name);
		if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && access(candidate, X_OK) == 0)
			return candidate;
		free(candidate);
		if (end == NULL)
			break;
		path = end + 1;
	}
	return NULL;
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
			"With --coprocess, `command` is started once (at the first job) and kept running:\n"
			"each job is one line of JSON on its stdin, {\"execution_id\", \"job_id\", \"handler\",\n"
			"\"attempt\", \"payload\"}, and it answers each with one line on its stdout: \"ok\"\n"
			"replies vq_complete(), any other line is the error text of vq_fail().  If it exits\n"
			"before answering, the job fails and the next job starts a new one.\n"
			"\n"
			"Options:\n"
			"  -d, --dbname CONNINFO      libpq connection string or URI (default: PG* environment)\n"
			"  -c, --channel NAME         NOTIFY channel the handler was registered with\n"
			"  -H, --handler NAME         handler name (for vq_pull and to filter notifications)\n"
			"  -b, --batch N              jobs claimed per vq_pull call (default 10)\n"
			"  -p, --poll-interval SEC    vq_pull catch-up interval in seconds (default 5)\n"
			"      --once                 process the pending jobs (vq_pull), then exit\n"
			"  -C, --coprocess            keep one command running; one line per job (see above)\n"
			"      --pass-env NAME        also pass variable NAME to the command (repeatable); by\n"
			"                             default it gets only PATH, HOME, LANG, LANGUAGE, LC_*, TZ,\n"
			"                             TMPDIR, USER, LOGNAME, SHELL (never PGPASSWORD & co.)\n"
			"  -v, --verbose              log every job\n"
			"  -h, --help                 show this help\n"
			"\n"
			"SIGTERM/SIGINT: finish the current job, reply, exit 0 (a second signal sends\n"
			"SIGTERM to the running command or coprocess).  When the consumer exits, a\n"
			"coprocess gets EOF on its stdin and %g s to exit, then SIGTERM, then SIGKILL\n"
			"%g s later.\n",
			COPROCESS_EXIT_GRACE, COPROCESS_KILL_GRACE);
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
		{"coprocess", no_argument, NULL, 'C'},
		{"pass-env", required_argument, NULL, 'E'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;
	int			rc = 0;
	double		next_pull;

	while ((c = getopt_long(argc, argv, "+d:c:H:b:p:Cvh", longopts, NULL)) != -1)
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
			case 'C':
				opt.coprocess = true;
				break;
			case 'E':
				if (opt.npass_env >= MAX_PASS_ENV || optarg[0] == '\0' || strchr(optarg, '=') != NULL)
				{
					fprintf(stderr, "vq_consumer: --pass-env takes a variable name (at most %d of them)\n", MAX_PASS_ENV);
					return 2;
				}
				opt.pass_env[opt.npass_env++] = optarg;
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
	command_path = find_in_path(opt.command[0]);

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
	if (co.pid > 0)
	{
		pid_t		pid = co.pid;
		int			status = coprocess_stop(COPROCESS_EXIT_GRACE);
		char		how[64];

		describe_status(status, how, sizeof(how));
		verbose("coprocess (pid %d) %s", (int) pid, how);
	}
	if (conn)
		PQfinish(conn);
	close(sigpipe_fd[0]);
	close(sigpipe_fd[1]);
	return rc;
}

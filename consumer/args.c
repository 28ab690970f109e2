/*
 * args.c: the command line.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "util.h"

Options		opt = {.conninfo = "", .concurrency = 1, .batch = 200, .pipeline = 0,
.poll_interval = 5.0, .stop_timeout = 30.0, .lease = 0};

enum
{
	OPT_ONCE = 1000, OPT_PASS_ENV, OPT_PIPELINE, OPT_SESSIONS
};

static void
usage(FILE *f)
{
	fprintf(f,
			"Usage: vq_consumer --handler NAME [OPTIONS] -- command [args...]\n"
			"\n"
			"Runs `command` for every job of vq_job external (NOTIFY) handlers: the payload (JSON)\n"
			"on its stdin, VQ_EXECUTION_ID, VQ_JOB_ID, VQ_ATTEMPT, VQ_HANDLER in its environment.\n"
			"Exit status 0 completes the job; anything else fails it (retried with backoff).\n"
			"\n"
			"With --coprocess, `command` is started once and kept running: each job is one line of\n"
			"JSON on its stdin, {\"execution_id\", \"job_id\", \"handler\", \"attempt\", \"payload\"}, and\n"
			"it answers each with one line on its stdout, in order: \"ok\" completes the job, any\n"
			"other line is the error text of a failure.\n"
			"\n"
			"Options:\n"
			"  -d, --dbname CONNINFO      libpq connection string or URI (default: PG* environment)\n"
			"  -H, --handler NAME         handler whose jobs to take (repeatable, up to %d)\n"
			"  -c, --channel NAME         also LISTEN on NAME (the handlers' channels are looked up)\n"
			"  -n, --concurrency N        commands, or coprocesses, at once (default 1)\n"
			"  -b, --batch N              most jobs one take asks for (default 200)\n"
			"      --pipeline N           coprocess mode: job lines outstanding per coprocess\n"
			"                             (default 4 x --batch)\n"
			"      --sessions N           database sessions carrying takes and replies, 1 to 4\n"
			"                             (default 2 when more jobs run at once than --batch, else 1)\n"
			"  -l, --lease SEC            lease asked for each job, extended while it runs\n"
			"                             (default: the server's, vq.execution_timeout_ms or 5 min)\n"
			"  -p, --poll-interval SEC    take without a notification this often (default 5)\n"
			"  -s, --stop-timeout SEC     after SIGTERM/SIGINT, how long running commands may still\n"
			"                             run before they get SIGTERM (default 30)\n"
			"      --once                 take what is due, run it, reply, then exit; no LISTEN\n"
			"  -C, --coprocess            keep the command running; one line per job (see above)\n"
			"      --pass-env NAME        also pass variable NAME to the command (repeatable); by\n"
			"                             default it gets only PATH, HOME, LANG, LANGUAGE, LC_*, TZ,\n"
			"                             TMPDIR, USER, LOGNAME, SHELL (never PGPASSWORD & co.)\n"
			"  -v, --verbose              log every job\n"
			"  -h, --help                 show this help\n"
			"\n"
			"SIGTERM/SIGINT: take no more jobs, give back the jobs not started, let the running\n"
			"ones finish (--stop-timeout), reply, exit 0.  A second signal sends SIGTERM to the\n"
			"running commands (or coprocesses) at once.\n",
			MAX_HANDLERS);
}

/* An integer option in [min, max]; false (with a message) otherwise. */
static bool
int_arg(const char *name, const char *s, long min, long max, int *out)
{
	char	   *end;
	long		v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v < min || v > max)
	{
		fprintf(stderr, "vq_consumer: --%s must be an integer from %ld to %ld\n", name, min, max);
		return false;
	}
	*out = (int) v;
	return true;
}

/* A number of seconds in [min, max]. */
static bool
seconds_arg(const char *name, const char *s, double min, double max, double *out)
{
	char	   *end;
	double		v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || end == s || !(v >= min && v <= max))
	{
		fprintf(stderr, "vq_consumer: --%s must be a number of seconds from %g to %g\n", name, min, max);
		return false;
	}
	*out = v;
	return true;
}

/* A name for a list (handlers, channels, --pass-env): not empty, room left. */
static bool
name_arg(const char *what, const char *s, const char **list, int *n, int max)
{
	if (s[0] == '\0' || *n >= max || (list == opt.pass_env && strchr(s, '=') != NULL))
	{
		fprintf(stderr, "vq_consumer: --%s takes a non-empty name (at most %d of them)\n", what, max);
		return false;
	}
	for (int i = 0; i < *n; i++)
		if (strcmp(list[i], s) == 0)
			return true;
	list[(*n)++] = s;
	return true;
}

/* One option; false when it is not valid. */
static bool
take_option(int c, const char *arg)
{
	switch (c)
	{
		case 'd':
			opt.conninfo = arg;
			return true;
		case 'H':
			return name_arg("handler", arg, opt.handlers, &opt.nhandlers, MAX_HANDLERS);
		case 'c':
			return name_arg("channel", arg, opt.channels, &opt.nchannels, MAX_CHANNELS);
		case 'n':
			return int_arg("concurrency", arg, 1, 1000, &opt.concurrency);
		case 'b':
			return int_arg("batch", arg, 1, 10000, &opt.batch);
		case OPT_PIPELINE:
			return int_arg("pipeline", arg, 1, 10000, &opt.pipeline);
		case OPT_SESSIONS:
			return int_arg("sessions", arg, 1, 4, &opt.sessions);
		case 'l':
			return seconds_arg("lease", arg, 1, 86400, &opt.lease);
		case 'p':
			return seconds_arg("poll-interval", arg, 0.01, 86400, &opt.poll_interval);
		case 's':
			return seconds_arg("stop-timeout", arg, 0, 86400, &opt.stop_timeout);
		case OPT_ONCE:
			opt.once = true;
			return true;
		case 'C':
			opt.coprocess = true;
			return true;
		case OPT_PASS_ENV:
			return name_arg("pass-env", arg, opt.pass_env, &opt.npass_env, MAX_PASS_ENV);
		case 'v':
			opt.verbose = log_verbose = true;
			return true;
		default:
			return false;
	}
}

int
parse_args(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"dbname", required_argument, NULL, 'd'},
		{"handler", required_argument, NULL, 'H'},
		{"channel", required_argument, NULL, 'c'},
		{"concurrency", required_argument, NULL, 'n'},
		{"batch", required_argument, NULL, 'b'},
		{"pipeline", required_argument, NULL, OPT_PIPELINE},
		{"sessions", required_argument, NULL, OPT_SESSIONS},
		{"lease", required_argument, NULL, 'l'},
		{"poll-interval", required_argument, NULL, 'p'},
		{"stop-timeout", required_argument, NULL, 's'},
		{"once", no_argument, NULL, OPT_ONCE},
		{"coprocess", no_argument, NULL, 'C'},
		{"pass-env", required_argument, NULL, OPT_PASS_ENV},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0}
	};
	int			c;

	while ((c = getopt_long(argc, argv, "+d:H:c:n:b:l:p:s:Cvh", longopts, NULL)) != -1)
	{
		if (c == 'h')
		{
			usage(stdout);
			return 0;
		}
		if (c == '?' || c == ':')
		{
			usage(stderr);
			return 2;
		}
		if (!take_option(c, optarg))
			return 2;
	}
	if (opt.nhandlers == 0 || optind >= argc)
	{
		fprintf(stderr, "vq_consumer: --handler and a command (after --) are required\n\n");
		usage(stderr);
		return 2;
	}
	if (opt.pipeline == 0)
		opt.pipeline = opt.batch * 4 > 10000 ? 10000 : opt.batch * 4;
	/* a second session lets a take and a reply run on the server at once */
	if (opt.sessions == 0)
		opt.sessions = capacity() > opt.batch ? 2 : 1;
	opt.command = argv + optind;
	return -1;
}

int
capacity(void)
{
	return opt.coprocess ? opt.concurrency * opt.pipeline : opt.concurrency;
}

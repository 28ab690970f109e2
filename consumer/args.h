/*
 * args.h: the command line, parsed once into `opt` (read-only afterwards).
 */
#ifndef VQC_ARGS_H
#define VQC_ARGS_H

#include <stdbool.h>

#define MAX_HANDLERS 64			/* vq_take_jobs takes at most 64 handler names */
#define MAX_CHANNELS 64
#define MAX_PASS_ENV 64

#define COPROCESS_EXIT_GRACE 5.0	/* stopping: seconds between EOF on its stdin and SIGTERM */
#define KILL_GRACE 2.0			/* seconds between SIGTERM and SIGKILL */

typedef struct
{
	const char *conninfo;
	const char *handlers[MAX_HANDLERS];
	int			nhandlers;
	const char *channels[MAX_CHANNELS];	/* --channel: LISTEN on these too */
	int			nchannels;
	int			concurrency;	/* commands, or coprocesses, at once */
	int			batch;			/* most jobs one take asks for */
	int			pipeline;		/* coprocess mode: job lines outstanding per coprocess */
	int			sessions;		/* database sessions carrying requests */
	double		poll_interval;	/* take without a notification this often (seconds) */
	double		stop_timeout;	/* after a stop signal, how long commands may still run */
	double		lease;			/* seconds; 0: the server's default */
	bool		once;
	bool		coprocess;
	bool		verbose;
	char	  **command;		/* NULL-terminated argv */
	const char *pass_env[MAX_PASS_ENV];
	int			npass_env;
} Options;

extern Options opt;

/* Parse argv into opt.  Returns -1 to go on, or the exit status (usage, --help). */
int			parse_args(int argc, char **argv);

/* Jobs held at once: commands, or coprocesses x pipeline. */
int			capacity(void);

#endif

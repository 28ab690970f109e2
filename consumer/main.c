/*
 * vq_consumer: the reference worker for vq_job's external (NOTIFY) handlers.
 *
 *   vq_consumer --handler NAME [--concurrency N] [--coprocess] ... -- command [args...]
 *
 * It LISTENs on the handlers' channels, takes their due jobs in batches
 * (vq_take_jobs, up to its free concurrency), runs the command for each (or
 * hands each to a long-running coprocess, one JSON line per job), and
 * replies in batches (vq_reply_jobs); it extends the leases of long jobs
 * (vq_extend_leases), stops a command whose job was cancelled, and on
 * SIGTERM / SIGINT stops taking, gives back what it did not start, lets the
 * running jobs finish and replies.  See README.md in this directory.
 *
 * The parts, from the bottom up: util, signals, args; jobs (the held jobs);
 * conn (the session, LISTEN); protocol (the SQL); spawn, run (commands),
 * coprocess; dispatch (requests and results); loop (the event loop).
 */
#include <stdlib.h>

#include "args.h"
#include "conn.h"
#include "coprocess.h"
#include "dispatch.h"
#include "loop.h"
#include "signals.h"
#include "spawn.h"

int
main(int argc, char **argv)
{
	int			rc = parse_args(argc, argv);

	if (rc >= 0)
		return rc;
	spawn_init();
	signals_setup();
	dispatch_init();
	if (opt.coprocess)
		co_init();
	db_init(opt.sessions, dispatch_notification, dispatch_setup);
	rc = loop_run();
	dispatch_summary();
	for (int i = 0; i < db_sessions(); i++)
		db_close(i);
	signals_close();
	return rc;
}

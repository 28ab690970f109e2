/*
 * loop.c: the event loop and the stop sequence.  A first SIGTERM / SIGINT
 * stops the takes and gives back the jobs not started; the running ones get
 * --stop-timeout seconds, then SIGTERM, then SIGKILL KILL_GRACE seconds
 * later (a second signal: SIGTERM at once).  Their replies are sent, the
 * coprocesses get EOF, and the loop ends.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "args.h"
#include "conn.h"
#include "coprocess.h"
#include "dispatch.h"
#include "jobs.h"
#include "loop.h"
#include "run.h"
#include "signals.h"
#include "util.h"

#define GIVE_UP_CONNECT_TRIES 3	/* --once, or stopping: attempts before giving up */

static int	signals_seen = 0;
static bool stop_begun = false;
static double stop_deadline = 0;
static int	kill_phase = 0;		/* 0, then 1 (SIGTERM sent), then 2 (SIGKILL sent) */
static double kill_at = 0;
static bool gave_up = false;	/* no session to be had: replies are dropped */

static void
reap_children(void)
{
	int			status;
	pid_t		pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		if (!run_reaped(pid, status) && !co_reaped(pid, status))
			verbose("reaped process %d", (int) pid);
}

static void
handle_stop_signals(double now)
{
	if (stop_signals == signals_seen)
		return;
	signals_seen = stop_signals;
	if (!stop_begun)
	{
		stop_begun = true;
		verbose("stopping (signal %d)", (int) last_stop_signal);
		dispatch_stop();
		stop_deadline = now + opt.stop_timeout;
		if (jobs_busy() > 0)
			logmsg("stopping: waiting up to %g s for %d running job(s)", opt.stop_timeout, jobs_busy());
	}
	if (signals_seen >= 2 && kill_phase == 0)
		stop_deadline = now;
}

/* Past the stop timeout: SIGTERM, then SIGKILL, to what still runs. */
static void
stop_timers(PollSet *ps, double now)
{
	int			sig;

	if (!stop_begun || jobs_busy() == 0 || kill_phase == 2)
		return;
	if (now >= (kill_phase == 0 ? stop_deadline : kill_at))
	{
		sig = kill_phase == 0 ? SIGTERM : SIGKILL;
		if (opt.coprocess)
			(void) co_signal_busy(sig);
		else
			(void) run_signal_all(sig);
		kill_phase++;
		kill_at = now + KILL_GRACE;
	}
	if (kill_phase < 2)
		ps_wake_at(ps, kill_phase == 0 ? stop_deadline : kill_at);
}

/*
 * The sessions, if they can be had; true when session 0 is there (the
 * others only add throughput).  Gives up (--once, stopping) after a few
 * failed attempts of session 0.
 */
static bool
ensure_sessions(double now)
{
	int			failures = 0;

	if (gave_up)
		return false;
	for (int i = 1; i < db_sessions(); i++)
		(void) db_ensure(i, now, &failures);
	if (db_ensure(0, now, &failures))
		return true;
	if ((opt.once || stop_begun) && failures >= GIVE_UP_CONNECT_TRIES)
	{
		logmsg("giving up after %d connection attempts", failures);
		gave_up = true;
	}
	return false;
}

/* Is everything done: nothing running, replied, coprocesses gone? */
static bool
finished(void)
{
	if (!stop_begun && !dispatch_once_done() && !gave_up)
		return false;
	if (jobs_busy() > 0)
		return false;
	if (!gave_up && (replies_pending() > 0 || !dispatch_idle()))
		return false;
	if (gave_up && replies_pending() > 0)
	{
		Job		   *jobs[64];
		int			n,
					total = 0;

		while ((n = replies_take(jobs, 64)) > 0)
			for (int i = 0; i < n; i++, total++)
				job_free(jobs[i]);
		logmsg("%d repl%s not delivered", total, total == 1 ? "y" : "ies");
	}
	if (opt.coprocess)
		co_shutdown();
	return !opt.coprocess || co_all_stopped();
}

/* Add the sessions' sockets (idx[i], -1 for none) and their reconnection times. */
static void
add_sessions(PollSet *ps, int *idx)
{
	for (int i = 0; i < db_sessions(); i++)
	{
		idx[i] = db(i) ? ps_add(ps, PQsocket(db(i)), POLLIN) : -1;
		if (db(i) == NULL && !gave_up)
			ps_wake_at(ps, db_retry_at(i));
	}
}

/* One poll() and what it found. */
static void
wait_and_handle(PollSet *ps, double now)
{
	int			sig_idx = ps_add(ps, signals_fd(), POLLIN);
	int			db_idx[MAX_SESSIONS];
	double		left;

	add_sessions(ps, db_idx);
	if (opt.coprocess)
		co_poll_add(ps, now);
	else
		run_poll_add(ps);
	dispatch_wake_at(ps, now);
	stop_timers(ps, now);
	left = ps->timeout_at - now_sec();
	if (poll(ps->fds, (nfds_t) ps->n, left <= 0 ? 0 : (int) (left * 1000) + 1) < 0 && errno != EINTR)
		logmsg("poll: %s", strerror(errno));
	now = now_sec();
	if (ps_revents(ps, sig_idx))
		signals_drain();
	for (int i = 0; i < db_sessions(); i++)
	{
		if (!ps_revents(ps, db_idx[i]))
			continue;
		if (db_read(i))
			dispatch_results(i, now);
		else
		{
			dispatch_connection_lost(i);
			db_close(i);
		}
	}
	if (opt.coprocess)
		co_poll_handle(ps);
	else
		run_poll_handle(ps);
}

int
loop_run(void)
{
	PollSet		ps = {0};

	for (;;)
	{
		double		now = now_sec();

		handle_stop_signals(now);
		reap_children();
		if (finished())
			break;
		if (ensure_sessions(now))
			dispatch_kick(now);
		ps.n = 0;
		ps.timeout_at = now + 60;
		wait_and_handle(&ps, now);
	}
	free(ps.fds);
	return opt.once && (gave_up || dispatch_take_failed()) ? 1 : 0;
}

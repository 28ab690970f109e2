/*
 * signals.c: the signal handlers only count and write a byte to a self-pipe;
 * the event loop sees the pipe readable and does the work.
 */
#define _GNU_SOURCE				/* pipe2 */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "signals.h"
#include "util.h"

volatile sig_atomic_t stop_signals = 0;
volatile sig_atomic_t last_stop_signal = 0;
static int	sigpipe_fd[2] = {-1, -1};

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
	/* a full pipe already means "wake up" */
	if (write(sigpipe_fd[1], &c, 1) < 0)
	{
		/* nothing to do */
	}
	errno = save_errno;
}

void
signals_setup(void)
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

int
signals_fd(void)
{
	return sigpipe_fd[0];
}

void
signals_drain(void)
{
	char		buf[64];

	while (read(sigpipe_fd[0], buf, sizeof(buf)) > 0)
		;
}

void
signals_close(void)
{
	close(sigpipe_fd[0]);
	close(sigpipe_fd[1]);
}

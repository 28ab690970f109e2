/*
 * run.c: the commands of the jobs, each with two pipes: stdin (the payload
 * and a newline, written as the command reads) and stderr (forwarded to
 * ours, its last bytes kept for the error text).  Its stdout is ours.  A
 * command is done when it is reaped: what its stderr holds then is read, and
 * background processes it left holding the pipe are not waited for.
 */
#define _GNU_SOURCE				/* pipe2 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "run.h"
#include "spawn.h"
#include "util.h"

#define STDERR_TAIL_MAX 500		/* bytes of the command's stderr kept for the error */

typedef struct Command
{
	struct Command *next;
	Job		   *job;
	pid_t		pid;
	int			in_fd;			/* -1 once closed */
	int			err_fd;
	char	   *input;
	size_t		in_len;
	size_t		in_off;
	char		tail[STDERR_TAIL_MAX];
	size_t		tail_len;
	bool		truncated;
	int			in_idx;			/* poll set indexes of this round */
	int			err_idx;
} Command;

static Command *commands = NULL;

static void
tail_append(Command *c, const char *data, size_t n)
{
	if (n >= STDERR_TAIL_MAX)
	{
		c->truncated = c->truncated || n > STDERR_TAIL_MAX || c->tail_len > 0;
		memcpy(c->tail, data + n - STDERR_TAIL_MAX, STDERR_TAIL_MAX);
		c->tail_len = STDERR_TAIL_MAX;
		return;
	}
	if (c->tail_len + n > STDERR_TAIL_MAX)
	{
		size_t		drop = c->tail_len + n - STDERR_TAIL_MAX;

		memmove(c->tail, c->tail + drop, c->tail_len - drop);
		c->tail_len -= drop;
		c->truncated = true;
	}
	memcpy(c->tail + c->tail_len, data, n);
	c->tail_len += n;
}

static void
write_all(int fd, const char *data, size_t n)
{
	while (n > 0)
	{
		ssize_t		w = write(fd, data, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;				/* (our stderr is blocking; nothing better to do) */
		data += w;
		n -= (size_t) w;
	}
}

/* "command exited with status N[: <stderr tail>]" (malloc'd). */
static char *
failure_text(int status, const Command *c)
{
	char		head[64];
	size_t		n = c->tail_len,
				start = 0;
	char	   *out,
			   *p;

	describe_status(status, head, sizeof(head));
	while (n > 0 && strchr("\n\r \t", c->tail[n - 1]) != NULL)
		n--;
	while (start < n && strchr("\n\r \t", c->tail[start]) != NULL)
		start++;
	out = xmalloc(strlen(head) + 16 + (n - start) + 1);
	p = out + sprintf(out, "command %s", head);
	if (n > start)
	{
		p += sprintf(p, ": %s", c->truncated ? "..." : "");
		utf8_sanitize(p, (const unsigned char *) c->tail + start, n - start);
	}
	return out;
}

/* Spawn the command with fresh pipes; false with *error set. */
static bool
start_process(Command *c, char **error)
{
	int			in_pipe[2],
				err_pipe[2];
	int			rc;

	if (pipe2(in_pipe, O_CLOEXEC) != 0)
	{
		*error = xstrdup("consumer error: cannot create a pipe");
		return false;
	}
	if (pipe2(err_pipe, O_CLOEXEC) != 0)
	{
		close(in_pipe[0]);
		close(in_pipe[1]);
		*error = xstrdup("consumer error: cannot create a pipe");
		return false;
	}
	rc = spawn_command(&c->pid, (const int[3]) {in_pipe[0], -1, err_pipe[1]}, c->job);
	close(in_pipe[0]);
	close(err_pipe[1]);
	if (rc != 0)
	{
		close(in_pipe[1]);
		close(err_pipe[0]);
		*error = xasprintf("command exited with status %d: vq_consumer: cannot execute \"%s\": %s",
						   rc == ENOENT ? 127 : 126, opt.command[0], strerror(rc));
		return false;
	}
	fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
	fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
	c->in_fd = in_pipe[1];
	c->err_fd = err_pipe[0];
	return true;
}

void
run_start(Job *job)
{
	Command    *c = xmalloc(sizeof(Command));
	char	   *error = NULL;

	memset(c, 0, sizeof(*c));
	c->job = job;
	c->in_fd = c->err_fd = -1;
	/* the payload and a newline, so that line-oriented tools see a full line */
	c->input = xasprintf("%s\n", job->payload);
	c->in_len = strlen(c->input);
	verbose("job %s (execution %s, attempt %d): start", job_name(job), job->execution_id, job->attempt);
	job->state = JOB_RUNNING;
	if (!start_process(c, &error))
	{
		free(c->input);
		free(c);
		job_done(job, OUTCOME_FAIL, error);
		return;
	}
	job->cmd = c;
	c->next = commands;
	commands = c;
}

void
run_poll_add(PollSet *ps)
{
	for (Command *c = commands; c; c = c->next)
	{
		c->in_idx = c->in_fd >= 0 ? ps_add(ps, c->in_fd, POLLOUT) : -1;
		c->err_idx = c->err_fd >= 0 ? ps_add(ps, c->err_fd, POLLIN) : -1;
	}
}

/* Read what its stderr holds now; false at EOF or on an error. */
static bool
read_stderr(Command *c)
{
	char		buf[4096];
	ssize_t		r;

	while ((r = read(c->err_fd, buf, sizeof(buf))) > 0)
	{
		write_all(2, buf, (size_t) r);
		tail_append(c, buf, (size_t) r);
	}
	return r < 0 && (errno == EAGAIN || errno == EINTR);
}

static void
close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void
run_poll_handle(const PollSet *ps)
{
	for (Command *c = commands; c; c = c->next)
	{
		if (ps_revents(ps, c->in_idx) && c->in_fd >= 0)
		{
			ssize_t		w = write(c->in_fd, c->input + c->in_off, c->in_len - c->in_off);

			if (w > 0)
				c->in_off += (size_t) w;
			/* done, or the command closed its stdin (EPIPE): fine either way */
			if ((w < 0 && errno != EAGAIN && errno != EINTR) || c->in_off >= c->in_len)
				close_fd(&c->in_fd);
		}
		if (ps_revents(ps, c->err_idx) && c->err_fd >= 0 && !read_stderr(c))
			close_fd(&c->err_fd);
	}
}

bool
run_reaped(pid_t pid, int status)
{
	Command   **link = &commands;
	Command    *c;
	Job		   *job;

	while (*link && (*link)->pid != pid)
		link = &(*link)->next;
	if ((c = *link) == NULL)
		return false;
	*link = c->next;
	close_fd(&c->in_fd);
	if (c->err_fd >= 0)
	{
		(void) read_stderr(c);
		close_fd(&c->err_fd);
	}
	job = c->job;
	job->cmd = NULL;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		job_done(job, OUTCOME_COMPLETE, NULL);
	else
		job_done(job, OUTCOME_FAIL, failure_text(status, c));
	free(c->input);
	free(c);
	return true;
}

void
run_cancel(Job *job)
{
	if (job->cmd == NULL)
		return;
	logmsg("job %s (execution %s, attempt %d): cancel requested: sending SIGTERM to its command (pid %d)",
		   job_name(job), job->execution_id, job->attempt, (int) job->cmd->pid);
	spawn_signal(job->cmd->pid, SIGTERM);
}

int
run_signal_all(int sig)
{
	int			n = 0;

	for (Command *c = commands; c; c = c->next, n++)
	{
		logmsg("sending %s to the command of job %s (pid %d)", sig == SIGKILL ? "SIGKILL" : "SIGTERM",
			   job_name(c->job), (int) c->pid);
		spawn_signal(c->pid, sig);
	}
	return n;
}

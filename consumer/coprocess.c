/*
 * coprocess.c: the coprocesses.  Each slot has a queue of jobs, in order:
 * the ones whose line was sent (JOB_RUNNING, waiting for their answer), then
 * the ones not sent yet (JOB_TAKEN).  Lines go out as the pipe takes them;
 * answers come back in the same order.  A slot's coprocess is started at its
 * first job, and again at the next job after it died.
 *
 * When a coprocess dies (or closes its stdin or stdout) with lines
 * outstanding, the first of them fails ("coprocess exited with status N
 * before answering": it is presumably the job that killed it) and the others
 * are given back (released: no attempt consumed).
 */
#define _GNU_SOURCE				/* pipe2 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "coprocess.h"
#include "spawn.h"
#include "util.h"

#define ANSWER_MAX 500			/* bytes of an error answer kept */
#define LINE_MAX_BYTES (1024 * 1024)	/* longest answer line waited for */
#define WRITE_CHUNK (16 * 1024)	/* job lines formatted ahead of the pipe */
#define FAIL_GRACE 1.0			/* after it failed: seconds between EOF on its stdin and SIGTERM */

typedef enum
{
	CO_IDLE,					/* not running */
	CO_RUNNING,
	CO_CLOSING					/* its stdin closed; waiting for it to exit */
} CoState;

typedef struct
{
	CoState		state;
	pid_t		pid;
	int			in_fd;			/* its stdin: job lines (non-blocking); -1 closed */
	int			out_fd;			/* its stdout: answers (non-blocking); -1 closed */
	StrBuf		wbuf;			/* job lines not written yet, from woff */
	size_t		woff;
	StrBuf		rbuf;			/* read from its stdout, not consumed */
	Job		   *head;			/* its jobs: sent ones first, then unsent ones */
	Job		   *tail;
	Job		   *unsent;			/* the first job not sent, or NULL */
	int			nassigned;
	int			nsent;
	int			starts;
	bool		head_failed;	/* the job that broke it failed already: release the rest */
	double		term_at;		/* CLOSING: SIGTERM then (0: not planned / sent) */
	double		kill_at;		/* CLOSING: SIGKILL then */
	int			in_idx;
	int			out_idx;
} Coproc;

static Coproc *slots;
static int	nslots;

void
co_init(void)
{
	nslots = opt.concurrency;
	slots = xmalloc(sizeof(Coproc) * (size_t) nslots);
	memset(slots, 0, sizeof(Coproc) * (size_t) nslots);
	for (int i = 0; i < nslots; i++)
		slots[i].in_fd = slots[i].out_fd = -1;
}

static void
close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Take the first job off the slot's queue (a sent one). */
static Job *
pop_head(Coproc *co)
{
	Job		   *job = co->head;

	co->head = job->qnext;
	if (co->head == NULL)
		co->tail = NULL;
	if (co->unsent == job)
		co->unsent = job->qnext;
	else
		co->nsent--;
	co->nassigned--;
	job->qnext = NULL;
	job->coproc = -1;
	return job;
}

/* Start the slot's coprocess; false (its queued jobs failed) when it cannot start. */
static bool
co_start(Coproc *co)
{
	int			in_pipe[2],
				out_pipe[2];
	int			rc = EMFILE;

	/* O_CLOEXEC: a later coprocess must not inherit this one's pipes */
	if (pipe2(in_pipe, O_CLOEXEC) == 0)
	{
		if (pipe2(out_pipe, O_CLOEXEC) == 0)
		{
			rc = spawn_command(&co->pid, (const int[3]) {in_pipe[0], out_pipe[1], -1}, NULL);
			close(out_pipe[1]);
			if (rc != 0)
				close(out_pipe[0]);
		}
		close(in_pipe[0]);
		if (rc != 0)
			close(in_pipe[1]);
	}
	if (rc != 0)
	{
		logmsg("coprocess could not be started: vq_consumer: cannot execute \"%s\": %s", opt.command[0], strerror(rc));
		while (co->head)
			job_done(pop_head(co), OUTCOME_FAIL,
					 xasprintf("coprocess could not be started: vq_consumer: cannot execute \"%s\": %s",
							   opt.command[0], strerror(rc)));
		return false;
	}
	fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
	fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
	co->in_fd = in_pipe[1];
	co->out_fd = out_pipe[0];
	co->state = CO_RUNNING;
	co->head_failed = false;
	if (co->starts++ == 0)
		verbose("coprocess started (pid %d)", (int) co->pid);
	else
		logmsg("coprocess restarted (pid %d, start %d)", (int) co->pid, co->starts);
	return true;
}

void
co_assign(Job *job)
{
	Coproc	   *co = &slots[0];

	for (int i = 1; i < nslots; i++)
		if (slots[i].nassigned < co->nassigned)
			co = &slots[i];
	job->coproc = (int) (co - slots);
	job->qnext = NULL;
	if (co->tail)
		co->tail->qnext = job;
	else
		co->head = job;
	co->tail = job;
	if (co->unsent == NULL)
		co->unsent = job;
	co->nassigned++;
	if (co->state == CO_IDLE)
		(void) co_start(co);
}

/*
 * The job line: {"execution_id": ..., "job_id": ..., "handler": ...,
 * "attempt": N, "payload": <payload JSON>} and a newline.  The payload is
 * jsonb::text, which has no raw newlines; any raw CR / LF would become a
 * space, so that a job stays one line whatever the server sends.
 */
static void
job_line(StrBuf *sb, const Job *job)
{
	size_t		start;

	sb_append_str(sb, "{\"execution_id\": ");
	sb_append_json_string(sb, job->execution_id);
	sb_append_str(sb, ", \"job_id\": ");
	if (job->job_id != NULL)
		sb_append_json_string(sb, job->job_id);
	else
		sb_append_str(sb, "null");
	sb_append_str(sb, ", \"handler\": ");
	sb_append_json_string(sb, job->handler ? job->handler : "");
	sb_printf(sb, ", \"attempt\": %d, \"payload\": ", job->attempt);
	start = sb->len;
	sb_append_str(sb, job->payload);
	for (size_t i = start; i < sb->len; i++)
		if (sb->data[i] == '\n' || sb->data[i] == '\r')
			sb->data[i] = ' ';
	sb_append_str(sb, "}\n");
}

/* Format the next lines once the previous ones are written: those jobs are started. */
static void
fill_wbuf(Coproc *co)
{
	if (co->woff < co->wbuf.len)
		return;
	co->wbuf.len = co->woff = 0;
	while (co->unsent && co->wbuf.len < WRITE_CHUNK)
	{
		Job		   *job = co->unsent;

		job_line(&co->wbuf, job);
		job->state = JOB_RUNNING;
		verbose("job %s (execution %s, attempt %d): sent to the coprocess (pid %d)",
				job_name(job), job->execution_id, job->attempt, (int) co->pid);
		co->unsent = job->qnext;
		co->nsent++;
	}
}

/* Close its stdin (its cue to exit); SIGTERM after grace seconds if it is still there. */
static void
co_close(Coproc *co, double grace)
{
	if (co->state != CO_RUNNING)
		return;
	close_fd(&co->in_fd);
	co->wbuf.len = co->woff = 0;
	co->state = CO_CLOSING;
	co->term_at = now_sec() + grace;
	co->kill_at = 0;
}

/* vq_fail's error text for an answer other than "ok" (malloc'd). */
static char *
answer_error(const char *line, size_t n)
{
	bool		truncated = n > ANSWER_MAX;
	char	   *out,
			   *end;

	if (n == 0)
		return xstrdup("coprocess answered an empty line");
	if (truncated)
		n = ANSWER_MAX;
	out = xmalloc(n + 4);
	end = utf8_sanitize(out, (const unsigned char *) line, n);
	if (truncated)
		strcpy(end, "...");
	return out;
}

/* The answer lines co->rbuf holds: each is the outcome of the first job sent. */
static void
take_answers(Coproc *co)
{
	char	   *start = co->rbuf.data;
	char	   *end = co->rbuf.data + co->rbuf.len;
	char	   *nl;

	while (start < end && (nl = memchr(start, '\n', (size_t) (end - start))) != NULL)
	{
		size_t		n = (size_t) (nl - start);

		if (n > 0 && start[n - 1] == '\r')
			n--;
		if (co->nsent == 0)
			logmsg("coprocess (pid %d) answered a line for no job: discarded", (int) co->pid);
		else if (n == 2 && memcmp(start, "ok", 2) == 0)
			job_done(pop_head(co), OUTCOME_COMPLETE, NULL);
		else
			job_done(pop_head(co), OUTCOME_FAIL, answer_error(start, n));
		start = nl + 1;
	}
	sb_consume(&co->rbuf, (size_t) (start - co->rbuf.data));
}

/* Read its stdout; false at EOF or on an error. */
static bool
read_answers(Coproc *co)
{
	for (;;)
	{
		ssize_t		r;

		if (co->rbuf.len > LINE_MAX_BYTES)
			return true;
		sb_reserve(&co->rbuf, 65536);
		r = read(co->out_fd, co->rbuf.data + co->rbuf.len, co->rbuf.cap - co->rbuf.len - 1);
		if (r > 0)
		{
			co->rbuf.len += (size_t) r;
			co->rbuf.data[co->rbuf.len] = '\0';
			take_answers(co);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return true;
		if (r < 0)
			logmsg("reading the coprocess's stdout: %s", strerror(errno));
		return false;
	}
}

/* An answer line longer than we wait for: the job fails, the coprocess is stopped. */
static void
line_too_long(Coproc *co)
{
	char	   *error = xasprintf("coprocess answered a line longer than %d bytes", LINE_MAX_BYTES);

	logmsg("%s; stopping it (pid %d)", error, (int) co->pid);
	co->rbuf.len = 0;
	if (co->nsent > 0)
	{
		job_done(pop_head(co), OUTCOME_FAIL, error);
		co->head_failed = true;
	}
	else
		free(error);
	co_close(co, 0);
}

/*
 * The coprocess is gone: the first job sent and not answered fails (unless
 * the job that broke it failed already), the others sent are given back.
 */
static void
resolve_outstanding(Coproc *co, const char *how)
{
	int			released = 0;

	if (co->nsent > 0 && !co->head_failed)
	{
		Job		   *job = pop_head(co);

		logmsg("coprocess (pid %d) %s before answering job %s (execution %s)",
			   (int) co->pid, how, job_name(job), job->execution_id);
		job_done(job, OUTCOME_FAIL, xasprintf("coprocess %s before answering", how));
	}
	while (co->nsent > 0)
	{
		job_done(pop_head(co), OUTCOME_RELEASE, NULL);
		released++;
	}
	if (released > 0)
		logmsg("gave back %d job(s) sent to the coprocess and not answered", released);
}

bool
co_reaped(pid_t pid, int status)
{
	Coproc	   *co = NULL;
	char		how[64];
	bool		outstanding;

	for (int i = 0; i < nslots && co == NULL; i++)
		if (slots[i].state != CO_IDLE && slots[i].pid == pid)
			co = &slots[i];
	if (co == NULL)
		return false;
	if (co->out_fd >= 0)
		(void) read_answers(co);	/* answers written before it exited count */
	describe_status(status, how, sizeof(how));
	outstanding = co->nsent > 0;
	if (outstanding)
		resolve_outstanding(co, how);
	else if (co->state == CO_RUNNING)
		logmsg("coprocess (pid %d) %s while idle", (int) pid, how);
	else
		verbose("coprocess (pid %d) %s", (int) pid, how);
	close_fd(&co->in_fd);
	close_fd(&co->out_fd);
	co->wbuf.len = co->woff = co->rbuf.len = 0;
	co->state = CO_IDLE;
	co->pid = 0;
	if (co->unsent)
		(void) co_start(co);	/* jobs wait for it */
	return true;
}

/* Write job lines while the pipe takes them. */
static void
write_lines(Coproc *co)
{
	for (;;)
	{
		ssize_t		w;

		fill_wbuf(co);
		if (co->woff >= co->wbuf.len)
			return;
		w = write(co->in_fd, co->wbuf.data + co->woff, co->wbuf.len - co->woff);
		if (w > 0)
		{
			co->woff += (size_t) w;
			continue;
		}
		if (w < 0 && (errno == EINTR))
			continue;
		if (w < 0 && errno == EAGAIN)
			return;
		logmsg("coprocess (pid %d) closed its stdin", (int) co->pid);
		co_close(co, FAIL_GRACE);
		return;
	}
}

/* CLOSING: SIGTERM, then SIGKILL, when their time comes. */
static void
closing_timers(Coproc *co, PollSet *ps, double now)
{
	if (co->term_at > 0 && now >= co->term_at)
	{
		logmsg("coprocess (pid %d) still running: sending SIGTERM", (int) co->pid);
		spawn_signal(co->pid, SIGTERM);
		co->term_at = 0;
		co->kill_at = now + KILL_GRACE;
	}
	else if (co->kill_at > 0 && now >= co->kill_at)
	{
		logmsg("coprocess (pid %d) still running: sending SIGKILL", (int) co->pid);
		spawn_signal(co->pid, SIGKILL);
		co->kill_at = 0;
	}
	ps_wake_at(ps, co->term_at > 0 ? co->term_at : co->kill_at > 0 ? co->kill_at : ps->timeout_at);
}

void
co_poll_add(PollSet *ps, double now)
{
	for (int i = 0; i < nslots; i++)
	{
		Coproc	   *co = &slots[i];

		co->in_idx = co->out_idx = -1;
		if (co->state == CO_RUNNING && co->in_fd >= 0)
		{
			write_lines(co);
			if (co->in_fd >= 0 && co->woff < co->wbuf.len)
				co->in_idx = ps_add(ps, co->in_fd, POLLOUT);
		}
		if (co->state == CO_CLOSING)
			closing_timers(co, ps, now);
		if (co->out_fd >= 0)
			co->out_idx = ps_add(ps, co->out_fd, POLLIN);
	}
}

void
co_poll_handle(const PollSet *ps)
{
	for (int i = 0; i < nslots; i++)
	{
		Coproc	   *co = &slots[i];

		if (ps_revents(ps, co->out_idx) && co->out_fd >= 0 && !read_answers(co))
		{
			/* EOF: it closed its stdout, or exited (then it is reaped next) */
			close_fd(&co->out_fd);
			co_close(co, FAIL_GRACE);
		}
		if (co->out_fd >= 0 && co->rbuf.len > LINE_MAX_BYTES)
			line_too_long(co);
		if (ps_revents(ps, co->in_idx) && co->state == CO_RUNNING && co->in_fd >= 0)
			write_lines(co);
	}
}

/* Take a job that was not sent off its slot's queue. */
static void
unqueue(Coproc *co, Job *job)
{
	Job		  **link = &co->head;
	Job		   *prev = NULL;

	while (*link != job)
	{
		prev = *link;
		link = &(*link)->qnext;
	}
	*link = job->qnext;
	if (co->tail == job)
		co->tail = prev;
	if (co->unsent == job)
		co->unsent = job->qnext;
	co->nassigned--;
	job->qnext = NULL;
	job->coproc = -1;
}

void
co_cancel(Job *job)
{
	if (job->coproc < 0)
		return;
	if (job->state == JOB_TAKEN)
	{
		logmsg("job %s (execution %s, attempt %d): cancel requested before it was sent to the coprocess: not running it",
			   job_name(job), job->execution_id, job->attempt);
		unqueue(&slots[job->coproc], job);
		job_done(job, OUTCOME_RELEASE, NULL);
	}
	else
		logmsg("job %s (execution %s, attempt %d): cancel requested, but its line went to the coprocess already: its answer will be recorded as CANCELLED",
			   job_name(job), job->execution_id, job->attempt);
}

void
co_release_unsent(void)
{
	int			n = 0;

	for (int i = 0; i < nslots; i++)
		while (slots[i].unsent)
		{
			Job		   *job = slots[i].unsent;

			unqueue(&slots[i], job);
			job_done(job, OUTCOME_RELEASE, NULL);
			n++;
		}
	if (n > 0)
		logmsg("stopping: gave back %d job(s) not sent to a coprocess yet", n);
}

int
co_signal_busy(int sig)
{
	int			n = 0;

	for (int i = 0; i < nslots; i++)
		if (slots[i].state != CO_IDLE && slots[i].nsent > 0)
		{
			logmsg("sending %s to the coprocess (pid %d), %d job(s) not answered",
				   sig == SIGKILL ? "SIGKILL" : "SIGTERM", (int) slots[i].pid, slots[i].nsent);
			spawn_signal(slots[i].pid, sig);
			n++;
		}
	return n;
}

void
co_shutdown(void)
{
	for (int i = 0; i < nslots; i++)
		co_close(&slots[i], COPROCESS_EXIT_GRACE);
}

bool
co_all_stopped(void)
{
	for (int i = 0; i < nslots; i++)
		if (slots[i].state != CO_IDLE)
			return false;
	return true;
}

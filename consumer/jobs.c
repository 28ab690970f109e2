/*
 * jobs.c: the held jobs (a list, in take order) and the reply queue.
 */
#include <stdlib.h>
#include <string.h>

#include "jobs.h"
#include "util.h"

static Job *held_head = NULL;
static Job *held_tail = NULL;
static int	n_held = 0;
static int	n_busy = 0;

static Job *reply_head = NULL;
static Job *reply_tail = NULL;
static int	n_replies = 0;

Job *
job_new(void)
{
	Job		   *job = xmalloc(sizeof(Job));

	memset(job, 0, sizeof(*job));
	job->state = JOB_TAKEN;
	job->coproc = -1;
	job->prev = held_tail;
	if (held_tail)
		held_tail->next = job;
	else
		held_head = job;
	held_tail = job;
	n_held++;
	n_busy++;
	return job;
}

const char *
job_name(const Job *job)
{
	return job->job_id ? job->job_id : "?";
}

void
job_done(Job *job, Outcome outcome, char *error)
{
	static const char *const names[] = {"completed", "failed", "given back (released)"};

	if (job->state == JOB_TAKEN || job->state == JOB_RUNNING)
		n_busy--;
	job->state = JOB_DONE;
	job->outcome = outcome;
	free(job->error);
	job->error = error;
	verbose("job %s (execution %s, attempt %d): %s%s%s", job_name(job), job->execution_id, job->attempt,
			names[outcome], error ? ": " : "", error ? error : "");
	job->qnext = NULL;
	if (reply_tail)
		reply_tail->qnext = job;
	else
		reply_head = job;
	reply_tail = job;
	n_replies++;
}

void
job_free(Job *job)
{
	if (job->state == JOB_TAKEN || job->state == JOB_RUNNING)
		n_busy--;
	if (job->prev)
		job->prev->next = job->next;
	else
		held_head = job->next;
	if (job->next)
		job->next->prev = job->prev;
	else
		held_tail = job->prev;
	n_held--;
	free(job->job_id);
	free(job->handler);
	free(job->payload);
	free(job->error);
	free(job);
}

Job *
job_find(const char *execution_id)
{
	for (Job *job = held_head; job; job = job->next)
		if (strcmp(job->execution_id, execution_id) == 0)
			return job;
	return NULL;
}

Job *
jobs_first(void)
{
	return held_head;
}

int
jobs_busy(void)
{
	return n_busy;
}

int
jobs_held(void)
{
	return n_held;
}

int
replies_pending(void)
{
	return n_replies;
}

int
replies_take(Job **out, int max)
{
	int			n = 0;

	while (n < max && reply_head)
	{
		Job		   *job = reply_head;

		reply_head = job->qnext;
		if (reply_head == NULL)
			reply_tail = NULL;
		job->qnext = NULL;
		job->state = JOB_REPLYING;
		out[n++] = job;
		n_replies--;
	}
	return n;
}

void
replies_putback(Job **jobs, int n)
{
	for (int i = n - 1; i >= 0; i--)
	{
		jobs[i]->state = JOB_DONE;
		jobs[i]->qnext = reply_head;
		reply_head = jobs[i];
		if (reply_tail == NULL)
			reply_tail = jobs[i];
		n_replies++;
	}
}

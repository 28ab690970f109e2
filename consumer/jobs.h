/*
 * jobs.h: the jobs this consumer holds (taken, running, waiting for their
 * reply), and the queue of replies to send.  Plain data: calls nothing but
 * util.
 */
#ifndef VQC_JOBS_H
#define VQC_JOBS_H

#include <stdbool.h>

typedef enum
{
	JOB_TAKEN,					/* taken, not started (coprocess: its line not sent) */
	JOB_RUNNING,				/* its command runs / its line went to the coprocess */
	JOB_DONE,					/* outcome known, reply queued */
	JOB_REPLYING				/* in a reply on its way to the server */
} JobState;

typedef enum
{
	OUTCOME_COMPLETE,
	OUTCOME_FAIL,
	OUTCOME_RELEASE				/* give it back untouched: no attempt consumed */
} Outcome;

struct Command;

typedef struct Job
{
	struct Job *prev;			/* the held list */
	struct Job *next;
	struct Job *qnext;			/* the reply queue, or its coprocess's queue */
	JobState	state;
	char		execution_id[40];
	int			attempt;
	char	   *job_id;			/* NULL: none */
	char	   *handler;
	char	   *payload;		/* JSON text, "null" when none */
	double		lease_len;		/* seconds the last take / extension granted */
	double		extend_at;		/* monotonic: extend the lease from then on */
	bool		cancel_requested;
	bool		lease_lost;
	Outcome		outcome;
	char	   *error;			/* OUTCOME_FAIL: the error text */
	struct Command *cmd;		/* command mode: its running command */
	int			coproc;			/* coprocess mode: its coprocess, -1 none */
} Job;

/* A new job (JOB_TAKEN), in the held list; the caller fills it in. */
Job		   *job_new(void);
/* Its outcome is known: queue its reply (error: malloc'd, taken over). */
void		job_done(Job *job, Outcome outcome, char *error);
/* Forget a job once its reply was answered (or given up). */
void		job_free(Job *job);
/* The held job with this execution id, or NULL. */
Job		   *job_find(const char *execution_id);
/* The job id for log lines ("?" when none). */
const char *job_name(const Job *job);

/* The first held job (then job->next). */
Job		   *jobs_first(void);
/* Jobs taken or running (not yet done). */
int			jobs_busy(void);
/* Jobs held in any state. */
int			jobs_held(void);

/* Replies queued. */
int			replies_pending(void);
/* Up to max queued replies, in order, now JOB_REPLYING; returns how many. */
int			replies_take(Job **out, int max);
/* A reply that did not reach the server: queued again, first. */
void		replies_putback(Job **jobs, int n);

#endif

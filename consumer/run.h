/*
 * run.h: one command per job (without --coprocess): the payload on its
 * stdin, its stderr forwarded (and its tail kept for the error text), its
 * exit status the job's outcome.
 */
#ifndef VQC_RUN_H
#define VQC_RUN_H

#include <stdbool.h>
#include <sys/types.h>

#include "jobs.h"
#include "pollset.h"

/* Start the job's command (JOB_RUNNING), or fail the job when it cannot start. */
void		run_start(Job *job);
/* Add the running commands' pipes to the poll set. */
void		run_poll_add(PollSet *ps);
/* Feed stdin, forward stderr after poll(). */
void		run_poll_handle(const PollSet *ps);
/* A child ended: true when it was one of our commands (its job is then done). */
bool		run_reaped(pid_t pid, int status);
/* vq_cancel asked the job to stop: SIGTERM to its command. */
void		run_cancel(Job *job);
/* Send sig to every running command; returns how many. */
int			run_signal_all(int sig);

#endif

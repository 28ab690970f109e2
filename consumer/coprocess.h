/*
 * coprocess.h: --coprocess: the command started once (per --concurrency
 * slot) and kept running; one JSON line per job on its stdin, one answer
 * line per job on its stdout, in order, several jobs outstanding at once
 * (--pipeline).
 */
#ifndef VQC_COPROCESS_H
#define VQC_COPROCESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "jobs.h"
#include "pollset.h"

void		co_init(void);
/* Queue a taken job on the least loaded coprocess (started if need be). */
void		co_assign(Job *job);
/* Write what can be written; add the pipes and timers to the poll set. */
void		co_poll_add(PollSet *ps, double now);
/* Read answers, write job lines after poll(). */
void		co_poll_handle(const PollSet *ps);
/* A child ended: true when it was a coprocess. */
bool		co_reaped(pid_t pid, int status);
/* vq_cancel asked the job to stop: not sent yet, it is given back; sent, it runs on. */
void		co_cancel(Job *job);
/* Stopping: give back every job whose line was not sent. */
void		co_release_unsent(void);
/* Send sig to the coprocesses that have jobs outstanding; returns how many. */
int			co_signal_busy(int sig);
/* The end: close their stdin (EOF), SIGTERM and SIGKILL if they do not exit. */
void		co_shutdown(void);
/* No coprocess runs (all reaped). */
bool		co_all_stopped(void);

#endif

/*
 * spawn.h: starting the command (for a job, or as the coprocess): its
 * environment (an allow-list of ours, plus the job's VQ_* variables) and
 * posix_spawn in a process group of its own.
 */
#ifndef VQC_SPAWN_H
#define VQC_SPAWN_H

#include <sys/types.h>

#include "jobs.h"

/* Look the command up in PATH once. */
void		spawn_init(void);
/*
 * Start the command with fds[i] (when >= 0) as its descriptor i, the job's
 * variables in its environment (job NULL: none, for the coprocess).
 * Returns 0 or an errno value.
 */
int			spawn_command(pid_t *pid, const int fds[3], const Job *job);
/* Send sig to the process group of a command (and to the process). */
void		spawn_signal(pid_t pid, int sig);
/* "exited with status N" / "killed by signal S" */
void		describe_status(int status, char *buf, size_t size);

#endif

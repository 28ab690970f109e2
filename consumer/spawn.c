/*
 * spawn.c: posix_spawn (a vfork-style clone in glibc) rather than fork: no
 * copy of the consumer's address space per job.  The command gets its own
 * process group, so that a Ctrl-C meant for the consumer (stop gracefully)
 * does not kill it, and default signal dispositions with nothing blocked.
 */
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "spawn.h"
#include "util.h"

extern char **environ;

static char *command_path = NULL;	/* the command found in PATH once, at start */

/*
 * Variables a command gets from the consumer's environment: these, the LC_*
 * ones, and those named with --pass-env.  Nothing else (PGPASSWORD, PGUSER,
 * other credentials) reaches the code a job runs.
 */
static const char *const default_env[] = {"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL"};

/*
 * Find a command named without a slash in PATH once, as posix_spawnp would.
 * NULL when it is not found (posix_spawnp then reports the error each time).
 */
static char *
find_in_path(const char *name)
{
	const char *path = getenv("PATH");
	struct stat st;

	if (strchr(name, '/') != NULL || path == NULL)
		return NULL;
	while (*path != '\0')
	{
		const char *end = strchr(path, ':');
		int			len = end ? (int) (end - path) : (int) strlen(path);
		/* an empty PATH entry means the current directory */
		char	   *candidate = len == 0 ? xasprintf("./%s", name) : xasprintf("%.*s/%s", len, path, name);

		if (stat(candidate, &st) == 0 && S_ISREG(st.st_mode) && access(candidate, X_OK) == 0)
			return candidate;
		free(candidate);
		if (end == NULL)
			break;
		path = end + 1;
	}
	return NULL;
}

void
spawn_init(void)
{
	command_path = find_in_path(opt.command[0]);
}

/* Is "NAME=value" an entry the command may see? */
static bool
env_passed(const char *entry)
{
	size_t		len = strcspn(entry, "=");

	if (strncmp(entry, "LC_", 3) == 0)
		return true;
	for (size_t i = 0; i < sizeof(default_env) / sizeof(default_env[0]); i++)
		if (strlen(default_env[i]) == len && strncmp(entry, default_env[i], len) == 0)
			return true;
	for (int i = 0; i < opt.npass_env; i++)
		if (strlen(opt.pass_env[i]) == len && strncmp(entry, opt.pass_env[i], len) == 0)
			return true;
	return false;
}

/*
 * The environment: for a job VQ_EXECUTION_ID, VQ_JOB_ID, VQ_ATTEMPT and
 * VQ_HANDLER first (malloc'd, entries [0..3]), then the passed entries of
 * ours (pointing into environ).
 */
static char **
command_environment(const Job *job, int *own)
{
	size_t		n = 0,
				k = 0;
	char	  **envp;

	while (environ[n] != NULL)
		n++;
	envp = xmalloc((n + 5) * sizeof(char *));
	if (job != NULL)
	{
		envp[k++] = xasprintf("VQ_EXECUTION_ID=%s", job->execution_id);
		envp[k++] = xasprintf("VQ_JOB_ID=%s", job->job_id ? job->job_id : "");
		envp[k++] = xasprintf("VQ_ATTEMPT=%d", job->attempt);
		envp[k++] = xasprintf("VQ_HANDLER=%s", job->handler ? job->handler : "");
	}
	*own = (int) k;
	for (size_t i = 0; i < n; i++)
		if (env_passed(environ[i]))
			envp[k++] = environ[i];
	envp[k] = NULL;
	return envp;
}

int
spawn_command(pid_t *pid, const int fds[3], const Job *job)
{
	posix_spawn_file_actions_t actions;
	posix_spawnattr_t attr;
	sigset_t	none,
				defaults;
	int			own;
	char	  **envp = command_environment(job, &own);
	int			rc;

	posix_spawn_file_actions_init(&actions);
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			posix_spawn_file_actions_adddup2(&actions, fds[i], i);
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigemptyset(&defaults);
	sigaddset(&defaults, SIGPIPE);
	sigaddset(&defaults, SIGTERM);
	sigaddset(&defaults, SIGINT);
	sigaddset(&defaults, SIGCHLD);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &defaults);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	fflush(NULL);
	if (command_path != NULL)
		rc = posix_spawn(pid, command_path, &actions, &attr, opt.command, envp);
	else
		rc = posix_spawnp(pid, opt.command[0], &actions, &attr, opt.command, envp);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&actions);
	for (int i = 0; i < own; i++)
		free(envp[i]);
	free(envp);
	return rc;
}

void
spawn_signal(pid_t pid, int sig)
{
	kill(-pid, sig);
	kill(pid, sig);
}

void
describe_status(int status, char *buf, size_t size)
{
	if (WIFSIGNALED(status))
		snprintf(buf, size, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
}

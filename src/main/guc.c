/*
 * guc.c: the vq.* configuration parameters, in three tables (by type)
 * defined at preload time (_PG_init then reserves the prefix), and the list
 * of databases the workers serve.
 */
#include "postgres.h"

#include <limits.h>

#include "postmaster/postmaster.h"
#include "utils/guc.h"
#include "utils/varlena.h"

#include "main/guc.h"
#include "main/limits.h"

int			vq_execution_timeout_ms = 300000;
int			vq_cancel_grace_ms = 5000;
int			vq_progress_flush_interval_ms = 10000;
char	   *vq_databases = NULL;
int			vq_max_databases = 16;
int			vq_executors_per_database = 2;
int			vq_max_executors = 16;
int			vq_batch_size = 100;
int			vq_inline_handler_ms = 5;
int			vq_shutdown_grace_ms = 5000;
char	   *vq_handler_search_path = NULL;
int			vq_log_max_lines = 1000;
int			vq_max_payload_bytes = 1048576;
int			vq_max_metadata_bytes = 65536;
int			vq_log_max_line_bytes = 8192;
int			vq_retention_finished_s = 86400;
int			vq_retention_dead_letter_s = -1;
int			vq_retention_outbox_failed_s = 604800;
bool		vq_worker_synchronous_commit = true;
bool		vq_serve_database = true;
bool		vq_log_failures = false;

/* An integer setting: its name, description, variable, default, bounds, context and unit. */
typedef struct IntSetting
{
	const char *name;
	const char *description;
	int		   *variable;
	int			boot;
	int			min;
	int			max;
	GucContext	context;
	int			flags;
} IntSetting;

/* A string setting (a list: GUC_LIST_INPUT). */
typedef struct StringSetting
{
	const char *name;
	const char *description;
	char	  **variable;
	const char *boot;
	GucContext	context;
	int			flags;
} StringSetting;

/* A boolean setting, with a longer description. */
typedef struct BoolSetting
{
	const char *name;
	const char *description;
	const char *long_description;
	bool	   *variable;
	bool		boot;
	GucContext	context;
} BoolSetting;

static const IntSetting INT_SETTINGS[] = {
	{"vq.execution_timeout_ms",
		"Time a job execution may take before it is abandoned (0 disables).",
		&vq_execution_timeout_ms, 300000, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS},
	{"vq.cancel_grace_ms",
		"After vq_cancel asks a running handler to stop, how long it may go on before it is interrupted (the job ends CANCELLED either way).",
		&vq_cancel_grace_ms, 5000, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS},
	{"vq.progress_flush_interval_ms",
		"Interval at which the progress of jobs running visibly, and the log lines of running handlers, are saved while they run, by a saver process the launcher starts (0 = only at the end).",
		&vq_progress_flush_interval_ms, 10000, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS},
	{"vq.log_max_lines",
		"Log lines a job attempt may write with vq_log(); the excess is counted and reported in one last line.",
		&vq_log_max_lines, 1000, 0, 1000000, PGC_SIGHUP, 0},
	{"vq.log_max_line_bytes",
		"Bytes of one vq_log() line (message and fields); a longer message is cut, larger fields are dropped.",
		&vq_log_max_line_bytes, 8192, 256, 1048576, PGC_SIGHUP, GUC_UNIT_BYTE},
	{"vq.max_payload_bytes",
		"Largest payload a job or an outbox row may carry (its size as stored, before compression).",
		&vq_max_payload_bytes, 1048576, 1024, 1073741823, PGC_SUSET, GUC_UNIT_BYTE},
	{"vq.max_metadata_bytes",
		"Largest metadata a job may carry (with the bound durable context merged in), or outbox headers.",
		&vq_max_metadata_bytes, 65536, 1024, 1073741823, PGC_SUSET, GUC_UNIT_BYTE},
	{"vq.max_databases",
		"Number of databases vq_job can serve at once (shared memory slots).",
		&vq_max_databases, 16, 1, 1024, PGC_POSTMASTER, 0},
	{"vq.executors_per_database",
		"Executor processes that always run per served database (more start on demand, up to vq.max_executors).",
		&vq_executors_per_database, 2, 1, VQ_MAX_EXECUTORS, PGC_SIGHUP, 0},
	{"vq.max_executors",
		"Most executor processes in the cluster: executors beyond vq.executors_per_database start on demand while jobs claimed visibly (slow handlers) keep the others busy, and exit after idling.",
		&vq_max_executors, 16, 1, MAX_BACKENDS, PGC_SIGHUP, 0},
	{"vq.batch_size",
		"Most jobs one claim takes (also bounded by the queue's free capacity).",
		&vq_batch_size, 100, 1, 10000, PGC_SIGHUP, 0},
	{"vq.inline_handler_ms",
		"Handlers whose recent runs took less than this run in batches inside the claiming transaction; others are committed as RUNNING first (0: always).",
		&vq_inline_handler_ms, 5, 0, 60000, PGC_SIGHUP, GUC_UNIT_MS},
	{"vq.shutdown_grace_ms",
		"When executors are stopped, how long a running handler may go on before it is cancelled (its job is then INTERRUPTED: back in line, its attempt not consumed).",
		&vq_shutdown_grace_ms, 5000, 0, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS},
	{"vq.retention_finished",
		"How long COMPLETED and CANCELLED jobs are kept (with their history and logs); -1 keeps them.",
		&vq_retention_finished_s, 86400, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_S},
	{"vq.retention_dead_letter",
		"How long DEAD_LETTER jobs are kept (with their history and logs); -1 (the default) keeps them.",
		&vq_retention_dead_letter_s, -1, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_S},
	{"vq.retention_outbox_failed",
		"How long FAILED outbox rows are kept for inspection; -1 keeps them.",
		&vq_retention_outbox_failed_s, 604800, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_S},
};

static const StringSetting STRING_SETTINGS[] = {
	{"vq.databases",
		"Comma-separated databases the workers serve; empty means every database with the extension.",
		&vq_databases, "", PGC_SIGHUP, GUC_LIST_INPUT},
	{"vq.handler_search_path",
		"search_path handlers run with (pg_temp is always searched last).",
		&vq_handler_search_path, "\"$user\", public", PGC_SIGHUP, GUC_LIST_INPUT},
};

static const BoolSetting BOOL_SETTINGS[] = {
	{"vq.worker_synchronous_commit",
		"Whether the executors wait for their commits (outcomes, relayed rows) to reach disk.",
		"Off: a crash may undo the last moments of outcomes, and those jobs run again together with their handlers' writes, which were undone with them; nothing is lost or applied twice.",
		&vq_worker_synchronous_commit, true, PGC_SIGHUP},
	{"vq.log_failures",
		"Whether each failed, abandoned or dead-lettered job attempt is logged (LOG) in the server log.",
		"One line per attempt: execution id, attempt, handler, queue, role and the error (cut at vq.log_max_line_bytes).",
		&vq_log_failures, false, PGC_SUSET},
	{"vq.serve_database",
		"Whether vq_job's executors serve a database (set it with ALTER DATABASE ... SET).",
		"Off: the database's executors exit within a second and none start while it stays off.",
		&vq_serve_database, true, PGC_SUSET},
};

/* Define the vq.* configuration parameters (from _PG_init, which then reserves the prefix). */
void
VqDefineSettings(void)
{
	for (size_t i = 0; i < lengthof(INT_SETTINGS); i++)
	{
		const IntSetting *s = &INT_SETTINGS[i];

		DefineCustomIntVariable(s->name, s->description, NULL, s->variable, s->boot, s->min, s->max,
								s->context, s->flags, NULL, NULL, NULL);
	}
	for (size_t i = 0; i < lengthof(STRING_SETTINGS); i++)
	{
		const StringSetting *s = &STRING_SETTINGS[i];

		DefineCustomStringVariable(s->name, s->description, NULL, s->variable, s->boot,
								   s->context, s->flags, NULL, NULL, NULL);
	}
	for (size_t i = 0; i < lengthof(BOOL_SETTINGS); i++)
	{
		const BoolSetting *s = &BOOL_SETTINGS[i];

		DefineCustomBoolVariable(s->name, s->description, s->long_description, s->variable, s->boot,
								 s->context, 0, NULL, NULL, NULL);
	}
}

/* Is this database in vq.databases (or is that list empty)? */
bool
VqDatabaseSelected(const char *name)
{
	char	   *list;
	List	   *names;
	ListCell   *lc;
	bool		selected = false;

	if (vq_databases == NULL || vq_databases[0] == '\0')
		return true;
	list = pstrdup(vq_databases);
	if (!SplitIdentifierString(list, ',', &names))
	{
		ereport(WARNING, (errmsg("vq.databases is not a valid list of database names")));
		return false;
	}
	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), name) == 0)
			selected = true;
	return selected;
}

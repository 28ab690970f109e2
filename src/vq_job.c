/*
 * vq_job.c: library entry point. Refuses to load outside
 * shared_preload_libraries, defines the vq.* settings and asks each subsystem
 * to register what it needs (shared memory, caches).
 */
#include "postgres.h"

#include "fmgr.h"
#include "access/detoast.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "postmaster/postmaster.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "main/compat.h"
#include "run/context.h"
#include "launcher/guard.h"
#include "launcher/launcher.h"
#include "state/prepared.h"
#include "cache/registry.h"
#include "executors/restore.h"
#include "main/shmem.h"
#include "vq_job.h"

PG_MODULE_MAGIC;

PG_FUNCTION_INFO_V1(vq_require_writable);

int			vq_execution_timeout_ms = 300000;
int			vq_notify_take_timeout_ms = 5000;
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

void		_PG_init(void);

/* True when name matches ^[a-zA-Z0-9._-]{1,128}$. */
bool
vq_valid_name(const char *name, int len)
{
	if (len < 1 || len > VQ_NAME_MAX)
		return false;
	for (int i = 0; i < len; i++)
	{
		char		c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

/* Define the vq.* configuration parameters and reserve the prefix. */
static void
DefineSettings(void)
{
	DefineCustomIntVariable("vq.execution_timeout_ms",
							"Time a job execution may take before it is abandoned (0 disables).",
							NULL, &vq_execution_timeout_ms, 300000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.cancel_grace_ms",
							"After vq_cancel asks a running handler to stop, how long it may go on before it is interrupted (the job ends CANCELLED either way).",
							NULL, &vq_cancel_grace_ms, 5000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.notify_take_timeout_ms",
							"Time an announced NOTIFY job holds its queue's capacity while no consumer takes it; then it waits for a consumer without holding any.",
							NULL, &vq_notify_take_timeout_ms, 5000, 100, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.progress_flush_interval_ms",
							"Interval at which the progress of jobs running visibly, and the log lines of running handlers, are saved while they run, by a saver process the launcher starts (0 = only at the end).",
							NULL, &vq_progress_flush_interval_ms, 10000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.log_max_lines",
							"Log lines a job attempt may write with vq_log(); the excess is counted and reported in one last line.",
							NULL, &vq_log_max_lines, 1000, 0, 1000000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.log_max_line_bytes",
							"Bytes of one vq_log() line (message and fields); a longer message is cut, larger fields are dropped.",
							NULL, &vq_log_max_line_bytes, 8192, 256, 1048576,
							PGC_SIGHUP, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.max_payload_bytes",
							"Largest payload a job or an outbox row may carry (its size as stored, before compression).",
							NULL, &vq_max_payload_bytes, 1048576, 1024, 1073741823,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.max_metadata_bytes",
							"Largest metadata a job may carry (with the bound durable context merged in), or outbox headers.",
							NULL, &vq_max_metadata_bytes, 65536, 1024, 1073741823,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomStringVariable("vq.databases",
							   "Comma-separated databases the workers serve; empty means every database with the extension.",
							   NULL, &vq_databases, "",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.max_databases",
							"Number of databases vq_job can serve at once (shared memory slots).",
							NULL, &vq_max_databases, 16, 1, 1024,
							PGC_POSTMASTER, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.executors_per_database",
							"Executor processes that always run per served database (more start on demand, up to vq.max_executors).",
							NULL, &vq_executors_per_database, 2, 1, VQ_MAX_EXECUTORS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.max_executors",
							"Most executor processes in the cluster: executors beyond vq.executors_per_database start on demand while jobs claimed visibly (slow handlers) keep the others busy, and exit after idling.",
							NULL, &vq_max_executors, 16, 1, MAX_BACKENDS,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.batch_size",
							"Most jobs one claim takes (also bounded by the queue's free capacity).",
							NULL, &vq_batch_size, 100, 1, 10000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.inline_handler_ms",
							"Handlers whose recent runs took less than this run in batches inside the claiming transaction; others are committed as RUNNING first (0: always).",
							NULL, &vq_inline_handler_ms, 5, 0, 60000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.shutdown_grace_ms",
							"When executors are stopped, how long a running handler may go on before it is cancelled (its job is then INTERRUPTED: back in line, its attempt not consumed).",
							NULL, &vq_shutdown_grace_ms, 5000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomStringVariable("vq.handler_search_path",
							   "search_path handlers run with (pg_temp is always searched last).",
							   NULL, &vq_handler_search_path, "\"$user\", public",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.retention_finished",
							"How long COMPLETED and CANCELLED jobs are kept (with their history and logs); -1 keeps them.",
							NULL, &vq_retention_finished_s, 86400, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.retention_dead_letter",
							"How long DEAD_LETTER jobs are kept (with their history and logs); -1 (the default) keeps them.",
							NULL, &vq_retention_dead_letter_s, -1, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomIntVariable("vq.retention_outbox_failed",
							"How long FAILED outbox rows are kept for inspection; -1 keeps them.",
							NULL, &vq_retention_outbox_failed_s, 604800, -1, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_S, NULL, NULL, NULL);
	DefineCustomBoolVariable("vq.worker_synchronous_commit",
							 "Whether the executors wait for their commits (outcomes, relayed rows) to reach disk.",
							 "Off: a crash may undo the last moments of outcomes, and those jobs run again together with their "
							 "handlers' writes, which were undone with them; nothing is lost or applied twice.",
							 &vq_worker_synchronous_commit, true,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("vq.log_failures",
							 "Whether each failed, abandoned or dead-lettered job attempt is logged (LOG) in the server log.",
							 "One line per attempt: execution id, attempt, handler, queue, role and the error (cut at vq.log_max_line_bytes).",
							 &vq_log_failures, false,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("vq.serve_database",
							 "Whether vq_job's executors serve a database (set it with ALTER DATABASE ... SET).",
							 "Off: the database's executors exit within a second and none start while it stays off.",
							 &vq_serve_database, true,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	VqContextInit();
	MarkGUCPrefixReserved("vq");
}

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("vq_job must be loaded via shared_preload_libraries"),
				 errhint("Add vq_job to shared_preload_libraries in postgresql.conf and restart the server.")));

	DefineSettings();

	/* pg_upgrade's binary-upgrade server must not run workers or touch jobs. */
	if (IsBinaryUpgrade)
		return;

	VqShmemInit();
	VqRegistryInit();
	VqLauncherInit();
	VqGuardInit();
	VqPreparedInit();
	VqRestoreInit();
}

/* Error (VQ012) when a jsonb value is larger than limit bytes, uncompressed. */
void
VqCheckSize(Datum jsonb, int limit, const char *what, const char *setting)
{
	Size		size = toast_raw_datum_size(jsonb);

	if (size > (Size) limit)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_TOO_LARGE),
				 errmsg("%s is too large: %zu bytes, at most %d", what, size, limit),
				 errhint("Store large data in a table and pass its key, or raise %s.", setting)));
}

/* Error (VQ008) unless t is a finite timestamp: no worker can wait for an infinite time. */
void
VqCheckFiniteTime(TimestampTz t, const char *what)
{
	if (TIMESTAMP_NOT_FINITE(t))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s must be a finite time, got %s", what, TIMESTAMP_IS_NOBEGIN(t) ? "-infinity" : "infinity")));
}

/*
 * t + span, refusing (VQ008) a span that may leave the timestamp range.
 * Months are counted as 28 to 31 days and a day as 24 hours give or take one,
 * so the bounds are checked before the exact sum, which would otherwise raise
 * datetime's own "timestamp out of range" (22008).
 */
TimestampTz
VqAddInterval(TimestampTz t, const Interval *span, const char *what)
{
	double		days_hi = (double) span->month * (span->month > 0 ? 31 : 28) + span->day + 1;
	double		days_lo = (double) span->month * (span->month > 0 ? 28 : 31) + span->day - 1;
	double		hi = (double) t + days_hi * USECS_PER_DAY + (double) span->time;
	double		lo = (double) t + days_lo * USECS_PER_DAY + (double) span->time;

	if (hi >= (double) END_TIMESTAMP || lo < (double) MIN_TIMESTAMP)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s %s is out of range", what,
						DatumGetCString(DirectFunctionCall1(interval_out, PointerGetDatum(span)))),
				 errdetail("The time it gives must lie between 4713 BC and 294276 AD.")));
	return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(t),
												   PointerGetDatum(span)));
}

/*
 * text within limit bytes: a longer one is cut at a character boundary and
 * ends with " [cut: N bytes in all]" (the mark vq_log lines get), so that
 * the whole stays within limit. Returns text itself when it fits (or is NULL).
 */
char *
VqCapTextTo(const char *text, int limit)
{
	int			len = text ? strlen(text) : 0;
	char		note[64];
	int			keep;

	if (len <= limit)
		return unconstify(char *, text);
	snprintf(note, sizeof(note), " [cut: %d bytes in all]", len);
	keep = pg_mbcliplen(text, len, Max(limit - (int) strlen(note), 16));
	return psprintf("%.*s%s", keep, text, note);
}

/* An error text as stored (last_error, transitions, logs): within vq.log_max_line_bytes. */
char *
VqCapText(const char *text)
{
	return VqCapTextTo(text, vq_log_max_line_bytes);
}

/*
 * Error unless the current transaction can write: on a hot standby, or in a
 * read-only transaction, PostgreSQL's own error would only name the INSERT
 * that failed. Keeps 25006 (read_only_sql_transaction), which drivers and
 * poolers know. Costs one test of a flag while the transaction can write.
 */
void
VqRequireWritable(const char *what)
{
	if (!XactReadOnly)
		return;
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				 errmsg("%s cannot run on a hot standby", what),
				 errdetail("This server is a standby in recovery: vq_job's jobs, outbox and configuration are written on the primary only."),
				 errhint("Connect to the primary server (with libpq, target_session_attrs=read-write finds it).")));
	ereport(ERROR,
			(errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
			 errmsg("%s cannot run in a read-only transaction", what),
			 errhint("Call it in a read-write transaction (START TRANSACTION READ WRITE; see default_transaction_read_only).")));
}

/* vq.require_writable(what text): VqRequireWritable for the install script's functions. */
Datum
vq_require_writable(PG_FUNCTION_ARGS)
{
	VqRequireWritable(PG_ARGISNULL(0) ? "this vq_job function" : text_to_cstring(PG_GETARG_TEXT_PP(0)));
	PG_RETURN_VOID();
}

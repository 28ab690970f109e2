/*
 * checks.c: the checks every SQL entry point shares: names, sizes, finite
 * times, a writable transaction; and the cut of stored error texts.
 */
#include "postgres.h"

#include "fmgr.h"
#include "access/detoast.h"
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "main/limits.h"

PG_FUNCTION_INFO_V1(vq_require_writable);

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

/* Error (VQ006) unless value is NULL or a JSON object (what names it). */
void
VqCheckJsonObject(Jsonb *value, const char *what)
{
	if (value != NULL && !JB_ROOT_IS_OBJECT(value))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_METADATA),
				 errmsg("%s must be a JSON object", what)));
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

/* The version of vq_job installed in this database, or NULL when it is not installed. */
char *
VqInstalledVersion(void)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = NULL;

	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber, F_NAMEEQ,
				CStringGetDatum("vq_job"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion, RelationGetDescr(rel), &isnull);

		version = isnull ? pstrdup("") : TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * Error unless the installed extension is the library's version: for the
 * calls of an older version's script whose C code needs the current schema
 * (a database not updated yet after the library was).
 */
void
VqRequireInstalledVersion(const char *what)
{
	char	   *installed = VqInstalledVersion();

	if (installed != NULL && strcmp(installed, VQ_EXTVERSION) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("%s needs vq_job %s, but this database has vq_job %s", what, VQ_EXTVERSION, installed),
				 errhint("Run ALTER EXTENSION vq_job UPDATE.")));
}

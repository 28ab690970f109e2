/*
 * joblog.c: writing a job's log lines to vq.job_log, set-based: by the
 * executor that ran the job, with its outcome (jobapi.c), and by the saver
 * while it runs (livelog.c).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "util/spi_util.h"
#include "run/joblog.h"

static SPIPlanPtr log_plan = NULL;

/* Insert log lines of one attempt (in the caller's transaction, connected to SPI). */
void
VqWriteLogEntries(pg_uuid_t *execution_id, int32 attempt, List *entries)
{
	int			n = list_length(entries);
	Datum	   *levels = palloc(sizeof(Datum) * n);
	Datum	   *messages = palloc(sizeof(Datum) * n);
	Datum	   *fields = palloc(sizeof(Datum) * n);
	bool	   *field_nulls = palloc(sizeof(bool) * n);
	Datum	   *ats = palloc(sizeof(Datum) * n);
	Datum		values[6];
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int			i = 0;
	ListCell   *lc;

	if (n == 0)
		return;
	foreach(lc, entries)
	{
		VqLogEntry *e = lfirst(lc);

		levels[i] = CStringGetTextDatum(e->level);
		messages[i] = CStringGetTextDatum(e->message);
		fields[i] = e->fields ? JsonbPGetDatum(e->fields) : (Datum) 0;
		field_nulls[i] = (e->fields == NULL);
		ats[i] = TimestampTzGetDatum(e->at);
		i++;
	}
	values[0] = UUIDPGetDatum(execution_id);
	values[1] = Int32GetDatum(attempt);
	values[2] = PointerGetDatum(construct_array(levels, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(messages, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[4] = PointerGetDatum(construct_md_array(fields, field_nulls, 1, dims, lbs, JSONBOID, -1, false, TYPALIGN_INT));
	values[5] = PointerGetDatum(construct_array(ats, n, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	if (SPI_execute_plan(VqKeepPlan(&log_plan,
							  "INSERT INTO vq.job_log (execution_id, attempt_number, level, message, fields, logged_at)"
							  " SELECT $1, $2, u.l, u.m, u.f, u.t"
							  " FROM ROWS FROM (pg_catalog.unnest($3), pg_catalog.unnest($4),"
							  "                 pg_catalog.unnest($5), pg_catalog.unnest($6)) AS u(l, m, f, t)",
							  6, (Oid[]) {UUIDOID, INT4OID, TEXTARRAYOID, TEXTARRAYOID, JSONBARRAYOID, TIMESTAMPTZARRAYOID}),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: writing job logs failed");
}

/* A log level as stored: DEBUG, INFO, WARN (WARNING too) or ERROR, any case; else an error. */
const char *
VqLogLevel(const char *level)
{
	if (pg_strcasecmp(level, "DEBUG") == 0)
		return "DEBUG";
	if (pg_strcasecmp(level, "INFO") == 0)
		return "INFO";
	if (pg_strcasecmp(level, "WARN") == 0 || pg_strcasecmp(level, "WARNING") == 0)
		return "WARN";
	if (pg_strcasecmp(level, "ERROR") == 0)
		return "ERROR";
	ereport(ERROR,
			(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
			 errmsg("unknown log level \"%s\"", level),
			 errhint("Use DEBUG, INFO, WARN or ERROR.")));
	return NULL;				/* keep the compiler quiet */
}

/*
 * A log line within vq.log_max_line_bytes: fields that do not fit are dropped
 * (*fields set NULL), then the message is cut at a character boundary; either
 * is said at the end of the message.
 */
char *
VqLogMessage(text *message, Jsonb **fields)
{
	char	   *msg = text_to_cstring(message);
	int			len = strlen(msg);
	int			limit = vq_log_max_line_bytes;
	int			field_bytes = *fields ? VARSIZE(*fields) : 0;
	StringInfoData buf;

	if (len + field_bytes <= limit)
		return msg;
	initStringInfo(&buf);
	if (field_bytes > limit / 2)
		*fields = NULL;
	else
		limit -= field_bytes;
	/* (room for the note on dropped fields; the cut's own note is within the limit) */
	appendStringInfoString(&buf, VqCapTextTo(msg, Max(limit - 40, 16)));
	if (*fields == NULL && field_bytes > 0)
		appendStringInfo(&buf, " [fields dropped: %d bytes]", field_bytes);
	return buf.data;
}

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

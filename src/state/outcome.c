/*
 * outcome.c: writing what happened to jobs, and rescuing jobs whose executor
 * died. Every state change writes the job row and its history in one
 * statement: a job that ends moves from vq.job_active to vq.job_finished
 * (DELETE + INSERT); every transition gets one vq.job_transition_data row,
 * except the COMPLETED transition of a job that was never claimed visibly
 * (ENQUEUED -> COMPLETED, the common case), which the finished row records,
 * and the CLAIMED and COMPLETED transitions of a job a worker took and
 * completed, which its row records (consumer_claimed_at); a taken job that
 * ends otherwise gets its CLAIMED row then (the vq.job_transition view shows
 * them all). All functions run inside the
 * caller's transaction, connected to SPI, with plans prepared once and kept.
 *
 * Attempts are zero-based and max_attempts inclusive: an attempt remains while
 * attempt_number + 1 < max_attempts. A failure with an attempt left re-enqueues
 * the job at now + backoff(attempt_number + 1) of its queue; an abandonment
 * (timeout, dead executor, shutdown) re-enqueues it at once, keeping its
 * scheduled_at and so its place in line; with no attempt left either
 * moves it to DEAD_LETTER, where nothing runs it again.
 */
#include "postgres.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/checks.h"
#include "main/guc.h"
#include "main/shmem.h"
#include "util/backoff.h"
#include "util/spi_util.h"
#include "state/outcome.h"
#include "state/wakeup.h"

static SPIPlanPtr completed_plan = NULL;
static SPIPlanPtr retry_plan = NULL;
static SPIPlanPtr dead_letter_plan = NULL;
static SPIPlanPtr running_plan = NULL;
static SPIPlanPtr progress_plan = NULL;

/* Run a kept plan that writes, expecting the given result; returns the rows written. */
static uint64
Write(SPIPlanPtr plan, Datum *values, const char *nulls)
{
	int			rc = SPI_execute_plan(plan, values, nulls, false, 0);

	if (rc != SPI_OK_INSERT && rc != SPI_OK_UPDATE)
		elog(ERROR, "vq_job: writing a job outcome failed: %s", SPI_result_code_string(rc));
	return SPI_processed;
}

/* An int8 array with NULLs where the outcome had no progress. */
static Datum
ProgressArray(List *outcomes, int which)
{
	int			n = list_length(outcomes);
	Datum	   *values = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc(sizeof(bool) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	int			i = 0;
	ListCell   *lc;

	foreach(lc, outcomes)
	{
		VqOutcome  *o = lfirst(lc);
		int64		v = which == 0 ? o->progress_total : which == 1 ? o->progress_succeeded : o->progress_failed;

		values[i] = Int64GetDatum(v);
		nulls[i] = !o->has_progress;
		i++;
	}
	return PointerGetDatum(construct_md_array(values, nulls, 1, dims, lbs, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
}

/*
 * End one job that ran: it moves to vq.job_finished as COMPLETED or
 * CANCELLED (state), with the handler's start, its progress and error, and a
 * transition of that kind unless it is the completion of an inline run
 * (ENQUEUED -> COMPLETED) or of a job a worker took, which the finished row
 * implies (a taken job cancelled gets its CLAIMED row first).
 */
static void
PersistOneEnded(VqJob *job, VqOutcome *o, const char *state, TimestampTz now)
{
	static SPIPlanPtr ended_one_plan = NULL;
	Datum		values[12];
	char		nulls[12] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

	values[0] = UUIDPGetDatum(&job->execution_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = CStringGetTextDatum(job->running ? "RUNNING" : "ENQUEUED");
	values[3] = Int64GetDatum(o->progress_total);
	values[4] = Int64GetDatum(o->progress_succeeded);
	values[5] = Int64GetDatum(o->progress_failed);
	if (!o->has_progress)
		nulls[3] = nulls[4] = nulls[5] = 'n';
	values[6] = TimestampTzGetDatum(o->started_at);
	if (o->started_at == 0)
		nulls[6] = 'n';
	values[7] = CStringGetTextDatum(state);
	values[8] = o->error ? CStringGetTextDatum(VqCapText(o->error)) : (Datum) 0;
	nulls[8] = o->error ? ' ' : 'n';
	values[9] = BoolGetDatum(job->taken_at != 0);
	values[10] = Int32GetDatum(job->attempt_number);	/* ($8 of TAKEN_CLAIMED_TRANSITION, as $11 here) */
	values[11] = TimestampTzGetDatum(job->taken_at);
	nulls[11] = job->taken_at != 0 ? ' ' : 'n';

	/* (a completion implies its transitions when inline, or when a worker took the job) */
	Write(VqKeepPlan(&ended_one_plan,
			   "WITH moved AS ("
			   " DELETE FROM vq.job_active j WHERE j.execution_id OPERATOR(pg_catalog.=) $1 RETURNING j.*),"
			   " finished AS (INSERT INTO vq.job_finished SELECT"
			   VQ_FINISHED_ROW("$8::vq.job_state", "$2", "coalesce(started_at, $7)", "$2", "$9",
							   "coalesce($4, progress_total)", "coalesce($5, progress_succeeded)",
							   "coalesce($6, progress_failed)")
			   "  FROM moved)"
			   " INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state, error, at)"
			   " SELECT * FROM ("
			   "  SELECT moved.execution_id, $11, 'CLAIMED', 'ENQUEUED'::vq.job_state, 'RUNNING'::vq.job_state,"
			   "   NULL::pg_catalog.text, $12 FROM moved"
			   "  WHERE $8 OPERATOR(pg_catalog.<>) 'COMPLETED' AND $12::pg_catalog.timestamptz IS NOT NULL"
			   "  AND NOT EXISTS (SELECT FROM vq.job_transition_data c WHERE c.execution_id OPERATOR(pg_catalog.=) $1"
			   "   AND c.attempt_number OPERATOR(pg_catalog.=) $11 AND c.kind OPERATOR(pg_catalog.=) 'CLAIMED')"
			   "  UNION ALL"
			   "  SELECT execution_id, attempt_number, $8, $3::vq.job_state, $8::vq.job_state, $9, $2 FROM moved"
			   "  WHERE NOT ($8 OPERATOR(pg_catalog.=) 'COMPLETED' AND ($3 OPERATOR(pg_catalog.=) 'ENQUEUED' OR $10))) t",
			   12, (Oid[]) {UUIDOID, TIMESTAMPTZOID, TEXTOID, INT8OID, INT8OID, INT8OID, TIMESTAMPTZOID, TEXTOID,
			   TEXTOID, BOOLOID, INT4OID, TIMESTAMPTZOID}),
		  values, nulls);
}

/* Mark several jobs COMPLETED in one set-based statement. */
static void
PersistManyCompleted(List *jobs, List *outcomes, TimestampTz now)
{
	int			n = list_length(jobs);
	Datum	   *ids = palloc(sizeof(Datum) * n);
	Datum	   *froms = palloc(sizeof(Datum) * n);
	Datum	   *starts = palloc(sizeof(Datum) * n);
	bool	   *start_nulls = palloc(sizeof(bool) * n);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	Datum		values[7];
	int			i = 0;
	int			index_scans;
	ListCell   *lc;

	foreach(lc, jobs)
	{
		VqJob	   *job = lfirst(lc);

		VqOutcome  *o = list_nth(outcomes, i);

		ids[i] = UUIDPGetDatum(&job->execution_id);
		/* (TAKEN: a worker took it; its row implies both of its transitions) */
		froms[i] = CStringGetTextDatum(job->taken_at != 0 ? "TAKEN" : job->running ? "RUNNING" : "ENQUEUED");
		starts[i] = TimestampTzGetDatum(o->started_at);
		start_nulls[i] = (o->started_at == 0);
		i++;
	}
	values[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[1] = TimestampTzGetDatum(now);
	values[2] = PointerGetDatum(construct_array(froms, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = ProgressArray(outcomes, 0);
	values[4] = ProgressArray(outcomes, 1);
	values[5] = ProgressArray(outcomes, 2);
	values[6] = PointerGetDatum(construct_md_array(starts, start_nulls, 1, dims, lbs, TIMESTAMPTZOID, 8,
												   FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));

	index_scans = VqIndexScansBegin();
	Write(VqKeepGenericPlan(&completed_plan,
			   /*
				* The rows are found by "= ANY" on the primary key, not by a join
				* with the arrays: vq.job_active is often empty when analyzed, and
				* a join planned for an empty table walks the whole index. Planned
				* once, for index scans (a plan per batch cost as much as the
				* rest of the batch's bookkeeping).
				*/
			   "WITH moved AS ("
			   " DELETE FROM vq.job_active j WHERE j.execution_id OPERATOR(pg_catalog.=) ANY ($1) RETURNING j.*),"
			   " finished AS (INSERT INTO vq.job_finished SELECT"
			   VQ_FINISHED_ROW("'COMPLETED'::vq.job_state", "$2", "coalesce(started_at, st)", "$2", "NULL",
							   "coalesce(t, progress_total)", "coalesce(s, progress_succeeded)",
							   "coalesce(f, progress_failed)")
			   "  FROM moved JOIN ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($3), pg_catalog.unnest($4),"
			   "                  pg_catalog.unnest($5), pg_catalog.unnest($6), pg_catalog.unnest($7))"
			   "  AS u(e, fs, t, s, f, st) ON u.e OPERATOR(pg_catalog.=) moved.execution_id)"
			   " INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state, at)"
			   " SELECT moved.execution_id, moved.attempt_number, 'COMPLETED', 'RUNNING', 'COMPLETED', $2"
			   " FROM moved JOIN ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($3)) AS r(e, fs)"
			   "  ON r.e OPERATOR(pg_catalog.=) moved.execution_id WHERE r.fs OPERATOR(pg_catalog.=) 'RUNNING'",
			   7, (Oid[]) {UUIDARRAYOID, TIMESTAMPTZOID, TEXTARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID,
			   TIMESTAMPTZARRAYOID}),
		  values, NULL);
	VqIndexScansEnd(index_scans);
}

/* Mark jobs COMPLETED (a COMPLETED transition for those claimed visibly; implied for the others). */
void
VqPersistCompleted(List *jobs, List *outcomes, TimestampTz now)
{
	if (list_length(jobs) == 1)
		PersistOneEnded(linitial(jobs), linitial(outcomes), "COMPLETED", now);
	else
		PersistManyCompleted(jobs, outcomes, now);
}

/*
 * vq.log_failures: one LOG line (server log only) for an attempt that failed
 * or was abandoned, saying what comes of it: retried (at retry_at; 0: at
 * once, in its place in line) or dead-lettered. error is the text as stored.
 */
static void
LogFailure(VqJob *job, VqOutcome *outcome, bool retry, TimestampTz retry_at, const char *error)
{
	char	   *role = GetUserNameFromId(job->enqueued_by, true);
	char	   *fate = !retry ? "dead-lettered" : retry_at == 0 ? "retried at once"
		: psprintf("retry at %s", timestamptz_to_str(retry_at));

	ereport(LOG_SERVER_ONLY,
			(errmsg("vq_job: job %s attempt %d of handler \"%s\" (queue \"%s\", role %s) %s, %s: %s",
					DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&job->execution_id))),
					job->attempt_number, job->handler ? job->handler : "?", job->queue,
					role ? quote_identifier(role) : psprintf("%u", job->enqueued_by),
					outcome->kind == VQ_OUTCOME_ABANDONED ? "abandoned" : "failed",
					fate, error)));
}

/*
 * When a failed attempt is retried: after its backoff, or at the time a
 * worker's retry asked. (An abandoned or interrupted job keeps its
 * scheduled_at instead, so it is claimed again at once, ahead of the jobs
 * that were due after it; a job whose lease expired waits like a failure.)
 */
static TimestampTz
RetryAt(VqJob *job, VqOutcome *outcome, VqQueue *queue, TimestampTz now)
{
	VqBackoffStrategy strategy = queue ? queue->backoff_strategy : VQ_BACKOFF_LINEAR;
	int64		base = queue ? queue->backoff_base_delay_ms : 30000;
	int64		max = queue ? queue->backoff_max_delay_ms : 3600000;

	if (outcome->retry_at != 0)
		return Max(outcome->retry_at, now);
	return TimestampTzPlusMilliseconds(now, VqBackoffDelayMs(strategy, base, max, job->attempt_number + 1));
}

/*
 * Record a failure, an abandonment or an interruption: re-enqueue when an
 * attempt remains, else dead-letter; one transition (FAILED, ABANDONED or
 * INTERRUPTED) either way. An interrupted job (cut by an orderly stop) is
 * always re-enqueued with its attempt unchanged: a restart costs nothing.
 * Only if the row is still as the caller saw it (its state, its attempt, and
 * its updated_at when job->updated_at is set); returns whether it was.
 */
bool
VqPersistFailure(VqJob *job, VqOutcome *outcome, VqQueue *queue, TimestampTz now)
{
	static const Oid failure_types[12] = {UUIDOID, TEXTOID, INT4OID, TIMESTAMPTZOID, TEXTOID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, INT4OID, TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	bool		interrupted = outcome->kind == VQ_OUTCOME_INTERRUPTED;
	bool		retry = interrupted || (job->attempt_number + 1 < job->max_attempts && !outcome->permanent);
	bool		keeps_place = interrupted || (outcome->kind == VQ_OUTCOME_ABANDONED && !outcome->backoff);
	TimestampTz next_at = retry && !keeps_place ? RetryAt(job, outcome, queue, now) : now;
	Datum		values[12];
	char		nulls[12] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	uint64		written;

	values[0] = UUIDPGetDatum(&job->execution_id);
	values[1] = CStringGetTextDatum(retry ? "ENQUEUED" : "DEAD_LETTER");
	values[2] = Int32GetDatum(retry && !interrupted ? job->attempt_number + 1 : job->attempt_number);
	values[3] = TimestampTzGetDatum(next_at);
	nulls[3] = keeps_place ? 'n' : ' ';
	values[4] = CStringGetTextDatum(VqCapText(outcome->error ? outcome->error : "unknown error"));
	values[5] = TimestampTzGetDatum(now);
	nulls[5] = retry ? 'n' : ' ';	/* finished_at */
	values[6] = TimestampTzGetDatum(now);
	values[7] = Int32GetDatum(job->attempt_number);
	values[8] = CStringGetTextDatum(interrupted ? "INTERRUPTED" :
									outcome->kind == VQ_OUTCOME_ABANDONED ? "ABANDONED" : "FAILED");
	values[9] = CStringGetTextDatum(job->running ? "RUNNING" : "ENQUEUED");
	values[10] = TimestampTzGetDatum(job->updated_at);
	nulls[10] = job->updated_at == 0 ? 'n' : ' ';
	values[11] = TimestampTzGetDatum(job->taken_at);
	nulls[11] = job->taken_at == 0 ? 'n' : ' ';

	/*
	 * $1 id, $2 new state, $3 new attempt, $4 retry at, $5 error, $7 now,
	 * $8/$10/$11 the row as seen, $12 when a worker took it: then its CLAIMED
	 * transition comes first, unless stored (the take stores it while
	 * transition listeners are registered)
	 */
#define FAILURE_GUARD \
	" WHERE j.execution_id OPERATOR(pg_catalog.=) $1" \
	" AND j.state OPERATOR(pg_catalog.=) $10::vq.job_state AND j.attempt_number OPERATOR(pg_catalog.=) $8" \
	" AND ($11::pg_catalog.timestamptz IS NULL OR j.updated_at OPERATOR(pg_catalog.=) $11)"
#define FAILURE_TRANSITION \
	" INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state, error, at)" \
	" SELECT execution_id, $8, 'CLAIMED', 'ENQUEUED'::vq.job_state, 'RUNNING'::vq.job_state, NULL, $12 FROM j" \
	" WHERE $12::pg_catalog.timestamptz IS NOT NULL AND NOT EXISTS (SELECT FROM vq.job_transition_data c" \
	"  WHERE c.execution_id OPERATOR(pg_catalog.=) $1 AND c.attempt_number OPERATOR(pg_catalog.=) $8" \
	"  AND c.kind OPERATOR(pg_catalog.=) 'CLAIMED')" \
	" UNION ALL" \
	" SELECT execution_id, $8, $9, $10::vq.job_state, $2::vq.job_state, $5, $7 FROM j"
	if (retry)
		written = Write(VqKeepPlan(&retry_plan,
							 "WITH j AS ("
							 " UPDATE vq.job_active j SET state = 'ENQUEUED', attempt_number = $3,"
							 "  scheduled_at = coalesce($4, j.scheduled_at), last_error = $5, updated_at = $7,"
							 "  worker_pid = NULL, worker_started_at = NULL, worker_timeline = NULL, consumer_claimed_at = NULL,"
							 "  lease_until = NULL"
							 FAILURE_GUARD " RETURNING j.execution_id)"
							 FAILURE_TRANSITION,
							 12, failure_types),
						values, nulls);
	else
		written = Write(VqKeepPlan(&dead_letter_plan,
							 "WITH j AS (DELETE FROM vq.job_active j" FAILURE_GUARD " RETURNING j.*),"
							 " finished AS (INSERT INTO vq.job_finished SELECT"
							 VQ_FINISHED_ROW("'DEAD_LETTER'::vq.job_state", "$7", "started_at", "$6", "$5",
											 "progress_total", "progress_succeeded", "progress_failed")
							 "  FROM j)"
							 FAILURE_TRANSITION,
							 12, failure_types),
						values, nulls);

	/* the retry is a due time the executors must not sleep past */
	if (written > 0 && retry)
		VqJobsEnqueuedAtCommit(job->queue, VqJobLaneHandler(job), job->priority,
							   keeps_place ? job->scheduled_at : next_at, true);
	if (written > 0 && vq_log_failures && !interrupted)
		LogFailure(job, outcome, retry, keeps_place ? 0 : next_at, TextDatumGetCString(values[4]));
	return written > 0;
}

/*
 * End a job that vq_cancel asked to stop while its handler ran: it moves to
 * vq.job_finished as CANCELLED (last_error says why), with one CANCELLED
 * transition, whatever attempts are left.
 */
void
VqPersistCancelled(VqJob *job, VqOutcome *outcome, TimestampTz now)
{
	PersistOneEnded(job, outcome, "CANCELLED", now);
}

/* Claim a job visibly: commit it as RUNNING with this executor's identity, with a CLAIMED transition. */
void
VqPersistRunning(VqJob *job, TimestampTz now)
{
	Datum		values[5];

	values[0] = UUIDPGetDatum(&job->execution_id);
	values[1] = TimestampTzGetDatum(now);
	values[2] = Int32GetDatum(VqMyExecutorSlot->pid);
	values[3] = TimestampTzGetDatum(VqMyExecutorSlot->started_at);
	values[4] = Int32GetDatum((int32) GetWALInsertionTimeLine());

	Write(VqKeepPlan(&running_plan,
			   "WITH j AS ("
			   " UPDATE vq.job_active SET state = 'RUNNING', started_at = $2, updated_at = $2,"
			   "  worker_pid = $3, worker_started_at = $4, worker_timeline = $5"
			   " WHERE execution_id OPERATOR(pg_catalog.=) $1 RETURNING execution_id, attempt_number)"
			   " INSERT INTO vq.job_transition_data (execution_id, attempt_number, kind, from_state, to_state, at)"
			   " SELECT execution_id, attempt_number, 'CLAIMED', 'ENQUEUED', 'RUNNING', $2 FROM j",
			   5, (Oid[]) {UUIDOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT4OID}),
		  values, NULL);
	job->running = true;
}

/* Is an executor with this identity alive and serving this database? */
static bool
ExecutorAlive(int pid, TimestampTz started_at)
{
	bool		alive = false;

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_SHARED);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &VqMyDatabaseSlot->executors[i];

		if (e->pid == pid && e->started_at == started_at)
			alive = true;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
	return alive;
}

/* A RUNNING job the rescue looks at: a copy, read without locking the row. */
typedef struct RunningJob
{
	VqJob		job;
	bool		external;		/* a job a worker took: no worker_pid */
	int			worker_pid;
	TimestampTz worker_started_at;
	int32		worker_timeline;	/* 0: not known */
	TimestampTz lease_until;	/* a taken job's */
} RunningJob;

/*
 * How often the rescue looks at the jobs of executors when none has left its
 * slot: every call (once a second). Looking only at starts and exits left a
 * job of a killed executor RUNNING after a crash restart in two fresh-clone
 * runs of worker_crash.sh (cause not found), so the time-based look stays.
 */
#define RESCUE_SWEEP_MS 1000

/* What the rescue reads of a RUNNING job (RunningJob), before the conditions. */
#define RESCUE_CANDIDATES \
	"SELECT execution_id, attempt_number, max_attempts, queue, worker_pid," \
	" worker_started_at, updated_at, priority, scheduled_at, worker_timeline, handler, enqueued_by," \
	" consumer_claimed_at, lease_until" \
	" FROM vq.job_active WHERE state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state"

/* Append the rows of a rescue candidates query to jobs. */
static List *
CopyRescueCandidates(List *jobs)
{
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		RunningJob *r = palloc0(sizeof(RunningJob));
		bool		isnull;
		Datum		pid = SPI_getbinval(tup, desc, 5, &r->external);

		memcpy(&r->job.execution_id, DatumGetUUIDP(SPI_getbinval(tup, desc, 1, &isnull)), sizeof(pg_uuid_t));
		r->job.attempt_number = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		r->job.max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		r->job.queue = SPI_getvalue(tup, desc, 4);
		r->job.running = true;
		r->job.updated_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 7, &isnull));
		r->job.priority = DatumGetInt32(SPI_getbinval(tup, desc, 8, &isnull));
		r->job.scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 9, &isnull));
		r->worker_pid = r->external ? 0 : DatumGetInt32(pid);
		r->worker_started_at = r->external ? 0 : DatumGetTimestampTz(SPI_getbinval(tup, desc, 6, &isnull));
		r->worker_timeline = DatumGetInt32(SPI_getbinval(tup, desc, 10, &isnull));
		if (isnull)
			r->worker_timeline = 0;
		r->job.handler = SPI_getvalue(tup, desc, 11);	/* (for vq.log_failures, and a taken job's lane) */
		r->job.enqueued_by = DatumGetObjectId(SPI_getbinval(tup, desc, 12, &isnull));
		r->job.external = r->external;
		if (r->external)
		{
			Datum		taken = SPI_getbinval(tup, desc, 13, &isnull);

			r->job.taken_at = isnull ? 0 : DatumGetTimestampTz(taken);
			r->lease_until = DatumGetTimestampTz(SPI_getbinval(tup, desc, 14, &isnull));
		}
		jobs = lappend(jobs, r);
	}
	return jobs;
}

/*
 * The RUNNING jobs that may be orphans: with executors, those run by an
 * executor; with leases, the jobs workers took whose lease has expired.
 * Two queries: the executors' jobs are a short range of job_running_idx,
 * while the taken jobs' range holds every row version of every taken job
 * (a held snapshot keeps them all), so it is looked at less often.
 */
static List *
ReadRescueCandidates(TimestampTz now, bool executors, bool leases)
{
	static SPIPlanPtr executors_plan = NULL;
	static SPIPlanPtr lease_plan = NULL;
	List	   *jobs = NIL;

	/* (custom plans, for the reason given at ExternalInFlight in claim/inflight.c) */
	if (executors)
	{
		if (SPI_execute_plan(VqKeepCustomPlan(&executors_plan, RESCUE_CANDIDATES " AND worker_pid IS NOT NULL",
											  0, NULL),
							 NULL, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: looking for orphaned jobs failed");
		jobs = CopyRescueCandidates(jobs);
	}
	if (leases)
	{
		/* every held job: the expired ones are abandoned, the others say when to look next */
		if (SPI_execute_plan(VqKeepCustomPlan(&lease_plan, RESCUE_CANDIDATES " AND worker_pid IS NULL", 0, NULL),
							 NULL, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: looking for expired leases failed");
		jobs = CopyRescueCandidates(jobs);
	}
	return jobs;
}

/*
 * Abandon RUNNING jobs nobody is running any more: their executor is not
 * alive (it was killed, or the server crashed or stopped), or, for jobs a
 * worker took, their lease expired without a reply. The server knows which
 * of its processes are alive, so no heartbeat is needed. The candidates are
 * read without locks and only the orphans are written, each only if its row
 * has not changed since (a live job's row is never locked here, so its own
 * executor never waits for the rescue). A job claimed on an earlier timeline
 * ran on the primary this server was promoted to replace: it is INTERRUPTED
 * (no attempt consumed), as an orderly stop would have left it; a job whose
 * executor died on this timeline (kill -9, a crash, an immediate stop) is
 * ABANDONED and costs an attempt (the poison-pill guard). Returns the number
 * of jobs rescued.
 *
 * The jobs run by executors are looked at when this process starts (after a
 * crash or a promotion), when an executor of the database has left its slot
 * since the last look, and every RESCUE_SWEEP_MS; taken jobs when leases is
 * true (when the first lease may have ended: one executor, see wake.h), the
 * earliest lease still running going to *next_lease: not at every call of
 * every executor, since the search walks every index entry of a RUNNING
 * version that vacuum has not removed yet, and a long-held snapshot keeps all
 * of them.
 */
int
VqRescueOrphans(VqRegistry *registry, TimestampTz now, bool leases, TimestampTz *next_lease)
{
	static uint64 exits_seen = PG_UINT64_MAX;
	static TimestampTz executors_looked_at = 0;
	uint64		exits = pg_atomic_read_u64(&VqMyDatabaseSlot->executor_exits);
	bool		executors = exits != exits_seen ||
		TimestampDifferenceExceeds(executors_looked_at, now, RESCUE_SWEEP_MS);
	TimeLineID	timeline = GetWALInsertionTimeLine();
	int			abandoned = 0;
	ListCell   *lc;

	if (executors)
	{
		exits_seen = exits;
		executors_looked_at = now;
	}
	foreach(lc, ReadRescueCandidates(now, executors, leases))
	{
		RunningJob *r = lfirst(lc);
		VqOutcome	outcome;

		if (!r->external && ExecutorAlive(r->worker_pid, r->worker_started_at))
			continue;
		if (r->external && r->lease_until >= now)
		{
			*next_lease = Min(*next_lease, r->lease_until);
			continue;
		}
		memset(&outcome, 0, sizeof(outcome));
		outcome.kind = VQ_OUTCOME_ABANDONED;
		if (r->external)
		{
			/* a worker stopped answering: like a timeout, but after the backoff (the worker may be what failed) */
			outcome.backoff = true;
			outcome.error = psprintf("lease expired at %s with no reply from the worker",
									 timestamptz_to_str(r->lease_until));
		}
		else if (r->worker_timeline > 0 && r->worker_timeline < (int32) timeline)
		{
			/* it ran on the primary this server replaced: a failover, not the job's doing */
			outcome.kind = VQ_OUTCOME_INTERRUPTED;
			outcome.error = psprintf("interrupted by a failover: executor process %d ran it on timeline %d, before this server's promotion (timeline %u); the attempt does not count",
									 r->worker_pid, r->worker_timeline, timeline);
		}
		else
			outcome.error = psprintf("executor process %d stopped while the job was running", r->worker_pid);
		if (VqPersistFailure(&r->job, &outcome, VqLookupQueue(registry, r->job.queue), now))
			abandoned++;
	}
	if (abandoned > 0)
		ereport(LOG, (errmsg("vq_job: abandoned %d RUNNING job(s): executor stopped, or a worker's lease expired",
							 abandoned)));
	return abandoned;
}

/*
 * Is any job of this database RUNNING in an executor? While none is, the
 * orphan rescue has nothing to look at until a job is claimed visibly or an
 * executor exits (executor.c); jobs workers hold are looked at when their
 * leases may end (wake.h). One probe of job_running_idx.
 */
bool
VqAnyJobRunning(void)
{
	static SPIPlanPtr plan = NULL;

	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "SELECT 1 FROM vq.job_active WHERE state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state"
							  " AND worker_pid IS NOT NULL LIMIT 1",
							  0, NULL),
						 NULL, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking for RUNNING jobs failed");
	return SPI_processed > 0;
}

/*
 * Persist the live progress of jobs running visibly (RUNNING rows) in any
 * executor of this database. Rows locked by their executor (inline jobs, or
 * one being finished) are skipped: their progress is written with the outcome.
 */
void
VqFlushProgress(void)
{
	Datum	   *ids = palloc(sizeof(Datum) * VQ_MAX_EXECUTORS);
	Datum	   *totals = palloc(sizeof(Datum) * VQ_MAX_EXECUTORS);
	Datum	   *succeeded = palloc(sizeof(Datum) * VQ_MAX_EXECUTORS);
	Datum	   *failed = palloc(sizeof(Datum) * VQ_MAX_EXECUTORS);
	pg_uuid_t  *uuids = palloc(sizeof(pg_uuid_t) * VQ_MAX_EXECUTORS);
	Datum		values[4];
	int			n = 0;

	LWLockAcquire(VqMyDatabaseSlot->lock, LW_SHARED);
	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqRunningJob job;

		if (VqMyDatabaseSlot->executors[i].pid == 0 || !VqReadRunningJob(&VqMyDatabaseSlot->executors[i], &job) ||
			(job.progress_total < 0 && job.progress_succeeded == 0 && job.progress_failed == 0))
			continue;
		memcpy(&uuids[n], &job.execution_id, sizeof(pg_uuid_t));
		ids[n] = UUIDPGetDatum(&uuids[n]);
		totals[n] = Int64GetDatum(Max(job.progress_total, 0));
		succeeded[n] = Int64GetDatum(job.progress_succeeded);
		failed[n] = Int64GetDatum(job.progress_failed);
		n++;
	}
	LWLockRelease(VqMyDatabaseSlot->lock);
	if (n == 0)
		return;

	values[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[1] = PointerGetDatum(construct_array(totals, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(succeeded, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	values[3] = PointerGetDatum(construct_array(failed, n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	Write(VqKeepCustomPlan(&progress_plan,
				   "UPDATE vq.job_active j SET progress_total = u.t, progress_succeeded = u.s, progress_failed = u.f"
				   " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
				   "                 pg_catalog.unnest($4)) AS u(e, t, s, f)"
				   " WHERE j.execution_id OPERATOR(pg_catalog.=) u.e"
				   " AND j.execution_id OPERATOR(pg_catalog.=) ANY (ARRAY("
				   "  SELECT r.execution_id FROM vq.job_active r"
				   "  WHERE r.execution_id OPERATOR(pg_catalog.=) ANY ($1)"
				   "  AND r.state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state"
				   "  FOR UPDATE SKIP LOCKED))",
				   4, (Oid[]) {UUIDARRAYOID, INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID}),
		  values, NULL);
}

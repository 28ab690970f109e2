/*
 * jobapi.c: what a running handler can do besides its own work, and what
 * other sessions see of running jobs.
 *
 *  - vq_log(level, message, fields): structured log lines. They are kept in
 *    the executor's memory while the handler runs and written after its
 *    subtransaction ends, in the transaction that records the outcome, so the
 *    lines of a failed or timed-out attempt are kept too.
 *  - vq_progress_set_total / vq_progress_add: progress counters in shared
 *    memory (visible live in vq.running_jobs) and written with the outcome.
 *  - vq_job_cancelled(): whether vq_cancel() asked this job to stop.
 *
 * vq_running_jobs() lists what every executor of this database is running
 * now; vq_cancel() cancels an enqueued job or asks a running one to stop.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "main/shmem.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "state/outcome.h"
#include "run/jobapi.h"
#include "run/joblog.h"
#include "run/livelog.h"
#include "run/notify.h"
#include "run/roles.h"

PG_FUNCTION_INFO_V1(vq_log);
PG_FUNCTION_INFO_V1(vq_progress_set_total);
PG_FUNCTION_INFO_V1(vq_progress_add);
PG_FUNCTION_INFO_V1(vq_job_cancelled);
PG_FUNCTION_INFO_V1(vq_running_jobs);
PG_FUNCTION_INFO_V1(vq_cancel);

static VqJob *current_job = NULL;
static MemoryContext log_context = NULL;
static List *log_entries = NIL;
static int64 log_dropped = 0;	/* lines over vq.log_max_lines in this attempt */
static Oid	job_context_type = InvalidOid;

/* This executor's count of runs: names each run for cancel requests (see VqJobApiBegin). */
static uint64 run_seq = 0;

/*
 * The executor starts writing its running job: readers that see an odd
 * count, or a count that moved while they copied, copy again. No error may
 * interrupt a write (a reader would spin forever), hence the critical section.
 */
static void
BeginJobWrite(VqExecutorSlot *e)
{
	START_CRIT_SECTION();
	((volatile VqExecutorSlot *) e)->changecount++;
	pg_write_barrier();
}

/* The executor is done writing its running job. */
static void
EndJobWrite(VqExecutorSlot *e)
{
	pg_write_barrier();
	((volatile VqExecutorSlot *) e)->changecount++;
	Assert((e->changecount & 1) == 0);
	END_CRIT_SECTION();
}

/* An executor takes its entry: it runs no job (caller holds the slot's lock; no reader copies it meanwhile). */
void
VqRunningJobReset(VqExecutorSlot *e)
{
	memset(&e->job, 0, sizeof(VqRunningJob));
}

/*
 * A job starts: publish it in shared memory, start an empty log. Runs are
 * numbered from the executor's start time in microseconds, so that no two
 * incarnations of an executor slot ever give two runs the same number (a
 * cancel request names one).
 */
void
VqJobApiBegin(VqJob *job)
{
	VqRunningJob *r = &VqMyExecutorSlot->job;

	if (log_context == NULL)
		log_context = AllocSetContextCreate(TopMemoryContext, "vq_job job logs", ALLOCSET_SMALL_SIZES);
	MemoryContextReset(log_context);
	log_entries = NIL;
	log_dropped = 0;
	current_job = job;
	if (run_seq == 0)
		run_seq = (uint64) VqMyExecutorSlot->started_at;

	BeginJobWrite(VqMyExecutorSlot);
	r->running = true;
	r->seq = ++run_seq;
	memcpy(&r->execution_id, &job->execution_id, sizeof(pg_uuid_t));
	strlcpy(r->handler, job->handler, sizeof(r->handler));
	r->attempt_number = job->attempt_number;
	r->enqueued_by = job->enqueued_by;
	r->started_at = GetCurrentTimestamp();
	r->progress_total = -1;
	r->progress_succeeded = 0;
	r->progress_failed = 0;
	EndJobWrite(VqMyExecutorSlot);
	VqLiveLogBegin(r->seq);
}

/* A job ends: take its progress into the outcome, unpublish it. */
void
VqJobApiEnd(VqOutcome *outcome)
{
	VqRunningJob *r = &VqMyExecutorSlot->job;

	outcome->has_progress = r->progress_total >= 0 || r->progress_succeeded > 0 || r->progress_failed > 0;
	outcome->progress_total = Max(r->progress_total, 0);
	outcome->progress_succeeded = r->progress_succeeded;
	outcome->progress_failed = r->progress_failed;
	BeginJobWrite(VqMyExecutorSlot);
	r->running = false;
	EndJobWrite(VqMyExecutorSlot);
	current_job = NULL;
}

VqJob *
VqCurrentJob(void)
{
	return current_job;
}

/* The OID of type vq.job_context (looked up once). */
static Oid
JobContextType(void)
{
	if (!OidIsValid(job_context_type))
		job_context_type = DatumGetObjectId(DirectFunctionCall1(regtypein,
																CStringGetDatum("vq.job_context")));
	return job_context_type;
}

/*
 * The vq.job_context value a two-argument handler (and an interceptor)
 * receives: built once per job, in the job's own memory context.
 */
Datum
VqJobContextDatum(VqJob *job)
{
	TupleDesc	desc;
	Datum		values[9];
	bool		nulls[9] = {false, false, false, false, false, false, false, false, false};
	HeapTuple	tup;
	MemoryContext old;

	if (job->context != (Datum) 0)
		return job->context;
	old = MemoryContextSwitchTo(GetMemoryChunkContext(job));
	desc = lookup_rowtype_tupdesc(JobContextType(), -1);

	values[0] = UUIDPGetDatum(&job->execution_id);
	values[1] = CStringGetTextDatum(job->job_id);
	values[2] = CStringGetTextDatum(job->handler);
	values[3] = CStringGetTextDatum(job->queue);
	values[4] = Int32GetDatum(job->priority);
	values[5] = Int32GetDatum(job->attempt_number);
	values[6] = Int32GetDatum(job->max_attempts);
	values[7] = TimestampTzGetDatum(job->scheduled_at);
	values[8] = JsonbPGetDatum(job->metadata);
	tup = heap_form_tuple(desc, values, nulls);
	ReleaseTupleDesc(desc);
	job->context = HeapTupleGetDatum(tup);
	MemoryContextSwitchTo(old);
	return job->context;
}

/*
 * Write the job's log lines that no other executor saved while it ran (in the
 * caller's transaction, connected to SPI), and a last line counting those
 * over vq.log_max_lines.
 */
void
VqFlushJobLogs(VqJob *job)
{
	int			saved = VqLiveLogClose();

	/* no run began in this process (its first job ended before its handler was called) */
	if (log_context == NULL)
		return;

	if (log_dropped > 0)
	{
		MemoryContext old = MemoryContextSwitchTo(log_context);
		VqLogEntry *e = palloc(sizeof(VqLogEntry));

		e->level = "WARN";
		e->message = psprintf(INT64_FORMAT " more log line(s) dropped: an attempt keeps at most %d (vq.log_max_lines)",
							  log_dropped, vq_log_max_lines);
		e->fields = NULL;
		e->at = GetCurrentTimestamp();
		log_entries = lappend(log_entries, e);
		log_dropped = 0;
		MemoryContextSwitchTo(old);
	}
	if (saved < list_length(log_entries))
		VqWriteLogEntries(&job->execution_id, job->attempt_number, list_copy_tail(log_entries, saved));
	MemoryContextReset(log_context);
	log_entries = NIL;
}

/* Error unless called from a handler that an executor is running now. */
static void
RequireJob(const char *function)
{
	if (current_job == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_NOT_IN_JOB),
				 errmsg("%s can only be called by a vq_job handler while it runs", function)));
}

/* vq_log(level, message, fields DEFAULT NULL) */
Datum
vq_log(PG_FUNCTION_ARGS)
{
	const char *level;
	MemoryContext old;
	VqLogEntry   *e;

	RequireJob("vq_log()");
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("vq_log() needs a level and a message")));
	level = VqLogLevel(text_to_cstring(PG_GETARG_TEXT_PP(0)));

	if (list_length(log_entries) >= vq_log_max_lines)
	{
		log_dropped++;			/* reported in one line when the logs are written */
		PG_RETURN_VOID();
	}
	old = MemoryContextSwitchTo(log_context);
	e = palloc(sizeof(VqLogEntry));
	e->level = level;
	e->fields = PG_ARGISNULL(2) ? NULL : DatumGetJsonbPCopy(PG_GETARG_DATUM(2));
	e->message = VqLogMessage(PG_GETARG_TEXT_PP(1), &e->fields);
	e->at = GetCurrentTimestamp();
	log_entries = lappend(log_entries, e);
	MemoryContextSwitchTo(old);
	/* offered at once to be saved while the handler runs (livelog.c: no lock) */
	VqLiveLogPublish(log_entries);
	PG_RETURN_VOID();
}

/* vq_progress_set_total(total) */
Datum
vq_progress_set_total(PG_FUNCTION_ARGS)
{
	RequireJob("vq_progress_set_total()");
	if (PG_ARGISNULL(0) || PG_GETARG_INT64(0) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("progress total must be zero or more")));
	BeginJobWrite(VqMyExecutorSlot);
	VqMyExecutorSlot->job.progress_total = PG_GETARG_INT64(0);
	EndJobWrite(VqMyExecutorSlot);
	PG_RETURN_VOID();
}

/* vq_progress_add(succeeded DEFAULT 1, failed DEFAULT 0) */
Datum
vq_progress_add(PG_FUNCTION_ARGS)
{
	int64		succeeded = PG_ARGISNULL(0) ? 0 : PG_GETARG_INT64(0);
	int64		failed = PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1);

	RequireJob("vq_progress_add()");
	if (succeeded < 0 || failed < 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("progress counts must be zero or more")));
	BeginJobWrite(VqMyExecutorSlot);
	VqMyExecutorSlot->job.progress_succeeded += succeeded;
	VqMyExecutorSlot->job.progress_failed += failed;
	EndJobWrite(VqMyExecutorSlot);
	PG_RETURN_VOID();
}

/* Has vq_cancel asked the job this executor runs now to stop? */
bool
VqJobCancelRequested(void)
{
	return pg_atomic_read_u64(&VqMyDatabaseSlot->cancel_seq[VqMyExecutorIndex]) == VqMyExecutorSlot->job.seq;
}

/* vq_job_cancelled(): has vq_cancel() asked the running job to stop? */
Datum
vq_job_cancelled(PG_FUNCTION_ARGS)
{
	RequireJob("vq_job_cancelled()");
	PG_RETURN_BOOL(VqJobCancelRequested());
}

/* One executor's running job as vq_running_jobs copied it out of shared memory. */
typedef struct VqRunningCopy
{
	int			pid;
	bool		cancel_requested;
	VqRunningJob job;
} VqRunningCopy;

/* What CopyRunningJobs fills: one entry per executor running a job. */
typedef struct VqRunningCopies
{
	int			n;
	VqRunningCopy entries[VQ_MAX_EXECUTORS];
} VqRunningCopies;

/*
 * Copy every running job of the slot (under its lock, held shared): fixed-size
 * copies only, no allocation, no catalog access, nothing that can wait or fail,
 * so that a caller of vq.running_jobs_now() never holds up a claim.
 */
static void
CopyRunningJobs(VqDatabaseSlot *slot, void *arg)
{
	VqRunningCopies *copies = arg;

	for (int i = 0; i < VQ_MAX_EXECUTORS; i++)
	{
		VqExecutorSlot *e = &slot->executors[i];
		VqRunningCopy *c = &copies->entries[copies->n];

		c->pid = e->pid;
		if (c->pid == 0 || !VqReadRunningJob(e, &c->job))
			continue;
		c->cancel_requested = pg_atomic_read_u64(&slot->cancel_seq[i]) == c->job.seq;
		copies->n++;
	}
}

/*
 * vq_running_jobs(): one row per job an executor of this database is running
 * and the caller may see (a member of the enqueuing role, as vq.job's row
 * security has it): (pid, execution_id, handler, attempt_number, started_at,
 * progress_total, progress_succeeded, progress_failed, cancel_requested).
 * The jobs are copied out under the slot's lock; the privilege checks (which
 * may read the catalogs and wait for their locks) and the result come after.
 */
Datum
vq_running_jobs(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Tuplestorestate *store = VqMaterializeResult(fcinfo, &desc);
	VqRunningCopies *copies = palloc(sizeof(VqRunningCopies));

	copies->n = 0;
	(void) VqWithDatabaseSlot(MyDatabaseId, LW_SHARED, CopyRunningJobs, copies);
	for (int i = 0; i < copies->n; i++)
	{
		VqRunningCopy *c = &copies->entries[i];
		Datum		values[9];
		bool		nulls[9] = {false, false, false, false, false, false, false, false, false};

		CHECK_FOR_INTERRUPTS();
		/* only jobs the caller may see in vq.job (members of the enqueuing role) */
		if (!has_privs_of_role(GetUserId(), c->job.enqueued_by))
			continue;
		values[0] = Int32GetDatum(c->pid);
		values[1] = UUIDPGetDatum(&c->job.execution_id);
		values[2] = CStringGetTextDatum(c->job.handler);
		values[3] = Int32GetDatum(c->job.attempt_number);
		values[4] = TimestampTzGetDatum(c->job.started_at);
		values[5] = Int64GetDatum(c->job.progress_total);
		nulls[5] = c->job.progress_total < 0;
		values[6] = Int64GetDatum(c->job.progress_succeeded);
		values[7] = Int64GetDatum(c->job.progress_failed);
		values[8] = BoolGetDatum(c->cancel_requested);
		tuplestore_putvalues(store, desc, values, nulls);
	}
	pfree(copies);
	return (Datum) 0;
}

/* Ask the executor running this job (if any) to let it know it was cancelled. */
static bool
FlagRunningJob(pg_uuid_t *execution_id)
{
	VqDatabaseSlot *slot;
	bool		found = false;

	LWLockAcquire(VqShared->lock, LW_SHARED);
	slot = VqFindDatabaseSlot(MyDatabaseId);
	if (slot != NULL)
		LWLockAcquire(slot->lock, LW_SHARED);
	for (int i = 0; slot != NULL && i < VQ_MAX_EXECUTORS; i++)
	{
		VqRunningJob job;

		if (slot->executors[i].pid != 0 && VqReadRunningJob(&slot->executors[i], &job) &&
			memcmp(&job.execution_id, execution_id, sizeof(pg_uuid_t)) == 0)
		{
			pg_atomic_write_u64(&slot->cancel_seq[i], job.seq);
			found = true;
		}
	}
	if (slot != NULL)
		LWLockRelease(slot->lock);
	LWLockRelease(VqShared->lock);
	return found;
}

#define CANCEL_LOOKUP_SQL \
	"SELECT enqueued_by::pg_catalog.oid::pg_catalog.text, state::pg_catalog.text FROM vq.job" \
	" WHERE execution_id OPERATOR(pg_catalog.=) $1"
#define CANCEL_REQUEST_SQL \
	"UPDATE vq.job_active SET cancel_requested = true" \
	" WHERE execution_id OPERATOR(pg_catalog.=) $1" \
	" AND state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state" \
	" RETURNING handler, worker_pid IS NULL"

/* Run one of vq_cancel's statements (as the extension owner); returns the first column of its first row. */
static char *
CancelStep(SPIPlanPtr *plan, const char *sql, Datum arg, int expected)
{
	if (SPI_execute_plan(VqKeepPlan(plan, sql, 1, (Oid[]) {UUIDOID}), &arg, NULL, false, 0) != expected)
		elog(ERROR, "vq_job: vq_cancel failed");
	if (SPI_processed == 0 || SPI_tuptable == NULL)
		return NULL;
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}

/*
 * Ask a RUNNING job to stop (its row's cancel_requested); a worker outside the
 * server that holds it is told on its handler's channel at commit.
 */
static void
RequestCancel(VqRegistry *registry, pg_uuid_t *id)
{
	static SPIPlanPtr request_plan = NULL;
	char	   *handler = CancelStep(&request_plan, CANCEL_REQUEST_SQL, UUIDPGetDatum(id), SPI_OK_UPDATE_RETURNING);
	bool		isnull;
	VqHandler  *h;

	if (handler == NULL || !DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull)))
		return;
	h = VqLookupHandler(registry, handler);
	if (h != NULL && !h->is_function)
		VqNotifyCancel(h->channel, id);
}

/*
 * vq_cancel(execution_id): an ENQUEUED job becomes CANCELLED (one CANCELLED
 * transition); a running one is asked to stop (vq_job_cancelled() turns true
 * in its handler, and a RUNNING row gets cancel_requested); it ends CANCELLED
 * when its handler returns or raises (dispatch.c), never retried. Returns the job's
 * state after the call ('CANCEL_REQUESTED' for a running job), or NULL when
 * the caller cannot see such a job: only members of the enqueuing role may
 * cancel it.
 */
Datum
vq_cancel(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr lookup_plan = NULL;
	static SPIPlanPtr cancel_plan = NULL;
	pg_uuid_t  *id = PG_GETARG_UUID_P(0);
	Datum		arg = UUIDPGetDatum(id);
	Oid			caller = GetUserId();
	VqRegistry *registry = VqRegistryGet();
	VqSavedUser saved;
	char	   *owner;
	char	   *state = NULL;

	VqRequireWritable("vq_cancel");
	VqConnectAsOwner(registry->owner, &saved);

	owner = CancelStep(&lookup_plan, CANCEL_LOOKUP_SQL, arg, SPI_OK_SELECT);
	if (owner != NULL && has_privs_of_role(caller, (Oid) strtoul(owner, NULL, 10)))
	{
		state = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		if (FlagRunningJob(id))
		{
			/* running now (inline, its row still ENQUEUED and locked; or claimed visibly) */
			RequestCancel(registry, id);
			state = "CANCEL_REQUESTED";
		}
		else if (strcmp(state, "ENQUEUED") == 0)
		{
			/* may wait for an executor that claimed it meanwhile; then it has finished or is RUNNING */
			char	   *cancelled = CancelStep(&cancel_plan,
											   "WITH j AS (DELETE FROM vq.job_active"
											   "  WHERE execution_id OPERATOR(pg_catalog.=) $1"
											   "  AND state OPERATOR(pg_catalog.=) 'ENQUEUED'::vq.job_state"
											   "  RETURNING *),"
											   " f AS (INSERT INTO vq.job_finished SELECT"
											   VQ_FINISHED_ROW("'CANCELLED'::vq.job_state", "pg_catalog.now()", "started_at",
															   "pg_catalog.now()", "last_error", "progress_total",
															   "progress_succeeded", "progress_failed")
											   "  FROM j),"
											   " t AS (INSERT INTO vq.job_transition_data"
											   "  (execution_id, attempt_number, kind, from_state, to_state)"
											   "  SELECT execution_id, attempt_number, 'CANCELLED', 'ENQUEUED', 'CANCELLED' FROM j"
											   "  RETURNING 1)"
											   " SELECT 'CANCELLED' FROM t", arg, SPI_OK_SELECT);

			if (cancelled != NULL)
				state = "CANCELLED";
			else
			{
				state = CancelStep(&lookup_plan, CANCEL_LOOKUP_SQL, arg, SPI_OK_SELECT)
					? SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2) : NULL;
				if (state != NULL && strcmp(state, "RUNNING") == 0)
				{
					(void) FlagRunningJob(id);
					RequestCancel(registry, id);
					state = "CANCEL_REQUESTED";
				}
			}
		}
		else if (strcmp(state, "RUNNING") == 0)
		{
			/* a job a worker holds, or claimed by an executor that has not published it yet */
			RequestCancel(registry, id);
			state = "CANCEL_REQUESTED";
		}
	}
	if (state != NULL)
		state = MemoryContextStrdup(CurTransactionContext, state);
	VqFinishAsOwner(&saved);
	if (state == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(cstring_to_text(state));
}

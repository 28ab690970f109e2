/*
 * consumer.c: what external consumers of NOTIFY handlers call.
 *
 * A NOTIFY handler's job is committed as RUNNING with no executor and
 * announced on the handler's channel (notify.c). The consumer replies with
 * vq_complete() or vq_fail(); the reply goes through the same state machine as
 * a function handler's outcome (outcome.c). NOTIFY is only a wake-up: a
 * consumer catches up with vq_pull(), which claims due jobs of its handler,
 * and reads a payload too large for the notification with vq_job_payload().
 *
 * Who may act on a job: members of the role that enqueued it, and, for a
 * NOTIFY handler's job, members of a role granted with vq_grant_consumer()
 * for its handler (grants go with the handler's registration). Anyone else gets
 * the same answer as for a job that does not exist, so ids cannot be probed.
 * These functions write as the extension owner after that check.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "main/job.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "claim/inflight.h"
#include "claim/pullpos.h"
#include "state/outcome.h"
#include "state/wakeup.h"
#include "run/interceptors.h"
#include "run/roles.h"

PG_FUNCTION_INFO_V1(vq_complete);
PG_FUNCTION_INFO_V1(vq_fail);
PG_FUNCTION_INFO_V1(vq_pull);
PG_FUNCTION_INFO_V1(vq_take);
PG_FUNCTION_INFO_V1(vq_job_payload);

static SPIPlanPtr job_plan = NULL;
static SPIPlanPtr grant_plan = NULL;

/*
 * May the role in parameter n act on job j: a member of its enqueuing role,
 * or, for a NOTIFY handler's job only, of a role granted for its handler (a
 * function handler's job is nobody's to consume, whatever the grants of a
 * NOTIFY handler once registered under its name).
 */
#define MAY_CONSUME(n) \
	" (pg_catalog.pg_has_role(" n ", j.enqueued_by, 'USAGE')" \
	"  OR (j.handler_function IS NULL AND EXISTS (SELECT FROM vq.consumer_grant g" \
	"      WHERE g.handler OPERATOR(pg_catalog.=) j.handler" \
	"      AND pg_catalog.pg_has_role(" n ", g.grantee, 'USAGE'))))"

/* Is the caller a consumer granted for this handler? */
static bool
GrantedConsumer(Oid caller, const char *handler)
{
	Datum		arg = CStringGetTextDatum(handler);

	if (SPI_execute_plan(VqKeepPlan(&grant_plan,
							  "SELECT grantee FROM vq.consumer_grant WHERE handler OPERATOR(pg_catalog.=) $1",
							  1, (Oid[]) {TEXTOID}),
						 &arg, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: reading consumer grants failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Oid			grantee = DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));

		if (has_privs_of_role(caller, grantee))
			return true;
	}
	return false;
}

/*
 * Load a job the caller may act on, locking its row; NULL when there is no
 * such job or the caller may not see it (the two are not told apart).
 */
static VqJob *
LoadJobForConsumer(pg_uuid_t *id, Oid caller, char **state, bool *external, bool *cancel_requested)
{
	Datum		args[2] = {UUIDPGetDatum(id), ObjectIdGetDatum(caller)};
	HeapTuple	tup;
	TupleDesc	desc;
	VqJob	   *job;
	bool		isnull;

	/*
	 * Only a row the caller may act on is locked: anyone else can neither
	 * wait on nor hold the lock of another role's job. A job that ended while
	 * we waited for its row lock has moved from vq.job_active to
	 * vq.job_finished, which this statement's snapshot did not show yet: one
	 * more statement (a new snapshot) finds it there.
	 */
	for (int tries = 0; tries < 2; tries++)
	{
		if (SPI_execute_plan(VqKeepPlan(&job_plan,
								  "SELECT execution_id, job_id, handler, handler_address, queue, attempt_number,"
								  " max_attempts, enqueued_by, state::pg_catalog.text, worker_pid IS NULL,"
								  " priority, scheduled_at, cancel_requested, metadata, handler_function IS NULL"
								  " FROM vq.job j WHERE j.execution_id OPERATOR(pg_catalog.=) $1"
								  " AND" MAY_CONSUME("$2")
								  " FOR UPDATE OF j",
								  2, (Oid[]) {UUIDOID, OIDOID}),
							 args, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "vq_job: reading the job failed");
		if (SPI_processed == 1)
			break;
	}
	if (SPI_processed != 1)
		return NULL;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	job = palloc0(sizeof(VqJob));
	memcpy(&job->execution_id, id, sizeof(pg_uuid_t));
	job->job_id = SPI_getvalue(tup, desc, 2);
	job->handler = SPI_getvalue(tup, desc, 3);
	job->address = SPI_getvalue(tup, desc, 4);
	job->queue = SPI_getvalue(tup, desc, 5);
	job->attempt_number = DatumGetInt32(SPI_getbinval(tup, desc, 6, &isnull));
	job->max_attempts = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
	job->enqueued_by = DatumGetObjectId(SPI_getbinval(tup, desc, 8, &isnull));
	*state = SPI_getvalue(tup, desc, 9);
	*external = DatumGetBool(SPI_getbinval(tup, desc, 10, &isnull));
	job->priority = DatumGetInt32(SPI_getbinval(tup, desc, 11, &isnull));
	job->scheduled_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 12, &isnull));
	*cancel_requested = DatumGetBool(SPI_getbinval(tup, desc, 13, &isnull));
	job->metadata = DatumGetJsonbPCopy(SPI_getbinval(tup, desc, 14, &isnull));
	job->running = true;

	if (!has_privs_of_role(caller, job->enqueued_by) &&
		!(DatumGetBool(SPI_getbinval(tup, desc, 15, &isnull)) && GrantedConsumer(caller, job->handler)))
		return NULL;
	return job;
}

/* Record a consumer's reply: complete (error == NULL) or fail. Returns whether it was accepted. */
static bool
Reply(FunctionCallInfo fcinfo, const char *error, int attempt_arg)
{
	pg_uuid_t  *id;
	Oid			caller = GetUserId();
	VqRegistry *registry = VqRegistryGet();
	VqSavedUser saved;
	VqJob	   *job;
	char	   *state = NULL;
	bool		external = false;
	bool		cancel_requested = false;
	bool		accepted = false;
	char	   *ignored = NULL;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("execution_id must not be null")));
	id = PG_GETARG_UUID_P(0);

	VqConnectAsOwner(registry->owner, &saved);
	job = LoadJobForConsumer(id, caller, &state, &external, &cancel_requested);
	if (job == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_NO_SUCH_JOB),
				 errmsg("no job %s that you may reply to",
						DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id))))));

	if (strcmp(state, "RUNNING") != 0)
		ignored = psprintf("the job is %s", state);
	else if (!external)
		ignored = pstrdup("the job is run by a background worker, not by an external consumer");
	else if (!PG_ARGISNULL(attempt_arg) && PG_GETARG_INT32(attempt_arg) != job->attempt_number)
		ignored = psprintf("it answers attempt %d, but the job is at attempt %d (attempt %d timed out or was abandoned)",
						   PG_GETARG_INT32(attempt_arg), job->attempt_number, PG_GETARG_INT32(attempt_arg));
	else
	{
		VqOutcome	outcome;

		memset(&outcome, 0, sizeof(outcome));
		/* vq_cancel asked it to stop (vq_take / vq_pull told the consumer): CANCELLED, as in an executor */
		outcome.kind = cancel_requested ? VQ_OUTCOME_CANCELLED : error ? VQ_OUTCOME_FAILED : VQ_OUTCOME_COMPLETED;
		outcome.error = !cancel_requested ? (char *) error : error == NULL ? "cancelled while running"
			: psprintf("cancelled while running: %s", error);
		VqInterceptComplete(job, &outcome);
		if (outcome.kind == VQ_OUTCOME_CANCELLED)
			VqPersistCancelled(job, &outcome, GetCurrentTimestamp());
		else if (outcome.kind == VQ_OUTCOME_COMPLETED)
			VqPersistCompleted(list_make1(job), list_make1(&outcome), GetCurrentTimestamp());
		else					/* (registry again: an interceptor may have changed it) */
			VqPersistFailure(job, &outcome, VqLookupQueue(VqRegistryGet(), job->queue), GetCurrentTimestamp());
		accepted = true;
		/* the reply frees the queue's capacity: let the executors announce the next job at commit */
		VqNotifyJobEnding(job->queue);
		VqWakeAtCommit(GetCurrentTimestamp());
	}
	/* (ignored lives in SPI memory: report it before SPI_finish frees it) */
	if (ignored != NULL)
		ereport(WARNING,
				(errcode(ERRCODE_VQ_REPLY_IGNORED),
				 errmsg("reply ignored: %s", ignored),
				 errdetail("The reply was for job %s.",
						   DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(id))))));
	VqFinishAsOwner(&saved);
	return accepted;
}

/* vq_complete(execution_id, attempt DEFAULT NULL) */
Datum
vq_complete(PG_FUNCTION_ARGS)
{
	VqRequireWritable("vq_complete");
	PG_RETURN_BOOL(Reply(fcinfo, NULL, 1));
}

/* vq_fail(execution_id, error, attempt DEFAULT NULL) */
Datum
vq_fail(PG_FUNCTION_ARGS)
{
	const char *error;

	VqRequireWritable("vq_fail");
	/* (cut as it will be stored, so that interceptors see what the job records) */
	error = PG_ARGISNULL(1) ? "failed (no error text given)" : VqCapText(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_BOOL(Reply(fcinfo, error, 2));
}

/*
 * Take up to max_jobs announced jobs of a handler after the key from, in pull
 * order; SPI_tuptable holds them, in that order (pulled's columns, then
 * priority).
 */
static uint64
TakeWaitingJobs(VqHandler *handler, int32 max_jobs, Oid caller, bool granted, const VqPullKey *from)
{
	static SPIPlanPtr pull_plan = NULL;
	Datum		values[7];
	int			index_scans;

	values[0] = handler->name_datum;
	values[1] = Int32GetDatum(max_jobs);
	values[2] = ObjectIdGetDatum(caller);
	values[3] = BoolGetDatum(granted);
	VqPullKeyDatums(from, &values[4]);
	/*
	 * The jobs by id (= ANY), not a join: a plan made while a held snapshot
	 * skews the statistics could otherwise join through another index of
	 * vq.job_active and walk it once per job. Index scans only (spi_util.h):
	 * job_pull_idx is the one that gives the order.
	 */
	index_scans = VqIndexScansBegin();
	if (SPI_execute_plan(VqKeepGenericPlan(&pull_plan,
							  "WITH claimed AS ("
							  " UPDATE vq.job_active j SET consumer_claimed_at = pg_catalog.clock_timestamp(),"
							  "  updated_at = pg_catalog.clock_timestamp()"
							  " WHERE j.execution_id OPERATOR(pg_catalog.=) ANY (ARRAY("
							  "  SELECT execution_id FROM vq.job_active"
							  "  WHERE handler OPERATOR(pg_catalog.=) $1 AND" VQ_WAITING_FOR_CONSUMER
							  "  AND " VQ_PULL_KEY " OPERATOR(pg_catalog.>) ROW($5, $6, $7)"
							  "  AND (($4 AND handler_function IS NULL) OR pg_catalog.pg_has_role($3, enqueued_by, 'USAGE'))"
							  "  ORDER BY OPERATOR(pg_catalog.-) (priority::pg_catalog.int8), scheduled_at, execution_id"
							  "  LIMIT $2 FOR UPDATE SKIP LOCKED))"
							  " RETURNING j.execution_id, j.job_id, j.handler, j.attempt_number, j.payload,"
							  "  j.metadata, j.scheduled_at, j.cancel_requested, j.priority)"
							  " SELECT execution_id, job_id, handler, attempt_number, payload, metadata, scheduled_at,"
							  "  cancel_requested, priority"
							  " FROM claimed ORDER BY priority DESC, scheduled_at, execution_id",
							  7, (Oid[]) {TEXTOID, INT4OID, OIDOID, BOOLOID, INT8OID, TIMESTAMPTZOID, UUIDOID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: vq_pull failed");
	VqIndexScansEnd(index_scans);
	return SPI_processed;
}

/* Rows NoteHowFarTaken looks at, at most: past them, it moves the position no further. */
#define LEFT_BEHIND_LOOK 200

/*
 * The first job a pull left behind, in a fresh look between from and upto:
 * announced, not taken, and held by no other pull in flight. False if none.
 */
static bool
FirstLeftBehind(VqHandler *handler, const VqPullKey *from, const VqPullKey *upto, VqPullKey *left)
{
	static SPIPlanPtr left_plan = NULL;
	Datum		values[7];
	int			index_scans;

	values[0] = handler->name_datum;
	VqPullKeyDatums(from, &values[1]);
	VqPullKeyDatums(upto, &values[4]);
	index_scans = VqIndexScansBegin();	/* (job_pull_idx: see TakeWaitingJobs) */
	if (SPI_execute_plan(VqKeepGenericPlan(&left_plan,
							  "SELECT priority, scheduled_at, execution_id, xmax FROM vq.job_active"
							  " WHERE handler OPERATOR(pg_catalog.=) $1 AND" VQ_WAITING_FOR_CONSUMER
							  " AND " VQ_PULL_KEY " OPERATOR(pg_catalog.>) ROW($2, $3, $4)"
							  " AND " VQ_PULL_KEY " OPERATOR(pg_catalog.<=) ROW($5, $6, $7)"
							  " ORDER BY OPERATOR(pg_catalog.-) (priority::pg_catalog.int8), scheduled_at, execution_id"
							  " LIMIT " CppAsString2(LEFT_BEHIND_LOOK),
							  7, (Oid[]) {TEXTOID, INT8OID, TIMESTAMPTZOID, UUIDOID, INT8OID, TIMESTAMPTZOID, UUIDOID}),
						 values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: looking behind a pull failed");
	VqIndexScansEnd(index_scans);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		bool		isnull;
		/* (a row another pull updated shows that pull's xid; a multixact only when several locked it) */
		TransactionId xmax = DatumGetTransactionId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 4, &isnull));

		*left = VqRowPullKey(tup, SPI_tuptable->tupdesc, 1, 2, 3);
		if (i == LEFT_BEHIND_LOOK - 1 || !VqPullHeldByAnother(handler->name, xmax))
			return true;
	}
	return false;
}

/*
 * After a pull took jobs (in pull order, in taken): note the first, and how
 * far the handler's position may move when this transaction commits: up to
 * the last job taken, or just before a job it left behind (one a transaction
 * other than a pull holds, or that the caller's role may not take).
 */
static void
NoteHowFarTaken(VqHandler *handler, const VqPullKey *from, SPITupleTable *taken)
{
	VqPullKey	first = VqRowPullKey(taken->vals[0], taken->tupdesc, 9, 7, 1);
	VqPullKey	last = VqRowPullKey(taken->vals[taken->numvals - 1], taken->tupdesc, 9, 7, 1);
	VqPullKey	left;

	VqPullTaken(&first);
	VqPullMayMoveTo(&last, FirstLeftBehind(handler, from, &last, &left) ? &left : NULL);
}

/*
 * After vq_take took a job: a take is a pull of one job, and moves the
 * position of its handler as a pull does (consumers that take the jobs
 * their notifications name then keep it close behind the announcements).
 */
static void
NoteTake(VqRegistry *registry, SPITupleTable *taken)
{
	char	   *handler_name = SPI_getvalue(taken->vals[0], taken->tupdesc, 3);
	VqHandler  *handler = VqLookupHandler(registry, handler_name);
	VqPullKey	key = VqRowPullKey(taken->vals[0], taken->tupdesc, 9, 7, 1);
	VqPullKey	from;
	VqPullKey	left;

	if (handler == NULL)
		return;
	(void) VqPullBegin(handler_name, &from);
	if (!VqPullMayMove())
		return;
	VqPullTaken(&key);
	if (VqComparePullKeys(&key, &from) > 0)
		VqPullMayMoveTo(&key, FirstLeftBehind(handler, &from, &key, &left) ? &left : NULL);
}

/*
 * vq_pull(handler, max_jobs): take up to max_jobs jobs of a NOTIFY handler
 * that the executors announced and no consumer has taken yet, and return
 * them. A notification only announces a job; taking it is this claim, so two
 * consumers never both get it, and jobs announced while no consumer listened
 * are still found. The executors announce only due jobs of unpaused queues,
 * within the queue's capacity, so pulling respects both. A granted consumer
 * gets any job of the handler; anyone else only the jobs of roles it is a
 * member of.
 */
Datum
vq_pull(PG_FUNCTION_ARGS)
{
	Oid			caller = GetUserId();
	VqRegistry *registry = VqRegistryGet();
	VqHandler  *handler;
	char	   *handler_name;
	int32		max_jobs;
	VqSavedUser saved;
	TupleDesc	desc;
	Tuplestorestate *store;
	VqPullKey	from;
	uint64		taken;

	VqRequireWritable("vq_pull");
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("handler name must not be null")));
	handler_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	max_jobs = PG_ARGISNULL(1) ? 1 : PG_GETARG_INT32(1);
	if (max_jobs < 1 || max_jobs > 10000)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("max_jobs must be between 1 and 10000, got %d", max_jobs)));
	if (!vq_valid_name(handler_name, strlen(handler_name)))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("invalid handler name \"%s\"", handler_name)));
	handler = VqLookupHandler(registry, handler_name);
	if (handler == NULL)
		VqReportUnregisteredHandler(registry, handler_name);
	if (handler->is_function)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("handler \"%s\" is a function handler: its jobs are run by the background workers",
						handler_name)));

	store = VqMaterializeResult(fcinfo, &desc);

	VqConnectAsOwner(registry->owner, &saved);
	(void) VqPullBegin(handler_name, &from);
	taken = TakeWaitingJobs(handler, max_jobs, caller, GrantedConsumer(caller, handler_name), &from);

	for (uint64 i = 0; i < taken; i++)
	{
		Datum		row[9];			/* (the ninth, priority, is not returned) */
		bool		nulls[9];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, row, nulls);
		tuplestore_putvalues(store, desc, row, nulls);
	}
	if (taken > 0 && VqPullMayMove())
		NoteHowFarTaken(handler, &from, SPI_tuptable);
	VqFinishAsOwner(&saved);
	return (Datum) 0;
}

/*
 * vq_take(execution_id, attempt, handler): take one announced job, the one a
 * notification named, and return it (no row: another consumer took it, it
 * was answered or timed out, the attempt or the handler (when given) differs,
 * or the caller may not consume it; these are not told apart). The same claim as vq_pull's, by
 * primary key: a consumer woken by a notification takes exactly that job
 * without scanning the handler's jobs. Two consumers taking one job
 * serialize on its row, and the second sees it taken.
 */
Datum
vq_take(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr take_plan = NULL;
	Oid			caller = GetUserId();
	VqRegistry *registry;
	VqSavedUser saved;
	TupleDesc	desc;
	Tuplestorestate *store;
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};

	VqRequireWritable("vq_take");
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("execution_id must not be null")));
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_ARGISNULL(1) ? (Datum) 0 : PG_GETARG_DATUM(1);
	nulls[1] = PG_ARGISNULL(1) ? 'n' : ' ';
	values[2] = ObjectIdGetDatum(caller);
	values[3] = PG_ARGISNULL(2) ? (Datum) 0 : PG_GETARG_DATUM(2);
	nulls[3] = PG_ARGISNULL(2) ? 'n' : ' ';

	store = VqMaterializeResult(fcinfo, &desc);
	registry = VqRegistryGet();
	VqConnectAsOwner(registry->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&take_plan,
							  "UPDATE vq.job_active j SET consumer_claimed_at = pg_catalog.clock_timestamp(),"
							  "  updated_at = pg_catalog.clock_timestamp()"
							  " WHERE j.execution_id OPERATOR(pg_catalog.=) $1"
							  " AND j.state OPERATOR(pg_catalog.=) 'RUNNING'::vq.job_state"
							  " AND j.worker_pid IS NULL AND j.consumer_claimed_at IS NULL"
							  " AND ($2 IS NULL OR j.attempt_number OPERATOR(pg_catalog.=) $2)"
							  " AND ($4::pg_catalog.text IS NULL OR j.handler OPERATOR(pg_catalog.=) $4)"
							  " AND" MAY_CONSUME("$3")
							  " RETURNING j.execution_id, j.job_id, j.handler, j.attempt_number, j.payload,"
							  "  j.metadata, j.scheduled_at, j.cancel_requested, j.priority",
							  4, (Oid[]) {UUIDOID, INT4OID, OIDOID, TEXTOID}),
						 values, nulls, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "vq_job: vq_take failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		row[9];			/* (the ninth, priority, is not returned) */
		bool		rnulls[9];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, row, rnulls);
		tuplestore_putvalues(store, desc, row, rnulls);
	}
	if (SPI_processed == 1)
		NoteTake(registry, SPI_tuptable);
	VqFinishAsOwner(&saved);
	return (Datum) 0;
}

/* vq_job_payload(execution_id): the payload of a job the caller may consume (MAY_CONSUME), else NULL. */
Datum
vq_job_payload(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr payload_plan = NULL;
	pg_uuid_t  *id = PG_GETARG_UUID_P(0);
	Oid			caller = GetUserId();
	VqRegistry *registry = VqRegistryGet();
	VqSavedUser saved;
	Datum		arg = UUIDPGetDatum(id);
	Datum		result = (Datum) 0;
	bool		isnull = true;

	VqConnectAsOwner(registry->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&payload_plan,
							  "SELECT payload, enqueued_by, handler, handler_function IS NULL FROM vq.job"
							  " WHERE execution_id OPERATOR(pg_catalog.=) $1",
							  1, (Oid[]) {UUIDOID}),
						 &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "vq_job: reading the payload failed");
	if (SPI_processed == 1)
	{
		HeapTuple	tup = SPI_copytuple(SPI_tuptable->vals[0]);
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		n;
		Oid			owner = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &n));
		char	   *handler = SPI_getvalue(tup, desc, 3);
		bool		notify_job = DatumGetBool(SPI_getbinval(tup, desc, 4, &n));

		/* (a consumer grant covers NOTIFY handlers' jobs only, as in MAY_CONSUME) */
		if (has_privs_of_role(caller, owner) || (notify_job && GrantedConsumer(caller, handler)))
		{
			Datum		d = SPI_getbinval(tup, desc, 1, &isnull);

			if (!isnull)
				result = SPI_datumTransfer(d, false, -1);
		}
	}
	VqFinishAsOwner(&saved);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

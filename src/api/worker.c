/*
 * worker.c: the protocol of workers outside the server, which run the jobs
 * of external handlers in the application's own language:
 *  - vq_take_jobs(handlers, max_jobs, lease): due jobs of those handlers,
 *    RUNNING under a lease (claim/take.c);
 *  - vq_reply_jobs(ids, attempts, outcomes, errors, retry_at): complete,
 *    fail, retry or give back many at once (reply.c);
 *  - vq_extend_leases(ids, attempts, lease): keep holding long jobs, and see
 *    cancellation requests;
 *  - vq_log_jobs and vq_progress_jobs: log lines and progress, as function
 *    handlers write them.
 * A worker acts only on jobs of roles it is a member of, or of handlers it
 * was granted with vq_grant_consumer (superusers: all). A worker learns that
 * jobs are due from NOTIFY on the handler's channel (run/notify.c).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "main/guc.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "claim/take.h"
#include "run/interceptors.h"
#include "run/joblog.h"
#include "run/roles.h"
#include "api/reply.h"
#include "api/worker.h"

PG_FUNCTION_INFO_V1(vq_take_jobs);
PG_FUNCTION_INFO_V1(vq_reply_jobs);
PG_FUNCTION_INFO_V1(vq_extend_leases);
PG_FUNCTION_INFO_V1(vq_log_jobs);
PG_FUNCTION_INFO_V1(vq_progress_jobs);

/* Most handlers one take names, and most jobs or replies one call handles. */
#define MAX_TAKE_HANDLERS 64
#define MAX_BATCH 10000

/* The lease when none is given: vq.execution_timeout_ms, or 5 minutes when that is 0. */
#define DEFAULT_LEASE_MS 300000
/* A lease is 1 s to 24 h long. */
#define MIN_LEASE_MS 1000
#define MAX_LEASE_MS (24 * 3600 * 1000)

static void
InvalidArgument(const char *fmt, const char *function)
{
	ereport(ERROR,
			(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
			 errmsg(fmt, function)));
}

/* A lease's length in milliseconds: argument argno (absent or NULL: the default), checked. */
int64
VqLeaseMs(FunctionCallInfo fcinfo, int argno, const char *function)
{
	Interval   *lease;
	int64		ms;

	if (argno >= PG_NARGS() || PG_ARGISNULL(argno))
		return vq_execution_timeout_ms > 0 ? vq_execution_timeout_ms : DEFAULT_LEASE_MS;
	lease = PG_GETARG_INTERVAL_P(argno);
	/* (months as 30 days, as PostgreSQL's interval comparisons count them) */
	ms = (lease->time + (lease->day + (int64) lease->month * DAYS_PER_MONTH) * USECS_PER_DAY) / 1000;
	if (ms < MIN_LEASE_MS || ms > MAX_LEASE_MS)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s: a lease must be between 1 second and 24 hours long", function)));
	return ms;
}

/* The external handlers a take names, looked up and checked. */
static VqHandler **
TakeHandlers(VqRegistry *registry, ArrayType *names, int *n)
{
	Datum	   *elems;
	bool	   *nulls;
	VqHandler **handlers;

	deconstruct_array(names, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, n);
	if (*n < 1 || *n > MAX_TAKE_HANDLERS)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("vq_take_jobs: handlers must name 1 to %d handlers, got %d", MAX_TAKE_HANDLERS, *n)));
	handlers = palloc(sizeof(VqHandler *) * *n);
	for (int i = 0; i < *n; i++)
	{
		char	   *name;

		if (nulls[i])
			InvalidArgument("%s: handlers must not contain NULL", "vq_take_jobs");
		name = TextDatumGetCString(elems[i]);
		if (!vq_valid_name(name, strlen(name)))
			ereport(ERROR,
					(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
					 errmsg("invalid handler name \"%s\"", name)));
		handlers[i] = VqLookupHandler(registry, name);
		if (handlers[i] == NULL)
			VqReportUnregisteredHandler(registry, name);
		if (handlers[i]->is_function)
			ereport(ERROR,
					(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
					 errmsg("handler \"%s\" is a function handler: its jobs are run by the background workers",
							name)));
		for (int k = 0; k < i; k++)
			if (handlers[k] == handlers[i])
				ereport(ERROR,
						(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
						 errmsg("vq_take_jobs: handler \"%s\" is named twice", name)));
	}
	return handlers;
}

/*
 * The interceptors' on_dispatch for each job a take put into store (a take is
 * the dispatch of an external handler's job): queued for an executor, as a
 * client's session runs no administrator's code (interceptors.c).
 */
static void
InterceptTaken(Tuplestorestate *store, TupleDesc desc)
{
	TupleTableSlot *slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);

	tuplestore_rescan(store);
	while (tuplestore_gettupleslot(store, true, false, slot))
	{
		VqJob	   *job = palloc0(sizeof(VqJob));

		slot_getallattrs(slot);
		memcpy(&job->execution_id, DatumGetUUIDP(slot->tts_values[0]), sizeof(pg_uuid_t));
		job->attempt_number = DatumGetInt32(slot->tts_values[1]);
		job->handler = TextDatumGetCString(slot->tts_values[2]);
		job->job_id = TextDatumGetCString(slot->tts_values[3]);
		job->metadata = DatumGetJsonbPCopy(slot->tts_values[5]);
		job->queue = TextDatumGetCString(slot->tts_values[6]);
		job->priority = DatumGetInt32(slot->tts_values[7]);
		job->max_attempts = DatumGetInt32(slot->tts_values[8]);
		job->scheduled_at = DatumGetTimestampTz(slot->tts_values[9]);
		job->external = true;
		job->running = true;
		VqInterceptDispatch(job);
	}
	ExecDropSingleTupleTableSlot(slot);
	tuplestore_rescan(store);	/* (whoever reads the result reads it from its start) */
}

/*
 * A take in a transaction of its own (not in a transaction block, nothing
 * written before it) commits without waiting for its WAL flush: the worker
 * gets its jobs a flush sooner. A crash that loses the commit leaves the jobs
 * ENQUEUED, to be taken again (at least once, as always); no reply can
 * outlive it, since a reply's own commit waits for the WAL before it. A take
 * in the caller's larger transaction leaves its commit as it is.
 */
static void
TakeCommitsAsync(void)
{
	if (IsTransactionBlock() || TransactionIdIsValid(GetTopTransactionIdIfAny()))
		return;
	(void) set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
							 true, 0, false);
}

/* Take jobs into store (VQ_TAKE_COLUMNS); the common part of vq_take_jobs and vq_pull. */
int
VqTakeInto(FunctionCallInfo fcinfo, const char *function, ArrayType *handler_names, int32 max_jobs,
		   int64 lease_ms, Tuplestorestate *store, TupleDesc desc)
{
	VqRegistry *registry;
	VqTakeRequest req;
	VqSavedUser saved;
	int			taken;

	VqRequireWritable(function);
	/* (a transaction snapshot cannot lock the jobs other workers took since: it would fail to serialize) */
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s needs a READ COMMITTED transaction", function),
				 errhint("Take jobs in a transaction of their own, or SET TRANSACTION ISOLATION LEVEL READ COMMITTED.")));
	if (max_jobs < 1 || max_jobs > MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s: max_jobs must be between 1 and %d, got %d", function, MAX_BATCH, max_jobs)));
	registry = VqRegistryGet();
	req.handlers = TakeHandlers(registry, handler_names, &req.nhandlers);
	TakeCommitsAsync();
	req.max_jobs = max_jobs;
	req.lease_ms = lease_ms;
	req.caller = GetUserId();
	VqConnectAsOwner(registry->owner, &saved);
	taken = VqTakeJobs(registry, &req, store, desc);
	if (taken > 0 && registry->interceptors != NIL)
		InterceptTaken(store, desc);
	VqFinishAsOwner(&saved);
	return taken;
}

/* vq_take_jobs(handlers, max_jobs DEFAULT 1, lease DEFAULT NULL) */
Datum
vq_take_jobs(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Tuplestorestate *store;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1))
		InvalidArgument("%s: handlers and max_jobs must not be null", "vq_take_jobs");
	store = VqMaterializeResult(fcinfo, &desc);
	(void) VqTakeInto(fcinfo, "vq_take_jobs", PG_GETARG_ARRAYTYPE_P(0), PG_GETARG_INT32(1),
					  VqLeaseMs(fcinfo, 2, "vq_take_jobs"), store, desc);
	return (Datum) 0;
}

/*
 * The elements of argument argno, an array of the given type with n elements
 * (n < 0: any number, set here); NULL elements only where nulls_ok. A NULL
 * array: NULL, when optional.
 */
static Datum *
ArrayArgument(FunctionCallInfo fcinfo, int argno, Oid type, int *n, bool **nulls, bool optional,
			  const char *function, const char *name)
{
	int16		len;
	bool		byval;
	char		align;
	Datum	   *elems;
	int			count;

	if (PG_ARGISNULL(argno))
	{
		if (!optional)
			ereport(ERROR,
					(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
					 errmsg("%s: %s must not be null", function, name)));
		*nulls = NULL;
		return NULL;
	}
	get_typlenbyvalalign(type, &len, &byval, &align);
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(argno), type, len, byval, align, &elems, nulls, &count);
	if (*n >= 0 && count != *n)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s: %s has %d elements, execution_ids %d", function, name, count, *n)));
	if (count > MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("%s: at most %d jobs per call, got %d", function, MAX_BATCH, count)));
	*n = count;
	return elems;
}

/* The execution ids and attempts of a call (arguments 0 and 1), checked: no NULL, as many of each. */
static int
JobArguments(FunctionCallInfo fcinfo, const char *function, Datum **ids, Datum **attempts)
{
	int			n = -1;
	bool	   *id_nulls;
	bool	   *attempt_nulls;

	*ids = ArrayArgument(fcinfo, 0, UUIDOID, &n, &id_nulls, false, function, "execution_ids");
	*attempts = ArrayArgument(fcinfo, 1, INT4OID, &n, &attempt_nulls, false, function, "attempts");
	for (int i = 0; i < n; i++)
		if (id_nulls[i] || attempt_nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
					 errmsg("%s: execution_ids and attempts must not contain NULL", function)));
	return n;
}

/* An outcome's name: complete, fail, retry or release. */
static VqReplyKind
ReplyKind(const char *outcome)
{
	if (strcmp(outcome, "complete") == 0)
		return VQ_REPLY_COMPLETE;
	if (strcmp(outcome, "fail") == 0)
		return VQ_REPLY_FAIL;
	if (strcmp(outcome, "retry") == 0)
		return VQ_REPLY_RETRY;
	if (strcmp(outcome, "release") == 0)
		return VQ_REPLY_RELEASE;
	ereport(ERROR,
			(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
			 errmsg("vq_reply_jobs: unknown outcome \"%s\"", outcome),
			 errhint("Use complete, fail, retry or release.")));
	return VQ_REPLY_COMPLETE;	/* keep the compiler quiet */
}

/* The replies of a vq_reply_jobs call, from its arrays. */
static VqReply *
RepliesFromArguments(FunctionCallInfo fcinfo, int *n)
{
	Datum	   *ids;
	Datum	   *attempts;
	bool	   *nulls[3];
	Datum	   *outcomes;
	Datum	   *errors;
	Datum	   *retry_at;
	VqReply    *replies;

	*n = JobArguments(fcinfo, "vq_reply_jobs", &ids, &attempts);
	outcomes = ArrayArgument(fcinfo, 2, TEXTOID, n, &nulls[0], true, "vq_reply_jobs", "outcomes");
	errors = ArrayArgument(fcinfo, 3, TEXTOID, n, &nulls[1], true, "vq_reply_jobs", "errors");
	retry_at = ArrayArgument(fcinfo, 4, TIMESTAMPTZOID, n, &nulls[2], true, "vq_reply_jobs", "retry_at");
	replies = palloc0(sizeof(VqReply) * Max(*n, 1));
	for (int i = 0; i < *n; i++)
	{
		VqReply    *r = &replies[i];

		memcpy(&r->execution_id, DatumGetUUIDP(ids[i]), sizeof(pg_uuid_t));
		r->has_attempt = true;
		r->attempt = DatumGetInt32(attempts[i]);
		r->kind = outcomes == NULL || nulls[0][i] ? VQ_REPLY_COMPLETE : ReplyKind(TextDatumGetCString(outcomes[i]));
		if (r->kind == VQ_REPLY_FAIL || r->kind == VQ_REPLY_RETRY)
			r->error = errors != NULL && !nulls[1][i] ? VqCapText(TextDatumGetCString(errors[i])) :
				r->kind == VQ_REPLY_FAIL ? "failed (no error text given)" : "retry asked by the worker";
		if (retry_at != NULL && !nulls[2][i])
		{
			r->retry_at = DatumGetTimestampTz(retry_at[i]);
			VqCheckFiniteTime(r->retry_at, "retry_at");
		}
	}
	return replies;
}

/* vq_reply_jobs(execution_ids, attempts, outcomes, errors, retry_at): the replies ignored, with why */
Datum
vq_reply_jobs(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Tuplestorestate *store;
	VqRegistry *registry;
	VqSavedUser saved;
	VqReply    *replies;
	Oid			caller = GetUserId();
	int			n;

	VqRequireWritable("vq_reply_jobs");
	replies = RepliesFromArguments(fcinfo, &n);
	store = VqMaterializeResult(fcinfo, &desc);
	registry = VqRegistryGet();
	VqConnectAsOwner(registry->owner, &saved);
	VqApplyReplies(registry, caller, replies, n);	/* (the caller: GetUserId() is the owner now) */
	/* (before SPI_finish: a reason may live in SPI memory; the store copies each row) */
	for (int i = 0; i < n; i++)
	{
		Datum		row[3];
		bool		nulls[3] = {false, false, false};

		if (replies[i].ignored == NULL)
			continue;
		row[0] = UUIDPGetDatum(&replies[i].execution_id);
		row[1] = Int32GetDatum(replies[i].attempt);
		row[2] = CStringGetTextDatum(replies[i].ignored);
		tuplestore_putvalues(store, desc, row, nulls);
	}
	VqFinishAsOwner(&saved);
	return (Datum) 0;
}

/* The ids and attempts as the two array parameters of a statement ($1, $2). */
static void
JobArrays(Datum *ids, Datum *attempts, int n, Datum *values)
{
	values[0] = PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[1] = PointerGetDatum(construct_array(attempts, n, INT4OID, 4, true, TYPALIGN_INT));
}

/*
 * The jobs a worker holds, of this call's ids and attempts (u.e and u.a, from
 * $1 and $2: a join planned for index scans, one probe of the primary key
 * each); the caller's rights: $3, $4.
 */
#define HELD_JOBS \
	" j.execution_id OPERATOR(pg_catalog.=) u.e AND j.attempt_number OPERATOR(pg_catalog.=) u.a" \
	" AND" VQ_HELD("j") " AND ($3 OR" VQ_MAY_CONSUME("$4") ")"

/* vq_extend_leases(execution_ids, attempts, lease DEFAULT NULL): the jobs still held */
Datum
vq_extend_leases(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr extend_plan = NULL;
	TupleDesc	desc;
	Tuplestorestate *store;
	VqRegistry *registry;
	VqSavedUser saved;
	Datum	   *ids;
	Datum	   *attempts;
	Datum		values[6];
	int			n;
	int			index_scans;

	VqRequireWritable("vq_extend_leases");
	n = JobArguments(fcinfo, "vq_extend_leases", &ids, &attempts);
	JobArrays(ids, attempts, n, values);
	values[2] = BoolGetDatum(superuser());
	values[3] = ObjectIdGetDatum(GetUserId());
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[4] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(DatumGetTimestampTz(values[5]),
																 VqLeaseMs(fcinfo, 2, "vq_extend_leases")));
	store = VqMaterializeResult(fcinfo, &desc);
	registry = VqRegistryGet();
	VqConnectAsOwner(registry->owner, &saved);
	index_scans = VqIndexScansBegin();
	/* (updated_at moves too: the rescue abandons a lease only if the row is as it read it) */
	if (SPI_execute_plan(VqKeepGenericPlan(&extend_plan,
										   "UPDATE vq.job_active j SET lease_until = $5, updated_at = $6"
										   " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(e, a)"
										   " WHERE" HELD_JOBS
										   " RETURNING j.execution_id, j.lease_until, j.cancel_requested",
										   6, (Oid[]) {UUIDARRAYOID, INT4ARRAYOID, BOOLOID, OIDOID, TIMESTAMPTZOID,
										   TIMESTAMPTZOID}),
						 values, NULL, false, 0) != SPI_OK_UPDATE_RETURNING)
		elog(ERROR, "vq_job: extending leases failed");
	VqIndexScansEnd(index_scans);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		Datum		row[3];
		bool		nulls[3];

		heap_deform_tuple(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, row, nulls);
		tuplestore_putvalues(store, desc, row, nulls);
	}
	VqFinishAsOwner(&saved);
	return (Datum) 0;
}

/* The log lines of a vq_log_jobs call: levels as stored, messages within the line limit. */
static void
LogLines(FunctionCallInfo fcinfo, int n, Datum *levels, Datum *messages, Datum *fields)
{
	bool	   *nulls[3];
	Datum	   *l = ArrayArgument(fcinfo, 2, TEXTOID, &n, &nulls[0], false, "vq_log_jobs", "levels");
	Datum	   *m = ArrayArgument(fcinfo, 3, TEXTOID, &n, &nulls[1], false, "vq_log_jobs", "messages");
	Datum	   *f = ArrayArgument(fcinfo, 4, JSONBOID, &n, &nulls[2], true, "vq_log_jobs", "fields");

	for (int i = 0; i < n; i++)
	{
		Jsonb	   *field = f == NULL || nulls[2][i] ? NULL : DatumGetJsonbP(f[i]);

		if (nulls[0][i] || nulls[1][i])
			InvalidArgument("%s: every line needs a level and a message", "vq_log_jobs");
		levels[i] = CStringGetTextDatum(VqLogLevel(TextDatumGetCString(l[i])));
		messages[i] = CStringGetTextDatum(VqLogMessage(DatumGetTextPP(m[i]), &field));
		fields[i] = field == NULL ? (Datum) 0 : JsonbPGetDatum(field);
	}
}

/* vq_log_jobs(execution_ids, attempts, levels, messages, fields DEFAULT NULL): lines written */
Datum
vq_log_jobs(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr log_plan = NULL;
	VqRegistry *registry;
	VqSavedUser saved;
	Datum	   *ids;
	Datum	   *attempts;
	Datum	   *levels;
	Datum	   *messages;
	Datum	   *fields;
	bool	   *field_nulls;
	int			dims[1];
	int			lbs[1] = {1};
	Datum		values[7];
	int			n;
	uint64		written;

	VqRequireWritable("vq_log_jobs");
	n = JobArguments(fcinfo, "vq_log_jobs", &ids, &attempts);
	levels = palloc(sizeof(Datum) * Max(n, 1));
	messages = palloc(sizeof(Datum) * Max(n, 1));
	fields = palloc(sizeof(Datum) * Max(n, 1));
	field_nulls = palloc(sizeof(bool) * Max(n, 1));
	LogLines(fcinfo, n, levels, messages, fields);
	for (int i = 0; i < n; i++)
		field_nulls[i] = fields[i] == (Datum) 0;
	dims[0] = n;
	JobArrays(ids, attempts, n, values);
	values[2] = PointerGetDatum(construct_array(levels, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[3] = PointerGetDatum(construct_array(messages, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[4] = PointerGetDatum(construct_md_array(fields, field_nulls, 1, dims, lbs, JSONBOID, -1, false, TYPALIGN_INT));
	values[5] = BoolGetDatum(superuser());
	values[6] = ObjectIdGetDatum(GetUserId());
	registry = VqRegistryGet();
	VqConnectAsOwner(registry->owner, &saved);
	/* a line of an attempt the job has reached (a failed attempt's lines are kept), of a job the caller may act on */
	if (SPI_execute_plan(VqKeepCustomPlan(&log_plan,
										  "INSERT INTO vq.job_log (execution_id, attempt_number, level, message, fields)"
										  " SELECT u.e, u.a, u.l, u.m, u.f"
										  " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3),"
										  "  pg_catalog.unnest($4), pg_catalog.unnest($5)) AS u(e, a, l, m, f)"
										  " JOIN vq.job j ON j.execution_id OPERATOR(pg_catalog.=) u.e"
										  " WHERE u.a OPERATOR(pg_catalog.<=) j.attempt_number AND j.handler_function IS NULL"
										  " AND ($6 OR" VQ_MAY_CONSUME("$7") ")",
										  7, (Oid[]) {UUIDARRAYOID, INT4ARRAYOID, TEXTARRAYOID, TEXTARRAYOID, JSONBARRAYOID,
										  BOOLOID, OIDOID}),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: writing log lines failed");
	written = SPI_processed;
	VqFinishAsOwner(&saved);
	PG_RETURN_INT32((int32) written);
}

/* vq_progress_jobs(execution_ids, attempts, total, succeeded, failed): jobs updated */
Datum
vq_progress_jobs(PG_FUNCTION_ARGS)
{
	static SPIPlanPtr progress_plan = NULL;
	VqRegistry *registry;
	VqSavedUser saved;
	Datum	   *ids;
	Datum	   *attempts;
	Datum		values[7];
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			n;
	int			index_scans;
	uint64		updated;

	VqRequireWritable("vq_progress_jobs");
	n = JobArguments(fcinfo, "vq_progress_jobs", &ids, &attempts);
	JobArrays(ids, attempts, n, values);
	values[2] = BoolGetDatum(superuser());
	values[3] = ObjectIdGetDatum(GetUserId());
	for (int k = 0; k < 3; k++)
	{
		bool	   *knulls;
		int			m = n;

		/* (checked for their length only: NULL elements keep a counter) */
		(void) ArrayArgument(fcinfo, 2 + k, INT8OID, &m, &knulls, true, "vq_progress_jobs",
							 k == 0 ? "total" : k == 1 ? "succeeded" : "failed");
		values[4 + k] = PG_ARGISNULL(2 + k) ? (Datum) 0 : PG_GETARG_DATUM(2 + k);
		nulls[4 + k] = PG_ARGISNULL(2 + k) ? 'n' : ' ';
	}
	registry = VqRegistryGet();
	VqConnectAsOwner(registry->owner, &saved);
	index_scans = VqIndexScansBegin();
	if (SPI_execute_plan(VqKeepGenericPlan(&progress_plan,
										   "UPDATE vq.job_active j SET progress_total = coalesce(u.t, j.progress_total),"
										   " progress_succeeded = coalesce(u.s, j.progress_succeeded),"
										   " progress_failed = coalesce(u.f, j.progress_failed)"
										   " FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($5),"
										   "  pg_catalog.unnest($6), pg_catalog.unnest($7)) AS u(e, a, t, s, f)"
										   " WHERE" HELD_JOBS,
										   7, (Oid[]) {UUIDARRAYOID, INT4ARRAYOID, BOOLOID, OIDOID, INT8ARRAYOID,
										   INT8ARRAYOID, INT8ARRAYOID}),
						 values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "vq_job: setting progress failed");
	VqIndexScansEnd(index_scans);
	updated = SPI_processed;
	VqFinishAsOwner(&saved);
	PG_RETURN_INT32((int32) updated);
}

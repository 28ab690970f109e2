/*
 * consumer.c: the single-job calls of workers outside the server, kept from
 * the first version of the protocol: vq_complete() and vq_fail() answer one
 * taken job, vq_pull() takes the due jobs of one handler (vq_take_jobs with
 * the default lease, and 0.1.0's result columns), and vq_job_payload() reads
 * the payload of a job the caller may consume. vq_take(), which took the one
 * job an announcement named, has no announcements to follow any more: its
 * symbol only answers a database still at 0.1.0 (see worker.c and reply.c
 * for the protocol).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "main/checks.h"
#include "main/errcodes.h"
#include "util/spi_util.h"
#include "cache/registry.h"
#include "claim/take.h"
#include "run/roles.h"
#include "api/reply.h"
#include "api/worker.h"

PG_FUNCTION_INFO_V1(vq_complete);
PG_FUNCTION_INFO_V1(vq_fail);
PG_FUNCTION_INFO_V1(vq_pull);
PG_FUNCTION_INFO_V1(vq_take);
PG_FUNCTION_INFO_V1(vq_job_payload);

/* Answer one job (error NULL: complete); returns whether the reply was applied. */
static bool
ReplyOne(FunctionCallInfo fcinfo, const char *error, int attempt_arg)
{
	VqRegistry *registry = VqRegistryGet();
	Oid			caller = GetUserId();
	VqSavedUser saved;
	VqReply		reply;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_ARGUMENT),
				 errmsg("execution_id must not be null")));
	memset(&reply, 0, sizeof(reply));
	memcpy(&reply.execution_id, PG_GETARG_UUID_P(0), sizeof(pg_uuid_t));
	reply.has_attempt = !PG_ARGISNULL(attempt_arg);
	reply.attempt = reply.has_attempt ? PG_GETARG_INT32(attempt_arg) : 0;
	reply.kind = error == NULL ? VQ_REPLY_COMPLETE : VQ_REPLY_FAIL;
	reply.error = error;
	VqConnectAsOwner(registry->owner, &saved);
	VqApplyReplies(registry, caller, &reply, 1);
	if (reply.ignored != NULL && strcmp(reply.ignored, "no such job that you may reply to") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_VQ_NO_SUCH_JOB),
				 errmsg("no job %s that you may reply to",
						DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&reply.execution_id))))));
	/* (ignored may live in SPI memory: report it before SPI_finish frees it) */
	if (reply.ignored != NULL)
		ereport(WARNING,
				(errcode(ERRCODE_VQ_REPLY_IGNORED),
				 errmsg("reply ignored: %s", reply.ignored),
				 errdetail("The reply was for job %s.",
						   DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&reply.execution_id))))));
	VqFinishAsOwner(&saved);
	return reply.ignored == NULL;
}

/* vq_complete(execution_id, attempt DEFAULT NULL) */
Datum
vq_complete(PG_FUNCTION_ARGS)
{
	VqRequireWritable("vq_complete");
	VqRequireInstalledVersion("vq_complete");
	PG_RETURN_BOOL(ReplyOne(fcinfo, NULL, 1));
}

/* vq_fail(execution_id, error, attempt DEFAULT NULL) */
Datum
vq_fail(PG_FUNCTION_ARGS)
{
	const char *error;

	VqRequireWritable("vq_fail");
	VqRequireInstalledVersion("vq_fail");
	/* (cut as it will be stored, so that interceptors see what the job records) */
	error = PG_ARGISNULL(1) ? "failed (no error text given)" : VqCapText(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	PG_RETURN_BOOL(ReplyOne(fcinfo, error, 2));
}

/* The columns of vq_take_jobs' result, for the store vq_pull takes into. */
static TupleDesc
TakeResultDesc(void)
{
	TupleDesc	desc = CreateTemplateTupleDesc(VQ_TAKE_COLUMNS);
	Oid			types[VQ_TAKE_COLUMNS] = {UUIDOID, INT4OID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TEXTOID,
	INT4OID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID};

	for (int i = 0; i < VQ_TAKE_COLUMNS; i++)
		TupleDescInitEntry(desc, (AttrNumber) (i + 1), NULL, types[i], -1, 0);
	return desc;
}

/*
 * vq_pull(handler, max_jobs): take up to max_jobs due jobs of an external
 * handler, with the default lease, in the columns 0.1.0 returned
 * (execution_id, job_id, handler, attempt, payload, metadata, scheduled_at,
 * cancel_requested).
 */
Datum
vq_pull(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Tuplestorestate *store;
	TupleDesc	take_desc = TakeResultDesc();
	Tuplestorestate *taken = tuplestore_begin_heap(false, false, work_mem);
	TupleTableSlot *slot = MakeSingleTupleTableSlot(take_desc, &TTSOpsMinimalTuple);
	Datum		name;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_VQ_INVALID_HANDLER_NAME),
				 errmsg("handler name must not be null")));
	name = PG_GETARG_DATUM(0);
	VqRequireInstalledVersion("vq_pull");
	store = VqMaterializeResult(fcinfo, &desc);
	(void) VqTakeInto(fcinfo, "vq_pull", construct_array(&name, 1, TEXTOID, -1, false, TYPALIGN_INT),
					  PG_ARGISNULL(1) ? 1 : PG_GETARG_INT32(1), VqLeaseMs(fcinfo, 2, "vq_pull"), taken, take_desc);
	while (tuplestore_gettupleslot(taken, true, false, slot))
	{
		Datum		row[8];
		bool		nulls[8] = {false, false, false, false, false, false, false, false};
		static const int from[7] = {0, 3, 2, 1, 4, 5, 9};

		slot_getallattrs(slot);
		for (int i = 0; i < 7; i++)
		{
			row[i] = slot->tts_values[from[i]];
			nulls[i] = slot->tts_isnull[from[i]];
		}
		row[7] = BoolGetDatum(false);	/* (a job cancelled before its take is not taken) */
		tuplestore_putvalues(store, desc, row, nulls);
	}
	ExecDropSingleTupleTableSlot(slot);
	tuplestore_end(taken);
	return (Datum) 0;
}

/* vq_take(execution_id, attempt, handler): 0.1.0's; see the top of this file. */
Datum
vq_take(PG_FUNCTION_ARGS)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("vq_take() was replaced by vq_take_jobs() in vq_job 0.2.0"),
			 errhint("Run ALTER EXTENSION vq_job UPDATE, and take jobs with vq_take_jobs().")));
	PG_RETURN_NULL();
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

		/* (a consumer grant covers external handlers' jobs only, as in VQ_MAY_CONSUME) */
		if (has_privs_of_role(caller, owner) || (notify_job && VqGrantedConsumer(caller, handler)))
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

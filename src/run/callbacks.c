/*
 * callbacks.c: calling the functions an administrator registers to run
 * inside vq_job's own work: interceptors around every dispatch
 * (interceptors.c) and transition listeners (listeners.c).
 *
 * Where they run. A callback runs as the owner of its function (normally a
 * superuser), so it must never run where a tenant's objects can reach it: a
 * tenant's temporary table named like a table the callback writes would run
 * the tenant's trigger with the owner's rights (search_path puts pg_temp
 * first unless it names it). So a callback runs inline, in the transaction of
 * what it sees, only in an executor's own code (VqCallbacksRunInline): there
 * session.c has removed whatever the last job's role left in the session,
 * temporary objects included, before vq_job records anything. Everywhere else
 * (a client's session: vq_cancel, vq_complete, vq_fail, vq_redrive,
 * vq_reassign_jobs, ...; user code inside an executor: a handler or a
 * destination function that calls those) nothing of the administrator's runs:
 * the call is queued for an executor (deferred.c), which makes it after the
 * commit, with the arguments as they were.
 *
 * How they run: as the owner of the function, never with the rights of the
 * role whose job it sees, in a security-restricted operation, and in a
 * subtransaction of its own: its error rolls back only its own writes, is
 * logged (a WARNING, and an ERROR line in the job's log) and changes nothing
 * else: the job runs, and its outcome is recorded, as if the callback had
 * not been there. The function is looked up through funccache.c, so an ALTER
 * FUNCTION takes effect at the next call.
 *
 * The interceptors (interceptors.c) and the transition listeners
 * (listeners.c) decide, each time, whether to call here or to queue.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "main/checks.h"
#include "main/shmem.h"
#include "util/spi_util.h"
#include "cache/funccache.h"
#include "cache/registry.h"
#include "run/callbacks.h"
#include "run/roles.h"
#include "run/subxact.h"
#include "run/watch.h"

/* Do callbacks run here, inline, in the transaction of what they see? */
bool
VqCallbacksRunInline(void)
{
	/* an executor's own code: nothing of any job's role is left in its session (session.c) */
	return VqMyExecutorSlot != NULL && !VqInUserCode();
}

typedef struct CallbackCall
{
	VqFunction *function;
	int			nargs;
	Datum	   *args;
} CallbackCall;

/* The callback, as its owner (see roles.h), inside the caller's subtransaction; its work is kept. */
static bool
CallAsOwner(void *arg)
{
	CallbackCall *call = (CallbackCall *) arg;
	VqFunction *f = call->function;
	LOCAL_FCINFO(fcinfo, 3);
	VqSavedUser saved;

	InitFunctionCallInfoData(*fcinfo, &f->flinfo, call->nargs, InvalidOid, NULL, NULL);
	for (int i = 0; i < call->nargs; i++)
	{
		fcinfo->args[i].value = call->args[i];
		fcinfo->args[i].isnull = call->args[i] == (Datum) 0;
	}
	if (f->flinfo.fn_strict)
		for (int i = 0; i < call->nargs; i++)
			if (fcinfo->args[i].isnull)
				return true;
	VqEnterCallback(f->owner, &saved);
	PushActiveSnapshot(GetTransactionSnapshot());
	(void) FunctionCallInvoke(fcinfo);
	PopActiveSnapshot();
	VqLeaveCallback(&saved);
	return true;
}

/*
 * Call fn(args) (a (Datum) 0 argument is NULL) as its owner in a
 * subtransaction. Returns NULL, or the error message (in the caller's memory
 * context) after rolling the callback back. A cancel or termination is not
 * returned: it propagates (VqTryInSubtransaction).
 */
char *
VqCallCallback(Oid fn, int nargs, Datum *args)
{
	VqFunction *function;
	CallbackCall call;
	ErrorData  *volatile edata = NULL;
	char	   *error;

	Assert(nargs <= 3);
	/* pinned: the callback's own work may call it again, which must not look it up anew under this call */
	function = VqFunctionPin(fn);
	if (function == NULL)
		return psprintf("function %u was dropped", fn);
	call.function = function;
	call.nargs = nargs;
	call.args = args;
	PG_TRY();
	{
		edata = VqTryInSubtransaction(CallAsOwner, &call);
	}
	PG_FINALLY();
	{
		VqFunctionUnpin(function);
	}
	PG_END_TRY();
	if (edata == NULL)
		return NULL;
	error = pstrdup(edata->message ? edata->message : "unknown error");
	FreeErrorData(edata);
	return error;
}

/*
 * A callback failed: a WARNING for the server log, and an ERROR line in the
 * job's log (written as the extension owner, in the caller's transaction).
 */
void
VqReportCallbackFailure(const char *what, pg_uuid_t *execution_id, int32 attempt, const char *error)
{
	static SPIPlanPtr plan = NULL;
	VqRegistry *registry = VqRegistryGet();
	VqSavedUser saved;
	char	   *message = VqCapText(psprintf("%s failed: %s", what, error));
	Datum		values[3];

	ereport(WARNING,
			(errmsg("vq_job: %s", message),
			 errdetail("execution %s, attempt %d; the job goes on as if it had not been called",
					   DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(execution_id))), attempt)));
	values[0] = UUIDPGetDatum(execution_id);
	values[1] = Int32GetDatum(attempt);
	values[2] = CStringGetTextDatum(message);
	VqConnectAsOwner(registry->owner, &saved);
	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "INSERT INTO vq.job_log (execution_id, attempt_number, level, message)"
							  " VALUES ($1, $2, 'ERROR', $3)",
							  3, (Oid[]) {UUIDOID, INT4OID, TEXTOID}),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: writing a job log line failed");
	VqFinishAsOwner(&saved);
}

/* The outcome's name, as on_complete receives it. */
const char *
VqOutcomeName(VqOutcomeKind kind)
{
	switch (kind)
	{
		case VQ_OUTCOME_COMPLETED:
			return "COMPLETED";
		case VQ_OUTCOME_FAILED:
			return "FAILED";
		case VQ_OUTCOME_ABANDONED:
			return "ABANDONED";
		case VQ_OUTCOME_INTERRUPTED:
			return "INTERRUPTED";
		case VQ_OUTCOME_CANCELLED:
			return "CANCELLED";
	}
	return "UNKNOWN";
}

/*
 * Call one interceptor's on_dispatch (complete false) or on_complete
 * (complete true, with outcome and error, text or (Datum) 0) for the job
 * whose vq.job_context is ctx; log its failure.
 */
void
VqCallInterceptor(VqInterceptor *i, bool complete, pg_uuid_t *execution_id, int32 attempt,
				  Datum ctx, Datum outcome, Datum error)
{
	Oid			fn = complete ? i->on_complete : i->on_dispatch;
	Datum		args[3] = {ctx, outcome, error};
	char	   *failure;

	if (!OidIsValid(fn))
		return;
	failure = VqCallCallback(fn, complete ? 3 : 1, args);
	if (failure)
		VqReportCallbackFailure(psprintf("interceptor \"%s\" (%s)", i->name,
										 complete ? "on_complete" : "on_dispatch"),
								execution_id, attempt, failure);
}

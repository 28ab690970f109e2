/*
 * callbacks.c: functions an administrator registers to run inside vq_job's
 * own work: interceptors around every dispatch (here) and transition
 * listeners (listeners.c, which calls them through VqCallCallback).
 *
 * A callback runs as the owner of its function, never with the rights of the
 * role whose job it sees, in a security-restricted operation, and in a
 * subtransaction of its own: its error rolls back only its own writes, is
 * logged (a WARNING, and an ERROR line in the job's log) and changes nothing
 * else: the job runs, and its outcome is recorded, as if the callback had
 * not been there.
 *
 * Interceptors: on_dispatch(vq.job_context) before a function handler is
 * called or a NOTIFY handler's job is announced; on_complete(vq.job_context,
 * outcome, error) when the handler ended or the consumer's reply came, before
 * the outcome is written. They run in (position, name) order, in the
 * transaction that runs (or announces) the job, and outside its execution
 * timeout: keep them short.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "callbacks.h"
#include "dispatch.h"
#include "registry.h"
#include "roles.h"
#include "spi_util.h"
#include "vq_job.h"

/* The owner of a function, or InvalidOid when it was dropped. */
static Oid
FunctionOwner(Oid fn)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_proc) GETSTRUCT(tup))->proowner;
	ReleaseSysCache(tup);
	return owner;
}

typedef struct CallbackCall
{
	Oid			fn;
	FmgrInfo   *flinfo;
	int			nargs;
	Datum	   *args;
} CallbackCall;

/* The callback, as its owner (see roles.h), inside the caller's subtransaction. */
static void
CallAsOwner(void *arg)
{
	CallbackCall *call = (CallbackCall *) arg;
	Oid			fn = call->fn;
	FmgrInfo   *flinfo = call->flinfo;
	int			nargs = call->nargs;
	Datum	   *args = call->args;
	LOCAL_FCINFO(fcinfo, 3);
	VqSavedUser saved;
	Oid			owner = FunctionOwner(fn);

	if (!OidIsValid(owner))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("function %u was dropped", fn)));
	if (flinfo->fn_oid != fn)
		fmgr_info_cxt(fn, flinfo, flinfo->fn_mcxt ? flinfo->fn_mcxt : CurrentMemoryContext);
	InitFunctionCallInfoData(*fcinfo, flinfo, nargs, InvalidOid, NULL, NULL);
	for (int i = 0; i < nargs; i++)
	{
		fcinfo->args[i].value = args[i];
		fcinfo->args[i].isnull = args[i] == (Datum) 0;
	}
	if (flinfo->fn_strict)
		for (int i = 0; i < nargs; i++)
			if (fcinfo->args[i].isnull)
				return;
	VqEnterCallback(owner, &saved);
	PushActiveSnapshot(GetTransactionSnapshot());
	(void) FunctionCallInvoke(fcinfo);
	PopActiveSnapshot();
	VqLeaveCallback(&saved);
}

/*
 * Call fn(args) (a (Datum) 0 argument is NULL) as its owner in a
 * subtransaction. flinfo caches the lookup (its fn_mcxt, when set, is where;
 * fn_oid InvalidOid: not looked up yet). Returns NULL, or the error message
 * (in the caller's memory context) after rolling the callback back.
 */
char *
VqCallCallback(Oid fn, FmgrInfo *flinfo, int nargs, Datum *args)
{
	CallbackCall call = {fn, flinfo, nargs, args};
	ErrorData  *edata;
	char	   *error;

	Assert(nargs <= 3);
	edata = VqTryInSubtransaction(CallAsOwner, &call);
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
	VqBecomeOwner(registry->owner, &saved);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "vq_job: SPI_connect failed");
	if (SPI_execute_plan(VqKeepPlan(&plan,
							  "INSERT INTO vq.job_log (execution_id, attempt_number, level, message)"
							  " VALUES ($1, $2, 'ERROR', $3)",
							  3, (Oid[]) {UUIDOID, INT4OID, TEXTOID}),
						 values, NULL, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "vq_job: writing a job log line failed");
	SPI_finish();
	VqRestoreUser(&saved);
}

/* The outcome's name, as on_complete receives it. */
static const char *
OutcomeName(VqOutcomeKind kind)
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
 * Call every interceptor's on_dispatch (complete false) or on_complete
 * (complete true; outcome given) for the job, whose vq.job_context is ctx.
 * The registry is pinned: an interceptor may enqueue, which rebuilds it.
 */
static void
Intercept(VqJob *job, Datum ctx, VqOutcome *outcome)
{
	VqRegistry *registry = VqRegistryPin();
	ListCell   *lc;

	foreach(lc, registry->interceptors)
	{
		VqInterceptor *i = lfirst(lc);
		Oid			fn = outcome ? i->on_complete : i->on_dispatch;
		FmgrInfo   *flinfo = outcome ? &i->complete_flinfo : &i->dispatch_flinfo;
		Datum		args[3] = {ctx, (Datum) 0, (Datum) 0};
		char	   *error;

		if (!OidIsValid(fn))
			continue;
		flinfo->fn_mcxt = registry->mcxt;
		if (outcome)
		{
			args[1] = CStringGetTextDatum(OutcomeName(outcome->kind));
			args[2] = outcome->error ? CStringGetTextDatum(outcome->error) : (Datum) 0;
		}
		error = VqCallCallback(fn, flinfo, outcome ? 3 : 1, args);
		if (error)
			VqReportCallbackFailure(psprintf("interceptor \"%s\" (%s)", i->name,
											 outcome ? "on_complete" : "on_dispatch"),
									&job->execution_id, job->attempt_number, error);
	}
	VqRegistryRelease(registry);
}

/* Before a job is dispatched: every interceptor's on_dispatch. */
void
VqInterceptDispatch(VqJob *job)
{
	VqRegistry *registry = VqRegistryGetIfInstalled();

	if (registry != NULL && registry->interceptors != NIL)
		Intercept(job, VqJobContextDatum(job), NULL);
}

/* When a job's handler ended or its reply came, before the outcome is written: every on_complete. */
void
VqInterceptComplete(VqJob *job, VqOutcome *outcome)
{
	VqRegistry *registry = VqRegistryGetIfInstalled();

	if (registry != NULL && registry->interceptors != NIL)
		Intercept(job, VqJobContextDatum(job), outcome);
}

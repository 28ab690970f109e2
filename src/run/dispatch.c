/*
 * dispatch.c: running one job's function handler.
 *
 * A function handler is the function whose OID the job recorded at enqueue
 * (the one whose EXECUTE was checked; dropped since, the job is
 * dead-lettered, never run by a same-named successor), called through the
 * function manager with a cached FmgrInfo (funccache.c), inside its own
 * subtransaction so its writes commit with the job's outcome or roll back
 * with its error. It runs:
 *  - as the role that enqueued the job, in a session that is that role's
 *    (roles.c: session_user too; it cannot change role), after re-checking
 *    that the role still exists and still has EXECUTE; its deferred
 *    constraints and triggers are checked when it returns, and what it left
 *    in the session is removed after it (session.c);
 *  - named in pg_stat_activity (query and application_name) while it runs;
 *  - with search_path = vq.handler_search_path (plus pg_temp last), at a GUC
 *    nest level that ends with the job, where vq.context holds the job's
 *    metadata so jobs it enqueues inherit it;
 *  - under the watch (watch.c): the execution timeout cancels it (the job is
 *    then ABANDONED, with its logs), a stop's cancel interrupts it (the job is
 *    INTERRUPTED: back in line, its attempt not consumed), and a vq_cancel
 *    request ends it CANCELLED.
 *
 * A NOTIFY handler's job is announced instead (notify.c).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/interrupt.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "main/checks.h"
#include "main/compat.h"
#include "main/guc.h"
#include "main/shmem.h"
#include "cache/funccache.h"
#include "run/context.h"
#include "run/dispatch.h"
#include "run/interceptors.h"
#include "run/jobapi.h"
#include "run/roles.h"
#include "run/session.h"
#include "run/subxact.h"
#include "run/watch.h"

/*
 * The function a job recorded at enqueue, ready to call (funccache.c: looked
 * up again after any change to pg_proc). Never another one under the same
 * name: if it was dropped, *dropped is set and an error raised (the job is
 * dead-lettered, see VqRunFunctionHandler).
 */
static VqFunction *
ResolveFunction(VqJob *job, bool *dropped)
{
	VqFunction *hf = VqFunctionLookup(job->handler_fn);

	if (hf == NULL)
	{
		*dropped = true;
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_FUNCTION),
				 errmsg("handler function %s (OID %u) was dropped after the job was enqueued; a function created since under the same name is not run in its place",
						job->address, job->handler_fn)));
	}
	return hf;
}

/* Check, as of now, that the enqueuing role may still run the handler. */
static void
CheckRunPrivileges(VqJob *job, VqFunction *hf)
{
	if (vq_proc_aclcheck(hf->fn, job->enqueued_by, ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" no longer has EXECUTE on handler function %s",
						GetUserNameFromId(job->enqueued_by, false), job->address)));
}

/*
 * Name the job where operators look: pg_stat_activity's query, and
 * application_name (log_line_prefix %a; the executor's own name, then the
 * execution id, attempt and handler, cut at 63 bytes; set inside the user
 * code's GUC nest level, so it ends with the job).
 */
static void
ShowJobIdentity(VqJob *job)
{
	char	   *uuid = DatumGetCString(DirectFunctionCall1(uuid_out, UUIDPGetDatum(&job->execution_id)));
	char	   *name = psprintf("vq_job executor %d: %s/%d %s", VqMyExecutorIndex, uuid,
								job->attempt_number, job->handler);

	pgstat_report_activity(STATE_RUNNING,
						   psprintf("vq_job: handler %s, execution %s, attempt %d",
									job->handler, uuid, job->attempt_number));
	/* cut here: a longer value makes PostgreSQL log a NOTICE for every job */
	name[pg_mbcliplen(name, strlen(name), NAMEDATALEN - 1)] = '\0';
	(void) set_config_option("application_name", name,
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
}

/* Call the handler (inside the subtransaction, as the enqueuing role). */
static void
CallHandler(VqJob *job, VqFunction *hf)
{
	LOCAL_FCINFO(fcinfo, 2);

	if (hf->nargs != 1 && hf->nargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_FUNCTION_DEFINITION),
				 errmsg("handler function %s must take (jsonb) or (jsonb, vq.job_context)", job->address)));

	VqBindContext(job->metadata);

	InitFunctionCallInfoData(*fcinfo, &hf->flinfo, hf->nargs, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = job->payload ? JsonbPGetDatum(job->payload) : (Datum) 0;
	fcinfo->args[0].isnull = (job->payload == NULL);
	if (hf->nargs == 2)
	{
		fcinfo->args[1].value = VqJobContextDatum(job);
		fcinfo->args[1].isnull = false;
	}
	/* a STRICT handler is not called for a NULL payload: nothing to do counts as done */
	if (hf->flinfo.fn_strict && job->payload == NULL)
		return;

	PushActiveSnapshot(GetTransactionSnapshot());
	(void) FunctionCallInvoke(fcinfo);
	PopActiveSnapshot();
}

/*
 * What an error the handler (or its checks) raised makes of the job: a
 * cancel is ABANDONED when the execution timeout sent it, INTERRUPTED when a
 * stop did, and part of a cancellation when the vq_cancel grace did; anything
 * else is FAILED (for good when the authorised function was dropped).
 */
static void
ClassifyError(ErrorData *edata, bool dropped, VqOutcome *outcome)
{
	bool		cancelled = edata->sqlerrcode == ERRCODE_QUERY_CANCELED;

	if (cancelled && VqHandlerCancelForced())
	{
		outcome->kind = VQ_OUTCOME_FAILED;	/* made CANCELLED by MakeCancelled */
		outcome->error = psprintf("the handler did not stop within vq.cancel_grace_ms (%d ms) of the request, and was interrupted",
								  vq_cancel_grace_ms);
	}
	else if (cancelled && VqUserCodeTimedOut())
	{
		outcome->kind = VQ_OUTCOME_ABANDONED;
		outcome->error = psprintf("execution timed out after %d ms", vq_execution_timeout_ms);
	}
	else if (cancelled && ShutdownRequestPending)
	{
		outcome->kind = VQ_OUTCOME_INTERRUPTED;
		outcome->error = psprintf("interrupted by a stop: handler still running after vq.shutdown_grace_ms (%d ms); the attempt does not count",
								  vq_shutdown_grace_ms);
	}
	else
	{
		outcome->kind = VQ_OUTCOME_FAILED;
		outcome->permanent = dropped;	/* no retry can bring the authorised function back */
		/* (cut as it will be stored: interceptors and logs see what the job records) */
		outcome->error = pstrdup(VqCapText(edata->message ? edata->message : "handler failed"));
	}
}

/*
 * A job asked to stop ends CANCELLED however its handler ended: returned
 * early (its writes are kept), raised, or was cut; it is never retried.
 */
static void
MakeCancelled(VqOutcome *outcome)
{
	outcome->error = outcome->kind == VQ_OUTCOME_COMPLETED ? pstrdup("cancelled while running")
		: psprintf("cancelled while running: %s", outcome->error);
	outcome->kind = VQ_OUTCOME_CANCELLED;
}

/* A handler's run, as the subtransaction that runs it sees it. */
typedef struct HandlerRun
{
	VqJob	   *job;
	bool		dropped;		/* the authorised function was dropped */
	bool		wrote;			/* the subtransaction got an XID */
} HandlerRun;

/*
 * Inside the handler's subtransaction: check and call it, as the enqueuing
 * role; what it did is kept (an error rolls it back).
 */
static bool
CallInSubtransaction(void *arg)
{
	HandlerRun *run = (HandlerRun *) arg;
	VqFunction *hf;
	VqSavedUser as_user;

	/*
	 * The claim may have taken no new lock, so catalog changes committed
	 * since this transaction began (a REVOKE, a replaced function) may not
	 * have been read yet: read them before checking and calling.
	 */
	AcceptInvalidationMessages();
	hf = ResolveFunction(run->job, &run->dropped);

	CheckRunPrivileges(run->job, hf);
	VqEnterUserCode(run->job->enqueued_by, &as_user);
	ShowJobIdentity(run->job);
	CallHandler(run->job, hf);
	VqLeaveUserCode(&as_user);

	run->wrote = TransactionIdIsValid(GetCurrentTransactionIdIfAny());
	return true;
}

/*
 * Run a function handler in a subtransaction and fill in the outcome. Errors
 * raised by the handler (or by the privilege re-check) become a FAILED
 * outcome; a cancellation by the watch timer becomes ABANDONED.
 */
void
VqRunFunctionHandler(VqJob *job, VqOutcome *outcome)
{
	TimestampTz start = GetCurrentTimestamp();
	HandlerRun	run = {job, false, false};
	ErrorData  *edata;

	memset(outcome, 0, sizeof(VqOutcome));

	/* A job whose role was dropped can never run as anyone: dead-letter it at once. */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(job->enqueued_by)))
	{
		outcome->kind = VQ_OUTCOME_FAILED;
		outcome->permanent = true;
		outcome->error = psprintf("role %u that enqueued the job no longer exists", job->enqueued_by);
		return;
	}

	VqInterceptDispatch(job);
	VqJobApiBegin(job);
	outcome->started_at = start;
	VqWatchBegin(true);

	CommandCounterIncrement();
	edata = VqTryUserCode(CallInSubtransaction, &run);
	if (edata == NULL)
	{
		VqWatchEnd(true);
		outcome->wrote = run.wrote;
		outcome->kind = VQ_OUTCOME_COMPLETED;
	}
	else
	{
		/* (the watch was disarmed before the rollback) */
		ClassifyError(edata, run.dropped, outcome);
		FreeErrorData(edata);
	}
	outcome->ends_transaction = VqSessionCleanUp();
	pgstat_report_activity(STATE_IDLE, "");

	if (VqJobCancelRequested())
		MakeCancelled(outcome);
	outcome->duration_us = GetCurrentTimestamp() - start;
	VqJobApiEnd(outcome);
	VqInterceptComplete(job, outcome);
}

